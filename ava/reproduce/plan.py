"""A reproduction's plan: which of the paper's VFMs, on which data, cache and stage-1/2 data, with which settings, and
the chain of jobs it makes for each VFM::

    extract-<vfm>                         ava cache extract (the abilities' images)
    extract-captions-<vfm>   (--captions)       ava cache extract --ava captions
    stage1-<vfm>             (--captions)       ava head align: the connector on caption pairs (stage 1)
    extract-instructions-<vfm> (--instructions) ava cache extract --ava instructions
    stage2-<vfm>             (--instructions)   ava head instruct --init stage1-<vfm>: LLM and connector (stage 2)
    llm-<vfm>                             ava head train --head llm --init stage2-<vfm>: stage 3, one head per ability
    report                                ava report llm-<vfm>... --paper

Each job is the command a user would type, run by the executors of ``ava sweep`` (local processes or SLURM), each
starting after the jobs it waits for (``Job.after``). Without ``--captions``/``--instructions`` stage 3 starts from
the LLM as released: the shortcut, named in every output, since the paper's stages 1-2 (LLaVA-558K and LLaVA-665K,
about 28 A100-hours per VFM) are what the stage-3 numbers were measured after.

Only the paper's nine VFMs are reproduced (matched by registry key), and their ``tiny-<key>`` test models (a 2-layer
random model of the same class: a pipeline check, labelled random everywhere); any other VFM is refused by name.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ava.errors import AvaError
from ava.sweep.jobs import Job, ava_command, plan_jobs
from ava.sweep.plan import SlurmOptions, SweepPlan, make_plan, safe

FOLDER = "reproduce"  # OUT/reproduce: the plan, the jobs' state and logs
PLAN_FILE = "plan.json"
REPORT = "report"  # OUT/report: the report with --paper


class ReproduceError(AvaError):
    """A reproduction that cannot run as asked: a VFM the paper lacks, data that is not split, a bad option."""


@dataclass
class ReproducePlan:
    vfm: list[str]
    data: str
    cache: str
    out: str
    captions: str | None = None  # a dataset of caption pairs (`ava head import-captions`): stage 1
    instructions: str | None = None  # a dataset of conversations (`ava head import-instructions`): stage 2
    llm: str = "qwen2-0.5b"
    ava: list[str] = field(default_factory=list)  # abilities of stage 3; empty: every ability in the data
    executor: str = "local"
    jobs: int = 1
    device: str = "auto"
    slurm: SlurmOptions = field(default_factory=SlurmOptions)
    # stage-3 settings; None: the paper's (ava's defaults are the paper's)
    epochs: int | None = None
    batch_size: int | None = None
    lora_r: int | None = None
    dtype: str | None = None
    max_train: int | None = None  # a cap on training samples (stage 3), caption pairs and conversations (stages 1-2)
    max_eval: int | None = None

    @property
    def folder(self) -> Path:
        return Path(self.out) / FOLDER

    @property
    def shortcut(self) -> bool:
        """Whether stage 3 starts without the paper's stages 1-2 (no caption or instruction data given)."""
        return not (self.captions or self.instructions)

    def stages(self) -> list[str]:
        """What the reproduction does before stage 3, in words (named in every output)."""
        if self.shortcut:
            return [
                "stages 1-2: the shortcut: none (no --captions/--instructions); stage 3 starts from the LLM as "
                "released with a fresh connector, where the paper first aligns the connector on LLaVA-558K "
                "(stage 1) and instruction-tunes on LLaVA-665K (stage 2)"
            ]
        one = f"stage 1: connector alignment on {self.captions}" if self.captions else "stage 1: none (no --captions)"
        two = (
            f"stage 2: instruction tuning on {self.instructions}"
            if self.instructions
            else "stage 2: none (no --instructions); stage 3 starts from stage 1's connector"
        )
        return [one, two]


def paper_vfms() -> list[str]:
    from ava.published import paper_table

    return [e.vfm for e in paper_table().entries]


def paper_key(name: str) -> str | None:
    """The paper VFM ``name`` runs: its registry key (an alias too), or the key whose ``tiny-<key>`` test model it is;
    None for any other VFM."""
    from ava.report.published import vfm_key

    key = vfm_key(name)
    return key if key in paper_vfms() else None


def _check_vfms(names: list[str]) -> None:
    for name in names:
        if paper_key(name) is None:
            raise ReproduceError(
                f"--vfm {name!r}: not one of the paper's VFMs ({', '.join(paper_vfms())}; or their tiny-<key> test "
                "models): a reproduction re-runs what the paper published. To place another VFM among them: "
                f"ava sweep --vfm {name} --head llm ..., then ava report RUNS --paper"
            )


def _check_stage_data(option: str, path: str | None, ability: str, make: str) -> None:
    if path is None:
        return
    from ava.data.format import Dataset

    if not Path(path).is_dir():
        raise ReproduceError(f"--{option} {path}: no such dataset directory")
    if not Dataset(path).has_samples(ability):
        raise ReproduceError(f"--{option} {path}: has no samples/{ability}.jsonl (make it with `ava head {make}`)")


def check_plan(plan: ReproducePlan) -> SweepPlan:
    """Everything a reproduction needs, checked before any job starts or anything is written; returns the sweep plan
    of its stage-3 grid (the paper's VFMs x the LLM head), which the sweep's own checks have passed."""
    from ava.data.format import Dataset

    _check_vfms(plan.vfm)
    sweep = make_plan(
        {
            "vfm": plan.vfm,
            "head": ["llm"],
            "ava": plan.ava or None,
            "data": plan.data,
            "cache": plan.cache,
            "out": plan.out,
            "executor": plan.executor,
            "jobs": plan.jobs,
            "device": plan.device,
            "slurm": dataclasses.asdict(plan.slurm),
        },
        source="reproduce",
    )
    if not Dataset(plan.data).split_info:
        raise ReproduceError(
            f"--data {plan.data}: not split into train and test (the release publishes train data only: "
            "`ava data split` makes the paper's 80/20 split per class)"
        )
    _check_stage_data("captions", plan.captions, "captions", "import-captions")
    _check_stage_data("instructions", plan.instructions, "instructions", "import-instructions")
    from ava.heads.llm.llms import LLMS

    if not (plan.llm in LLMS or Path(plan.llm).expanduser().is_dir() or "/" in plan.llm):
        LLMS.canonical(plan.llm)  # an unknown name: refused here ("did you mean"), not in a job
    for name in ("epochs", "batch_size", "lora_r", "max_train", "max_eval"):
        value = getattr(plan, name)
        if value is not None and value < 1:
            raise ReproduceError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    if plan.dtype not in (None, "auto", "fp32", "bf16"):
        raise ReproduceError(f"--dtype {plan.dtype!r}: use auto, fp32 or bf16")
    return sweep


def _opt(name: str, value: Any) -> list[str]:
    return [] if value is None else [f"--{name.replace('_', '-')}", str(value)]


def make_jobs(plan: ReproducePlan, sweep: SweepPlan) -> list[Job]:
    """The reproduction's jobs in the order they can run (each after those it waits for): see the module docstring."""
    base = {j.name: j for j in plan_jobs(sweep)}
    out = Path(plan.out)
    extracts: list[Job] = []
    stages: list[Job] = []
    finals: list[Job] = []
    common = ["--cache", plan.cache, "--device", plan.device]
    for vfm in plan.vfm:
        s = safe(vfm)
        extracts.append(base[f"extract-{s}"])
        init = None
        if plan.captions:
            extracts.append(_extract(f"extract-captions-{s}", vfm, plan.captions, "captions", plan))
            run_dir = str(out / f"stage1-{s}")
            argv = ava_command(
                "head", "align", "--vfm", vfm, "--data", plan.captions, *common, "--out", run_dir, "--llm", plan.llm
            )
            argv += _opt("max_train", plan.max_train) + _opt("dtype", plan.dtype)
            stages.append(
                Job(f"stage1-{s}", "train", vfm, argv, "align", ["captions"], run_dir, f"extract-captions-{s}")
            )
            init = stages[-1]
        if plan.instructions:
            extracts.append(_extract(f"extract-instructions-{s}", vfm, plan.instructions, "instructions", plan))
            run_dir = str(out / f"stage2-{s}")
            argv = ava_command("head", "instruct", "--vfm", vfm, "--data", plan.instructions, *common, "--out", run_dir)
            argv += ["--llm", plan.llm, *(["--init", init.run_dir] if init and init.run_dir else [])]
            argv += _opt("max_train", plan.max_train) + _opt("dtype", plan.dtype)
            after = [init.name] if init else []
            stages.append(
                Job(
                    f"stage2-{s}",
                    "train",
                    vfm,
                    argv,
                    "instruct",
                    ["instructions"],
                    run_dir,
                    f"extract-instructions-{s}",
                    after,
                )
            )
            init = stages[-1]
        train = base[f"llm-{s}"]
        argv = [*train.argv, "--llm", plan.llm, *(["--init", init.run_dir] if init and init.run_dir else [])]
        for name in ("epochs", "batch_size", "lora_r", "dtype", "max_train", "max_eval"):
            argv += _opt(name, getattr(plan, name))
        finals.append(dataclasses.replace(train, argv=argv, after=[init.name] if init else []))
    report = Job(
        "report",
        "report",
        "",
        ava_command(
            "report", *(j.run_dir for j in finals if j.run_dir), "--paper", "--out", str(out / REPORT), "--quiet"
        ),
        after=[j.name for j in finals],
    )
    return [*extracts, *stages, *finals, report]


def _extract(name: str, vfm: str, data: str, ability: str, plan: ReproducePlan) -> Job:
    argv = ava_command("cache", "extract", "--vfm", vfm, "--data", data, "--cache", plan.cache, "--ava", ability)
    return Job(name, "extract", vfm, [*argv, "--device", plan.device, "--quiet"])


def write_plan(plan: ReproducePlan) -> Path:
    """``OUT/reproduce/plan.json``: the plan as run (what a rerun is compared with)."""
    from ava.data.format import atomic_write_text

    plan.folder.mkdir(parents=True, exist_ok=True)
    path = plan.folder / PLAN_FILE
    atomic_write_text(path, json.dumps(dataclasses.asdict(plan), indent=2) + "\n")
    return path
