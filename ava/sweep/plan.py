"""A sweep's plan: which VFMs, heads and ability sets, on which data and cache, where the runs go, and how the jobs
are launched. Given as options (the forms of `ava fingerprint`) or as a TOML file::

    vfm = ["pixels", "random-vit"]
    head = ["knn", "probe-linear"]
    ava = [["color", "counting"], ["ocr"]]      # ability sets: one job per set (a flat list is one set)
    data = "data/ava"
    cache = "s3://bucket/features"               # a directory or any cache URL (ava.cache.location)
    out = "runs"
    executor = "slurm"                           # or "local"
    jobs = 2                                     # local: jobs at once (with gpus: one per GPU slot by default)
    gpus = "all"                                 # local: GPU slots, "all", a count (4) or GPU numbers ("0,2,5")
    jobs_per_gpu = 1                             # local: jobs sharing one GPU
    gpus_per_extract = 2                         # local: an extraction on 2 GPUs under torchrun
    gpu_min_free = 60.0                          # local: skip GPUs with less free memory (GB; default 90%)
    device = "auto"
    [slurm]
    partition = "gpu"
    gpus_per_job = 1                             # > 1: extraction runs under torchrun in the allocation
    time_min = 240
    array_parallelism = 32
    account = "my-account"
    cpus_per_job = 8

The plan is written to ``OUT/sweep/plan.toml`` (what ``ava sweep status`` and a rerun read) and checked before any
job starts: every VFM, head and ability must be known, and a SLURM partition must exist.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ava.errors import AvaError

EXECUTORS = ("local", "slurm")
PLAN_FILE = "plan.toml"


class SweepError(AvaError):
    """A plan that cannot run: unknown VFM, head, ability or partition, a bad option, a plan file that does not
    parse."""


@dataclass
class SlurmOptions:
    partition: str | None = None
    gpus_per_job: int = 0
    time_min: int = 60
    array_parallelism: int = 32
    account: str | None = None
    cpus_per_job: int = 1


@dataclass
class SweepPlan:
    vfm: list[str]
    head: list[str]
    ava: list[list[str]]  # ability sets; [[]] means every ability in the data, as one set
    data: str
    cache: str
    out: str
    executor: str = "local"
    jobs: int | None = None  # local: jobs at once; None: one per GPU slot with gpus, else 1
    device: str = "auto"
    gpus: str | None = None  # local: "all", a count ("4") or GPU numbers ("0,2,5"); None: no GPU slots
    jobs_per_gpu: int = 1
    gpus_per_extract: int = 1
    gpu_min_free: float | None = None  # GB; None: 90% of each GPU's memory
    slurm: SlurmOptions = field(default_factory=SlurmOptions)

    @property
    def folder(self) -> Path:
        """Where the plan, the jobs' state and their logs are kept: ``OUT/sweep``."""
        return Path(self.out) / "sweep"


def _sets(value: Any) -> list[list[str]]:
    """``["a", "b"]`` -> one set; ``[["a"], ["b", "c"]]`` -> two; ``"a,b"`` -> one; nothing -> every ability."""
    if not value:
        return [[]]
    if isinstance(value, str):
        value = [value]
    if all(isinstance(v, str) for v in value):
        return [[a.strip() for v in value for a in v.split(",") if a.strip()]]
    return [[a.strip() for a in (s.split(",") if isinstance(s, str) else s) if a.strip()] for s in value]


def _list(value: Any) -> list[str]:
    if isinstance(value, str):
        value = [value]
    return [v.strip() for item in value or [] for v in str(item).split(",") if v.strip()]


# What each field of a plan file may hold: a TOML file gives any type, and a wrong one is named, never a traceback.
_TEXT = (str,)
_NAMES = "a name or a list of names"
FIELD_TYPES: dict[str, tuple[str, Any]] = {
    "vfm": (_NAMES, "names"),
    "head": (_NAMES, "names"),
    "ava": ("a list of abilities or of ability lists", "sets"),
    "data": ("a path (a string)", _TEXT),
    "cache": ("a path or a URL (a string)", _TEXT),
    "out": ("a path (a string)", _TEXT),
    "executor": ("a string (local or slurm)", _TEXT),
    "jobs": ("an integer", (int,)),
    "device": ("a string (auto, cpu, cuda ...)", _TEXT),
    "gpus": ('"all", a count or a list of GPU numbers', "gpus"),
    "jobs_per_gpu": ("an integer", (int,)),
    "gpus_per_extract": ("an integer", (int,)),
    "gpu_min_free": ("a number of GB", (int, float)),
    "slurm": ("a table ([slurm] with partition, gpus_per_job ...)", (dict,)),
}
SLURM_TYPES: dict[str, tuple[str, tuple[type, ...]]] = {
    "partition": ("a string", _TEXT),
    "gpus_per_job": ("an integer", (int,)),
    "time_min": ("an integer", (int,)),
    "array_parallelism": ("an integer", (int,)),
    "account": ("a string", _TEXT),
    "cpus_per_job": ("an integer", (int,)),
}


def _fits(value: Any, kind: Any) -> bool:
    if kind == "gpus":
        return (
            isinstance(value, str)
            or _fits(value, (int,))
            or (isinstance(value, list) and all(_fits(v, (int,)) for v in value))
        )
    if kind == "names":
        return isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value))
    if kind == "sets":
        return isinstance(value, str) or (
            isinstance(value, list)
            and all(isinstance(v, str) or (isinstance(v, list) and all(isinstance(a, str) for a in v)) for v in value)
        )
    return isinstance(value, kind) and not (isinstance(value, bool) and bool not in kind)  # true is no integer


def check_types(fields: dict[str, Any], source: str = "sweep plan") -> None:
    """Refuse, naming ``source`` (the plan file) and the field, any field of the wrong type."""
    for name, value in fields.items():
        if name in FIELD_TYPES and not _fits(value, FIELD_TYPES[name][1]):
            raise SweepError(f"{source}: {name} must be {FIELD_TYPES[name][0]}, not {value!r}")
    for name, value in (fields.get("slurm") or {}).items():
        if name in SLURM_TYPES and value is not None and not _fits(value, SLURM_TYPES[name][1]):
            raise SweepError(f"{source}: [slurm] {name} must be {SLURM_TYPES[name][0]}, not {value!r}")


def make_plan(fields: dict[str, Any], source: str = "sweep plan") -> SweepPlan:
    """A plan from fields (a TOML file's, options over them), normalised and checked; ``source`` names the plan
    file in errors."""
    fields = {k: v for k, v in fields.items() if v is not None}
    known = {f.name for f in dataclasses.fields(SweepPlan)}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise SweepError(f"{source}: unknown field(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    check_types(fields, source)
    missing = [k for k in ("vfm", "data", "cache", "out") if not fields.get(k)]
    if missing:
        raise SweepError(f"{source}: give {', '.join('--' + m for m in missing)} (as options or in the plan file)")
    slurm = dict(fields.get("slurm") or {})
    slurm_known = {f.name for f in dataclasses.fields(SlurmOptions)}
    if set(slurm) - slurm_known:
        raise SweepError(
            f"{source}: unknown [slurm] field(s) {', '.join(sorted(set(slurm) - slurm_known))} "
            f"(known: {', '.join(sorted(slurm_known))})"
        )
    from ava.heads.fingerprint import FINGERPRINT_HEADS

    plan = SweepPlan(
        vfm=_list(fields["vfm"]),
        head=_list(fields.get("head")) or list(FINGERPRINT_HEADS),
        ava=_sets(fields.get("ava")),
        data=str(fields["data"]),
        cache=str(fields["cache"]),
        out=str(fields["out"]),
        executor=str(fields.get("executor", "local")),
        jobs=None if fields.get("jobs") is None else int(fields["jobs"]),
        device=str(fields.get("device", "auto")),
        gpus=_gpus_text(fields.get("gpus")),
        jobs_per_gpu=int(fields.get("jobs_per_gpu", 1)),
        gpus_per_extract=int(fields.get("gpus_per_extract", 1)),
        gpu_min_free=None if fields.get("gpu_min_free") is None else float(fields["gpu_min_free"]),
        slurm=SlurmOptions(**slurm),
    )
    check_plan(plan)
    return plan


def _gpus_text(value: Any) -> str | None:
    """A plan's ``gpus`` as the option's text: ``[0, 2]`` -> ``0,2,`` (a list, also of one GPU), ``4`` -> ``4``."""
    if value is None:
        return None
    if isinstance(value, list):
        return ",".join(str(v) for v in value) + ","
    return str(value).strip()


def reads_cache(head: str) -> bool:
    """Whether ``head`` trains on cached features (the zero-shot head runs the VFM's own towers: no cache)."""
    from ava.heads import HEADS

    return "cache" in {f.name for f in dataclasses.fields(HEADS.get(head).config_cls)}


def _check_features(plan: SweepPlan) -> None:
    """A VFM without patch features (an ``open_clip:`` one: zero-shot only) with a head that reads cached features
    would fail in its extraction job; refused here instead."""
    from ava.vfm.capabilities import FEATURES, require

    cached = [h for h in plan.head if reads_cache(h)]
    for name in plan.vfm if cached else ():
        try:
            require(name, FEATURES)
        except AvaError as e:
            raise SweepError(f"sweep plan: {e} (heads {', '.join(cached)} read them)") from None


def safe(name: str) -> str:
    """A VFM name as a file name part (``hf:org/model#size=224`` -> ``hf_org_model_size=224``): the job names and
    run directories of a sweep."""
    return re.sub(r"[^A-Za-z0-9_.=+-]", "_", name).strip("_") or "vfm"


def _no_repeats(plan: SweepPlan) -> None:
    """A VFM, head or ability set listed twice would run twice at once into one run directory: refused."""
    for field_name, values in (
        ("vfm", plan.vfm),
        ("head", plan.head),
        ("ava", [",".join(s) or "(all)" for s in plan.ava]),
    ):
        seen = [v for i, v in enumerate(values) if v in values[:i]]
        if seen:
            raise SweepError(
                f"sweep plan: {field_name} {seen[0]!r} is listed twice ({field_name} = {values}); each "
                "cell of the grid is one job with one run directory: list it once"
            )
    named: dict[str, str] = {}
    for vfm in plan.vfm:
        other = named.setdefault(safe(vfm), vfm)
        if other != vfm:
            raise SweepError(
                f"sweep plan: --vfm {other!r} and --vfm {vfm!r} would share the job and run directory "
                f"names (<head>-{safe(vfm)}, written {safe(vfm)!r} in file names); sweep them into "
                "separate --out directories"
            )
    for s in plan.ava:
        if len(set(s)) != len(s):
            twice = next(a for i, a in enumerate(s) if a in s[:i])
            raise SweepError(f"sweep plan: ability {twice!r} is listed twice in the set {s}")


def check_plan(plan: SweepPlan) -> None:
    """Every name known and every number sensible, before any job starts (one line naming what is wrong)."""
    from ava.abilities import ABILITIES
    from ava.heads import HEADS
    from ava.vfm import VFMS
    from ava.vfm.resolve import check_name

    if plan.executor not in EXECUTORS:
        raise SweepError(f"--executor {plan.executor!r}: use one of {', '.join(EXECUTORS)}")
    if plan.jobs is not None and plan.jobs < 1:
        raise SweepError(f"--jobs must be >= 1, got {plan.jobs}")
    _check_gpus(plan)
    for name in plan.vfm:
        check_name(name)
        base = name.partition("#")[0].partition("@")[0]
        if ":" not in base:
            try:
                VFMS.canonical(base)
            except AvaError as e:
                raise SweepError(f"sweep plan: --vfm {name!r}: {e}") from None
    try:
        plan.head = [HEADS.canonical(h) for h in plan.head]
        plan.ava = [[ABILITIES.canonical(a) for a in s] for s in plan.ava]
    except AvaError as e:
        raise SweepError(f"sweep plan: {e}") from None
    _no_repeats(plan)
    _check_features(plan)
    if not Path(plan.data).is_dir():
        raise SweepError(f"--data {plan.data}: no such dataset directory")
    from ava.cache.location import cache_path

    cache_path(plan.cache)  # a URL's protocol and package, and no credential in it (it would go into every log)
    s = plan.slurm
    for name in ("gpus_per_job", "time_min", "array_parallelism", "cpus_per_job"):
        low = 0 if name == "gpus_per_job" else 1
        if getattr(s, name) < low:
            raise SweepError(f"[slurm] {name} must be >= {low}, got {getattr(s, name)}")


def parse_gpus(spec: str) -> tuple[str, int | list[int] | None]:
    """``all`` -> ("all", None); ``4`` -> ("count", 4); ``0,2,5`` / ``3,`` -> ("ids", [...]); refused with one
    line otherwise (negative numbers, a GPU listed twice, words)."""
    text = str(spec).strip().replace(" ", "")
    if text.lower() == "all":
        return "all", None
    if re.fullmatch(r"\d+", text):
        return "count", int(text)
    if re.fullmatch(r"\d+(,\d+)*,?", text):
        ids = [int(t) for t in text.split(",") if t]
        twice = next((i for n, i in enumerate(ids) if i in ids[:n]), None)
        if twice is not None:
            raise SweepError(
                f"--gpus {spec}: GPU {twice} is listed twice (a GPU runs one job at a time; --jobs-per-gpu 2 "
                "runs two on each)"
            )
        return "ids", ids
    raise SweepError(
        f"--gpus {spec}: give all, a count (--gpus 4), or GPU numbers as nvidia-smi shows them (--gpus 0,2,5; "
        "one GPU: --gpus 3,)"
    )


def _check_gpus(plan: SweepPlan) -> None:
    """The GPU options that no machine could satisfy, refused before any job (the machine's own GPUs are checked
    when the sweep runs: :func:`ava.sweep.gpus.choose`)."""
    for name in ("jobs_per_gpu", "gpus_per_extract"):
        if getattr(plan, name) < 1:
            raise SweepError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(plan, name)}")
    if plan.gpus is None or parse_gpus(plan.gpus) == ("count", 0):
        for name, default in (("jobs_per_gpu", 1), ("gpus_per_extract", 1), ("gpu_min_free", None)):
            if getattr(plan, name) != default:
                raise SweepError(f"--{name.replace('_', '-')} needs --gpus (the GPU slots of a local sweep)")
        return
    if plan.executor != "local":
        raise SweepError("--gpus is for --executor local (on SLURM, --gpus-per-job asks each job's allocation)")
    if plan.device == "cpu" or plan.device.startswith("cuda:"):
        raise SweepError(
            f"--device {plan.device} with --gpus: each job sees only its own GPU(s), as cuda; give --device auto "
            "or cuda"
        )
    mode, value = parse_gpus(plan.gpus)
    count = value if mode == "count" else len(value) if mode == "ids" else None  # type: ignore[arg-type]
    if count is not None and plan.gpus_per_extract > count:
        raise SweepError(
            f"--gpus-per-extract {plan.gpus_per_extract} is more than the {count} GPU(s) of --gpus {plan.gpus}"
        )
    if count is not None and plan.jobs is not None and plan.jobs > count * plan.jobs_per_gpu:
        raise SweepError(
            f"--jobs {plan.jobs} is more than the {count * plan.jobs_per_gpu} GPU slot(s) of --gpus {plan.gpus} "
            f"({count} GPU(s) x {plan.jobs_per_gpu} job(s) per GPU); --jobs-per-gpu runs more jobs on each GPU"
        )
    if plan.gpu_min_free is not None and plan.gpu_min_free < 0:
        raise SweepError(f"--gpu-min-free must be >= 0 GB, got {plan.gpu_min_free}")


def load_plan(path: str | os.PathLike[str], **overrides: Any) -> SweepPlan:
    """A plan from a TOML file (``OUT/sweep/plan.toml`` or one written by hand), options overriding its fields."""
    p = Path(path)
    if p.is_dir():
        p = p / "sweep" / PLAN_FILE if (p / "sweep" / PLAN_FILE).is_file() else p / PLAN_FILE
    try:
        fields = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SweepError(f"{p}: no sweep plan there (write one, or run `ava sweep` with options)") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise SweepError(f"{p}: not a TOML plan ({e})") from None
    check_types(fields, str(p))
    slurm = {**(fields.get("slurm") or {}), **(overrides.pop("slurm", None) or {})}
    return make_plan({**fields, **{k: v for k, v in overrides.items() if v is not None}, "slurm": slurm}, str(p))


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    import json

    return json.dumps(str(v))  # a TOML basic string is a JSON string


def plan_toml(plan: SweepPlan) -> str:
    """The plan as TOML (the format :func:`load_plan` reads)."""
    top = {k: v for k, v in dataclasses.asdict(plan).items() if k != "slurm" and v is not None}
    lines = [f"{k} = {_toml_value(v)}" for k, v in top.items()]
    lines.append("\n[slurm]")
    lines += [f"{k} = {_toml_value(v)}" for k, v in dataclasses.asdict(plan.slurm).items() if v is not None]
    return "\n".join(lines) + "\n"


def write_plan(plan: SweepPlan) -> Path:
    from ava.data.format import atomic_write_text

    plan.folder.mkdir(parents=True, exist_ok=True)
    path = plan.folder / PLAN_FILE
    atomic_write_text(path, plan_toml(plan))
    return path
