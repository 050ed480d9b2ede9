"""The public Python API: what each ``ava`` command does, as a function that returns a typed result.

Every function takes the command's options as keyword arguments (same names: ``per_ava``, ``max_train``,
``box_format`` ...), builds the same config object, calls the same library function as the command, and returns
a dataclass instead of printing. The CLI (``ava/cli``) is a thin layer over these functions. Failures a user can
cause raise :class:`ava.errors.AvaError` (or a subclass) with the same one-line message the CLI prints.

A complete run, from nothing to a fingerprint (the README's "Python API" section)::

    import ava

    data = ava.synthesize("ava-data", per_ava=40, size=96)
    ava.extract(vfm="pixels", data=data.path, cache="ava-cache")
    result = ava.fingerprint(vfm="pixels", data=data.path, cache="ava-cache", out="ava-runs")
    print(result.scores["knn"]["color"])

``threads``: the functions that compute take ``threads``: an integer sets torch's CPU threads, ``"auto"`` picks
them as the CLI does (the CPUs this process may use less those other processes keep busy, minus DataLoader
workers; ``OMP_NUM_THREADS`` when set), ``None`` (the default) leaves torch's setting alone.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ava.arguments import check_public_functions
from ava.errors import AvaError
from ava.jsonfile import read_json

if TYPE_CHECKING:
    from ava.data.format import Dataset
    from ava.data.importers import ImportReport
    from ava.metrics.scoring import ScoreReport

__all__ = [
    "DatasetResult",
    "ExportResult",
    "ExtractResult",
    "Fingerprint",
    "HeadRun",
    "ReportResult",
    "ScoreResult",
    "SplitResult",
    "SweepResult",
    "build_data",
    "data_info",
    "evaluate_head",
    "export_results",
    "extract",
    "extract_config",
    "fingerprint",
    "head_config",
    "import_data",
    "load_dataset",
    "load_published",
    "make_report",
    "paper_table",
    "score",
    "run_sweep",
    "split_data",
    "sweep_estimate",
    "sweep_plan",
    "sweep_status",
    "synth_sources",
    "synthesize",
    "train_head",
    "rewrite_options",
    "vlm_answer",
    "ReproduceResult",
    "reproduce",
]

PathLike = str | os.PathLike[str]
Threads = int | Literal["auto"] | None

# Where the in-memory paths live (ava.heads.memory); referenced by name so this module imports without them and
# nothing heavy is imported before it is needed.
IN_MEMORY_FINGERPRINT = "ava.heads.memory:fingerprint_in_memory"
IN_MEMORY_HEADS = ("probe-linear", "knn")
# what is refused as a ``vfm`` (a name is a str; anything else is taken for an in-memory VFM)
NOT_A_VFM = (bool, int, float, complex, bytes, bytearray, os.PathLike, dict, list, tuple, set)


def _resolve(target: str) -> Any:
    import importlib

    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def _threads(threads: Threads, num_workers: int | None = 0) -> None:
    if threads is None:
        return
    from ava.threads import apply_threads

    apply_threads(None if threads == "auto" else threads, num_workers=num_workers or 0)


def _paths(values: list[PathLike] | PathLike | None) -> list[str] | None:
    """A list option as the CLI reads it: ``"a,b"`` or ``["a,b", "c"]`` -> ``["a", "b", "c"]``; nothing -> None."""
    if values is None:
        return None
    items = [values] if isinstance(values, str | os.PathLike) else list(values)
    out = [v.strip() for item in items for v in str(item).split(",") if v.strip()]
    return out or None


# -- data ------------------------------------------------------------------------------------------------------
@dataclass
class DatasetResult:
    """A dataset directory that was written (``synthesize``); ``reused``: it was there already, made with the same
    settings, and was kept."""

    path: Path
    reused: bool = False


@dataclass
class SplitResult:
    """What ``split_data`` assigned: per ability ``{"train": n, "test": n}``, and the split record written;
    ``unchanged``: the dataset was already split this way and was kept."""

    data: Path
    counts: dict[str, dict[str, int]]
    split: dict[str, Any]
    unchanged: bool = False


def load_dataset(data: PathLike) -> Dataset:
    """Open an ``ava`` dataset directory (samples, images, split) for reading."""
    from ava.data.format import Dataset

    return Dataset(data)


def synthesize(
    out: PathLike,
    *,
    per_ava: int | None = None,
    ava: list[str] | str | None = None,
    seed: int | None = None,
    size: int | None = None,
    difficulty: str | None = None,
    test_frac: float | None = None,
    workers: int | None = None,
    force: bool = False,
    config: PathLike | None = None,
    progress: bool = False,
) -> DatasetResult:
    """Write the built-in synthetic suite (``ava data synth``): all 14 abilities (or ``ava``), exact labels,
    already split. Options left None take the ``config`` TOML file's value, else the default (100 per ability,
    384 px, seed 0, easy). Same seed and options give the same bytes."""
    from ava.config import load_config
    from ava.synth import SynthConfig, generate
    from ava.synth.generate import made_with

    cfg = load_config(
        SynthConfig,
        config,
        out=str(out),
        per_ava=per_ava,
        ava=_paths(ava),
        seed=seed,
        size=size,
        difficulty=difficulty,
        test_frac=test_frac,
        workers=workers,
        overwrite=force or None,
    )
    reused = made_with(cfg)[0] and not cfg.overwrite
    return DatasetResult(Path(generate(cfg, progress=progress)), reused)


def import_data(
    src: PathLike,
    out: PathLike,
    *,
    format: str = "auto",
    image_root: PathLike | None = None,
    answers: PathLike | None = None,
    ava: str | None = None,
    workers: int = 0,
    progress: bool = False,
) -> ImportReport:
    """Import the official release (parquet), LLaVA JSON or eval questions + answers into a dataset at ``out``
    (``ava data import``). Rows that cannot be imported are skipped and listed in the report's ``errors`` (and in
    ``out/import_errors.jsonl``); nothing is raised for them."""
    from ava.data.importers import import_dataset

    return import_dataset(
        src, out, fmt=format, image_root=image_root, answers=answers, ava=ava, workers=workers, progress=progress
    )


def split_data(data: PathLike, *, test_frac: float = 0.2, seed: int = 0, force: bool = False) -> SplitResult:
    """Split a dataset 80/20 (``ava data split``), deterministic and stratified per ability x class/answer bin."""
    from ava.data.split import split_dataset
    from ava.validate import check

    try:
        check("test_frac", test_frac)
    except ValueError as e:
        raise AvaError(f"test_frac: {e}") from None
    result = split_dataset(data, test_frac=test_frac, seed=seed, force=force)
    return SplitResult(Path(data), result["counts"], result["split"], result.get("unchanged", False))


def build_data(out: PathLike, *, progress: bool = False, **options: Any) -> Any:
    """Build an ``ava`` dataset from annotated images (``ava data build``); ``options`` are the fields of
    :class:`ava.curate.BuildConfig` (``coco``, ``images``, ``depth``, ``classes``, ``text``, ``attributes``,
    ``ava``, ``tasks``, ``seed``, ...). Returns a :class:`ava.curate.BuildResult` (counts, the kept/dropped
    summary, what was skipped and why)."""
    from ava.arguments import check_fields
    from ava.curate import BuildConfig, build_dataset
    from ava.extras import require

    check_fields(BuildConfig, options, "build_data: ")  # each option a field, of its type (its range: the build's)
    if options.get("coco"):  # masks, RLE and colour superpixels: checked before anything is written
        require("build", "`ava data build --coco`")
    return build_dataset(BuildConfig(out=Path(out), **options), progress=progress)


def synth_sources(out: PathLike, *, n_images: int = 24, seed: int = 0, photos: bool = False) -> dict[str, Any]:
    """Write synthetic scenes as the source formats ``build_data`` reads, with ``truth.json`` beside them
    (``ava data synth-sources``); returns that truth. ``photos``: real-style sources instead (COCO instances over
    objects cut from real photographs, :mod:`ava.curate.photos`); returns what was written."""
    if photos:
        from ava.curate.photos import write_photo_sources

        return write_photo_sources(out, n_images=n_images, seed=seed)
    from ava.curate.synthetic import write_sources
    from ava.extras import require

    require("build", "`ava data synth-sources`")  # its COCO masks are RLE: checked before anything is written
    return write_sources(out, n_images=n_images, seed=seed)


def data_info(data: PathLike) -> dict[str, Any]:
    """Counts per ability x split, per source dataset and per answer class (``ava data info --json``)."""
    from ava.data.info import dataset_info

    return dataset_info(data)


# -- cache -----------------------------------------------------------------------------------------------------
@dataclass
class ExtractResult:
    """What one extraction did: the cache group written (``key``), rows extracted now and found done, and the
    images that could not be read (``failed``: one line each; their rows stay not done for a later run)."""

    vfm: str
    cache: str  # a directory, or a URL (s3://...): kept as given
    key: str
    codec: str
    extracted: int
    already_done: int
    failed: list[str]
    images_per_s: float | None
    rank: int = 0
    world_size: int = 1
    summary: dict[str, Any] = field(default_factory=dict, repr=False)  # everything extract returned

    @classmethod
    def from_summary(cls, summary: dict[str, Any]) -> ExtractResult:
        return cls(
            vfm=str(summary["vfm"]),
            cache=str(summary["cache"]),
            key=str(summary["key"]),
            codec=str(summary["codec"]),
            extracted=int(summary["extracted"]),
            already_done=int(summary["already_done"]),
            failed=list(summary["failed"]),
            images_per_s=summary.get("images_per_s"),
            rank=int(summary.get("rank", 0)),
            world_size=int(summary.get("world_size", 1)),
            summary=summary,
        )


def extract_config(
    *,
    vfm: str | None = None,
    data: PathLike | None = None,
    cache: PathLike | None = None,
    config: PathLike | None = None,
    **options: Any,
) -> Any:
    """The :class:`ava.cache.ExtractConfig` of these options (defaults < ``config`` TOML file < options)."""
    from ava.cache import ExtractConfig
    from ava.config import load_config

    if options.get("layers") is not None:
        options["layers"] = tuple(options["layers"])
    options["ava"] = _paths(options.get("ava"))
    try:
        return load_config(
            ExtractConfig,
            config,
            vfm=vfm,
            data=str(data) if data else None,
            cache=str(cache) if cache else None,
            **options,
        )
    except TypeError as e:  # a required field given neither as an option nor in the config file
        raise AvaError(f"--vfm, --data and --cache are required (as options or in --config): {e}") from e


def extract(
    vfm: Any = None,
    data: PathLike | None = None,
    cache: PathLike | None = None,
    *,
    ava: list[str] | str | None = None,
    split: str | None = None,
    codec: str | None = None,
    layers: tuple[int, ...] | list[int] | None = None,
    batch_size: int | None = None,
    device: str | None = None,
    dtype: str | None = None,
    num_workers: int | None = None,
    preprocess: str | None = None,
    shard_size: int | None = None,
    key: str | None = None,
    config: PathLike | None = None,
    progress: bool | None = False,
    trust_remote_code: bool = False,
    threads: Threads = None,
    decode: str | None = None,
    dry_run: bool = False,
    force: bool = False,
) -> ExtractResult:
    """Run a frozen VFM once over a dataset's images into the feature cache (``ava cache extract``); resumable.

    Before the first row it computes what the run writes (``summary["plan"]``: rows x tokens x dim x bytes per value,
    views, index, and the free space of a local destination, :mod:`ava.cache.plan`) and refuses, in one line naming
    both figures and the codecs that would fit, a run that does not fit, unless ``force``. ``dry_run``: the plan only,
    nothing written (``extracted`` 0).

    ``vfm`` is a registry key, ``key@dir``, ``hf:<hub-id-or-dir>`` or ``timm:<name>`` (see ``ava vfm list``), or an
    in-memory VFM (from :func:`ava.vfm_from_module`). Options left None take the ``config`` TOML file's value,
    else the default (codec fp16, layer -2, batch 32, pad to square); ``progress=None``: the config file's choice
    (default: a bar). Images that cannot be read are listed in the result's ``failed``, not raised. ``decode``:
    where JPEGs are decoded, ``auto`` (on the VFM's GPU where torchvision can, else the DataLoader workers),
    ``workers`` or ``device`` (see :mod:`ava.vfm.device_decode`); the result's ``summary["decoder"]`` says which.
    """
    from ava.cache import extract as run_extract

    if vfm is not None:  # None: taken from the config file
        check_vfm_type(vfm)
    in_memory = vfm is not None and not isinstance(vfm, str)
    name = vfm_name(vfm) if in_memory else vfm
    if not in_memory and vfm:
        _check_vfm_name(vfm)
    cfg = extract_config(
        vfm=name,
        data=data,
        cache=cache,
        config=config,
        ava=ava,
        split=split,
        codec=codec,
        layers=layers,
        batch_size=batch_size,
        device=device,
        dtype=dtype,
        num_workers=num_workers,
        preprocess=preprocess,
        shard_size=shard_size,
        key=key,
        progress=progress,
        trust_remote_code=True if trust_remote_code else None,
        decode=decode,
        dry_run=True if dry_run else None,
        force=True if force else None,
    )
    _threads(threads, cfg.num_workers)
    summary = run_extract(cfg, vfm=vfm) if in_memory else run_extract(cfg)
    return ExtractResult.from_summary(summary)


def vfm_name(vfm: Any) -> str:
    """The name an in-memory VFM is stored under in a cache: its spec's key (the identity the user gave)."""
    spec = getattr(vfm, "spec", None)
    name = getattr(spec, "key", None) or getattr(spec, "name", None) or getattr(vfm, "name", None)
    if not name:
        raise AvaError(
            f"the in-memory VFM {type(vfm).__name__} has no name (spec.key); make it with "
            "ava.vfm_from_module(..., name=...)"
        )
    return str(name)


def check_vfm_type(vfm: Any) -> None:
    """Refuse a ``vfm`` that is neither a name nor an in-memory VFM, saying what is accepted."""
    if vfm is None or isinstance(vfm, NOT_A_VFM):
        shown = repr(vfm) if len(repr(vfm)) <= 40 else type(vfm).__name__
        raise AvaError(
            f"vfm={shown} ({type(vfm).__name__}): give a VFM name as a str (a registry key such as "
            "'pixels', 'hf:<hub-id-or-dir>', 'timm:<name>') or an in-memory VFM made with "
            "ava.vfm_from_module(module, ...)"
        )


def _display_name(vfm: Any) -> str:
    try:
        return vfm_name(vfm)
    except AvaError:
        return type(vfm).__name__


def _check_vfm_name(vfm: str) -> None:
    from ava.vfm.resolve import check_name

    check_name(vfm)


# -- fingerprint -----------------------------------------------------------------------------------------------
@dataclass
class Fingerprint:
    """A VFM's ability fingerprint: ``scores[head][ability]`` is the split's metric value.

    ``directions[ability]`` is True when higher is better (accuracy, gIoU) and False when lower is (MAE);
    ``metrics[ability]`` names the metric, ``n[head][ability]`` the samples scored. With a cache, ``run_dirs``
    holds one run directory per head (what ``ava report`` reads) and ``results`` their full results JSON.
    """

    vfm: str
    scores: dict[str, dict[str, float]]
    n: dict[str, dict[str, int]] = field(default_factory=dict)
    directions: dict[str, bool] = field(default_factory=dict)
    metrics: dict[str, str] = field(default_factory=dict)
    split: str = "test"
    run_dirs: dict[str, Path] = field(default_factory=dict)
    results: dict[str, dict[str, Any] | None] = field(default_factory=dict, repr=False)
    resumed: dict[str, list[str]] = field(default_factory=dict)
    reads: dict[str, int] = field(default_factory=dict, repr=False)
    source: Any = field(default=None, repr=False)  # the library's own result object

    @classmethod
    def from_result(cls, vfm: str, split: str, result: Any) -> Fingerprint:
        """From :class:`ava.heads.fingerprint.FingerprintResult` (runs on disk)."""
        scores: dict[str, dict[str, float]] = {}
        n: dict[str, dict[str, int]] = {}
        directions: dict[str, bool] = {}
        metrics: dict[str, str] = {}
        for head, res in result.results.items():
            if not res:
                continue
            abilities = res.get("abilities", {})
            scores[head] = {a: r["value"] for a, r in abilities.items()}
            n[head] = {a: r.get("n", 0) for a, r in abilities.items()}
            for a, r in abilities.items():
                directions.setdefault(a, bool(r.get("higher_is_better", True)))
                metrics.setdefault(a, str(r.get("metric", "")))
        return cls(
            vfm=vfm,
            scores=scores,
            n=n,
            directions=directions,
            metrics=metrics,
            split=split,
            run_dirs=dict(result.run_dirs),
            results=dict(result.results),
            resumed=dict(result.resumed),
            reads=dict(result.reads),
            source=result,
        )

    @classmethod
    def from_scores(cls, vfm: str, split: str, result: Any) -> Fingerprint:
        """From the in-memory path's result (anything with ``scores``; ``n``, ``directions``, ``metrics`` taken
        when it has them)."""
        return cls(
            vfm=vfm,
            scores={h: dict(v) for h, v in result.scores.items()},
            n=dict(getattr(result, "n", None) or {}),
            directions=dict(getattr(result, "directions", None) or {}),
            metrics=dict(getattr(result, "metrics", None) or {}),
            split=split,
            source=result,
        )


def fingerprint(
    vfm: Any,
    data: PathLike | None = None,
    cache: PathLike | None = None,
    out: PathLike | None = None,
    *,
    ava: list[str] | str | None = None,
    heads: list[str] | str | None = None,
    seed: int = 0,
    device: str = "auto",
    max_train: int | None = None,
    split: str = "test",
    progress: bool = False,
    jobs: int | None = None,
    threads: Threads = None,
    **extract_options: Any,
) -> Fingerprint:
    """A VFM's ability fingerprint: cheap heads (linear probe, attentive probe, kNN) on every ability.

    - ``vfm`` a string (registry key, ``hf:``, ``timm:``) with ``cache``: the features already extracted there
      (:func:`extract`) feed every head; one run directory per head under ``out`` (``ava fingerprint``).
    - ``vfm`` an in-memory VFM (:func:`ava.vfm_from_module`) without ``cache``: features are extracted and held in
      memory for this one fingerprint (linear probe and kNN by default); nothing is written.
    - ``vfm`` an in-memory VFM with ``cache``: its features are extracted into the cache first (resumable;
      ``extract_options`` such as ``batch_size`` go to :func:`extract`), then fingerprinted from there.

    ``data`` is a split dataset directory (``ava.synthesize`` writes one). Returns a :class:`Fingerprint` whose
    ``scores[head][ability]`` is the ``split``'s metric value.
    """
    check_vfm_type(vfm)
    if data is None:
        raise AvaError("no dataset given (data=DIR, a split dataset; ava.synthesize writes one)")
    if isinstance(vfm, str):
        if cache is None:
            raise AvaError(
                f"vfm={vfm!r} is a name: give the cache its features were extracted to (cache=DIR, "
                "see ava.extract), or pass an in-memory VFM (ava.vfm_from_module)"
            )
        if extract_options:
            raise AvaError(
                f"unexpected option(s) {', '.join(sorted(extract_options))}: with a VFM name the features "
                "come from the cache as extracted (ava.extract)"
            )
        return _fingerprint_cache(
            vfm,
            data,
            cache,
            out,
            ava=ava,
            heads=heads,
            seed=seed,
            device=device,
            max_train=max_train,
            split=split,
            progress=progress,
            jobs=jobs,
            threads=threads,
        )
    if cache is None:
        if out is not None or jobs is not None or extract_options:
            given = ["out"] * (out is not None) + ["jobs"] * (jobs is not None) + sorted(extract_options)
            raise AvaError(
                f"{', '.join(given)}: only with cache=DIR; an in-memory VFM without a cache is "
                "fingerprinted with its features held in memory and writes nothing"
            )
        _threads(threads)
        run = _resolve(IN_MEMORY_FINGERPRINT)
        result = run(
            vfm,
            data,
            abilities=_paths(ava),
            heads=tuple(_paths(heads) or IN_MEMORY_HEADS),
            device=_memory_device(device),
            split=split,
            seed=seed,
            max_train=max_train,
            progress=progress,
        )
        return Fingerprint.from_scores(str(getattr(result, "vfm", None) or _display_name(vfm)), split, result)
    extracted = extract(
        vfm,
        data,
        cache,
        ava=ava,
        progress=progress,
        threads=threads,
        device=None if device == "auto" else device,
        **extract_options,
    )
    if extracted.failed:
        raise AvaError(
            f"{len(extracted.failed)} image(s) could not be read during extraction, first: {extracted.failed[0]}"
        )
    return _fingerprint_cache(
        extracted.vfm,
        data,
        cache,
        out,
        ava=ava,
        heads=heads,
        seed=seed,
        device=device,
        max_train=max_train,
        split=split,
        progress=progress,
        jobs=jobs,
        threads=None,
    )


def _memory_device(device: str) -> str:
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _fingerprint_cache(
    vfm: str,
    data: PathLike,
    cache: PathLike,
    out: PathLike | None,
    *,
    ava: Any,
    heads: Any,
    seed: int,
    device: str,
    max_train: int | None,
    split: str,
    progress: bool,
    jobs: int | None,
    threads: Threads,
) -> Fingerprint:
    from ava.heads.fingerprint import FINGERPRINT_HEADS, FingerprintConfig
    from ava.heads.fingerprint import fingerprint as run_fingerprint
    from ava.validate import check

    try:
        check("max_train", max_train)
    except ValueError as e:
        raise AvaError(f"max_train: {e}") from None
    _threads(threads)
    config = FingerprintConfig(
        vfm=vfm,
        data=str(data),
        cache=str(cache),
        out=str(out) if out else "",
        ava=_paths(ava),
        heads=_paths(heads) or list(FINGERPRINT_HEADS),
        seed=seed,
        device=device,
        max_train=max_train,
        split=split,
        progress=progress,
        jobs=jobs,
    )
    return Fingerprint.from_result(vfm, split, run_fingerprint(config))


# -- heads -----------------------------------------------------------------------------------------------------
@dataclass
class HeadRun:
    """A head's run directory and the results of the split it was evaluated on (None: not evaluated)."""

    run_dir: Path
    results: dict[str, Any] | None

    @property
    def scores(self) -> dict[str, float]:
        """``{ability: value}`` of the results (empty when not evaluated)."""
        return {a: r["value"] for a, r in (self.results or {}).get("abilities", {}).items()}


# Options a head's config carries for uniformity but ignores: refused by name rather than accepted silently.
IGNORED_OPTIONS = {"knn": {"epochs", "lr"}, "probe-attn": {"pools"}}
REQUIRED_OPTIONS = ("vfm", "data", "cache", "out")


def _set(options: dict[str, Any]) -> dict[str, Any]:
    """Only the options given (None and empty lists mean "not set")."""
    return {k: v for k, v in options.items() if v is not None and v != []}


def head_config(head: str, config: PathLike | None = None, **options: Any) -> tuple[Any, Any]:
    """(HeadSpec, config): the head's config from defaults < ``config`` TOML file < the options given; an option
    the head has no field for, or ignores, is refused by name."""
    from ava.config import load_config
    from ava.heads import HEADS

    spec = HEADS.get(head)
    given = _set(options)
    why = {"knn": "it trains nothing", "probe-attn": "it pools the tokens itself"}
    ignored = sorted(n for n in IGNORED_OPTIONS.get(spec.name, ()) if n in given)
    if ignored:
        flags = ", ".join("--" + n.replace("_", "-") for n in ignored)
        raise AvaError(f"head {spec.name!r} does not use {flags} ({why[spec.name]}); leave them out")
    fields = {f.name for f in dataclasses.fields(spec.config_cls)}
    foreign = sorted(k for k in given if k not in fields)
    if foreign:
        flags = ", ".join("--" + k.replace("_", "-") for k in foreign)
        raise AvaError(
            f"head {spec.name!r} has no option {flags}; its config fields (as --options, or in a --config TOML "
            f"file) are: {', '.join(sorted(fields))}"
        )
    return spec, load_config(spec.config_cls, config, **given)


def check_required(cfg: Any, config: PathLike | None) -> None:
    """Refuse a config missing one of vfm, data, cache, out (given neither as an option nor in the file)."""
    missing = [f"--{name}" for name in REQUIRED_OPTIONS if hasattr(cfg, name) and not getattr(cfg, name)]
    if missing:
        where = f" or in {config}" if config else " (or in a --config TOML file)"
        raise AvaError(f"missing required option(s) {', '.join(missing)}: give them on the command line{where}")


def train_head(
    head: str = "llm", *, config: PathLike | None = None, threads: Threads = None, **options: Any
) -> HeadRun:
    """Train a head (``llm``, ``probe-linear``, ``probe-attn``, ``knn`` or a plugin's) on cached features, then
    evaluate it on ``split`` unless ``eval_after=False`` (``ava head train``).

    ``options`` are the head's config fields, named as the command's options: ``vfm``, ``data``, ``cache``,
    ``out`` (required), ``ava``, ``seed``, ``device``, ``epochs``, ``lr``, ``batch_size``, ``max_train``, ``k``,
    ``pools`` ... An option the head has no field for is refused by name.
    """
    for name in ("ava", "k", "pools"):
        if isinstance(options.get(name), str | int):
            options[name] = [options[name]]
    if options.get("ava") is not None:
        options["ava"] = _paths(options["ava"])
    for name in ("data", "cache", "out", "init"):
        if isinstance(options.get(name), os.PathLike):
            options[name] = str(options[name])
    spec, cfg = head_config(head, config, **options)
    check_required(cfg, config)
    _threads(threads, getattr(cfg, "num_workers", 0))
    run_dir = Path(spec.train(cfg))
    split = getattr(cfg, "split", "test") + ("_score" if getattr(cfg, "decode", "generate") == "score" else "")
    return HeadRun(run_dir, _results(run_dir, split))


def _results(run_dir: Path, split: str) -> dict[str, Any] | None:
    path = run_dir / f"results_{split}.json"
    return read_json(path) if path.is_file() else None


def evaluate_head(
    run: PathLike,
    *,
    split: str = "test",
    decode: str | None = None,
    max_eval: int | None = None,
    batch_size: int | None = None,
    device: str | None = None,
    trust_remote_code: bool = False,
    threads: Threads = None,
) -> HeadRun:
    """Evaluate a trained head's run on ``split`` (``ava head eval``); writes results_<split>.json and
    predictions_<split>.jsonl beside it. The run's data and cache must be those it was trained on."""
    from ava.heads.rundir import evaluate_run

    _threads(threads)
    results = evaluate_run(
        run,
        split,
        decode=decode,
        max_eval=max_eval,
        batch_size=batch_size,
        device=device,
        trust_remote_code=trust_remote_code,
    )
    return HeadRun(Path(run), results)


# -- scoring and reports ---------------------------------------------------------------------------------------
@dataclass
class ScoreResult:
    """Scored replies: ``results`` (the results schema), where they were written, and what did not match."""

    results: dict[str, Any]
    out: Path
    missing: list[tuple[str, str]]  # (ability, id) of samples without a prediction (scored as unparsed)
    unknown: list[tuple[str, str]]  # predictions that match no scored sample (ignored)
    report: ScoreReport = field(repr=False)

    @property
    def scores(self) -> dict[str, float]:
        return {a: r["value"] for a, r in self.results.get("abilities", {}).items()}


def score(
    data: PathLike,
    pred: PathLike,
    *,
    ava: list[str] | str | None = None,
    split: str = "test",
    out: PathLike | None = None,
    box_format: str = "auto",
    write: bool = True,
) -> ScoreResult:
    """Score any model's free-text replies (``ava score``): parse each reply with the ability's reference parser
    and apply its metric. Writes results_<split>.json and predictions_<split>.jsonl into ``out`` (default: the
    ``pred`` file's directory) unless ``write=False``."""
    from ava.metrics.scoring import score_file, write_results

    pred = Path(pred)
    out_dir = Path(out) if out is not None else pred.parent
    for name in (f"results_{split}.json", f"predictions_{split}.jsonl"):
        if write and (out_dir / name).resolve() == pred.resolve():
            raise AvaError(f"--pred {pred} would be overwritten by the scored {name}; pass another -o/--out")
    from ava.vlm.answer import check_replies_dataset

    check_replies_dataset(pred, data, _paths(ava))  # a VLM run's replies, scored against the data they answered
    report = score_file(data, pred, abilities=_paths(ava), split=split, box_format=box_format)
    if write:
        write_results(report, out_dir, split)
    return ScoreResult(report.results, out_dir, list(report.missing), list(report.unknown), report)


@dataclass
class ReportResult:
    """A written report: ``out`` holds report.md/.json/.tex/.html and plots/; ``refused`` lists the tables whose
    runs were scored on different samples (shown only with ``allow_mixed``); ``data`` is report.json's content."""

    out: Path
    refused: list[Any]
    data: dict[str, Any] = field(repr=False)

    @property
    def markdown(self) -> Path:
        return self.out / "report.md"


def make_report(
    runs: list[PathLike],
    out: PathLike,
    *,
    split: str = "test",
    allow_mixed: bool = False,
    n_boot: int = 2000,
    seed: int = 0,
    reference: str | None = None,
    gaps: list[tuple[PathLike, PathLike]] | None = None,
    progress: bool = False,
    paper: bool = False,
    published: list[PathLike] | PathLike | None = None,
) -> ReportResult:
    """Tables with 95% bootstrap intervals, baselines, ranks and rank agreement, subgroups, plots and report.html
    from run directories (``ava report``); ``reference`` adds every score relative to that VFM, ``gaps`` (run,
    reference run) pairs the alignment gap (default: each VLM run against each zero-shot run); ``progress``: one
    step per section on stderr.

    ``paper``: the runs beside the AVA-Bench paper's Table 5 (:func:`paper_table`): ranked among its nine VFMs, ours
    minus the paper's for a VFM it has, flagged cells and why the numbers are (not) comparable. ``published``: the
    same beside results folders (paths or fsspec URLs written by :func:`export_results`)."""
    from ava.report import make_report as run_report

    if isinstance(runs, str | os.PathLike):
        runs = [runs]
    if n_boot < 100:
        raise AvaError(f"n_boot must be >= 100, got {n_boot}")
    result = run_report(
        [Path(r) for r in runs],
        Path(out),
        split=split,
        allow_mixed=allow_mixed,
        n_boot=n_boot,
        seed=seed,
        reference=reference,
        progress=progress,
        gaps=[(str(a), str(b)) for a, b in gaps] if gaps else None,
        paper=paper,
        published=[str(p) for p in _paths(published) or []] if published else None,
    )
    return ReportResult(Path(out), list(result.get("refused") or []), result)


# -- published results ------------------------------------------------------------------------------------------
def paper_table() -> Any:
    """The AVA-Bench paper's Table 5 as published (:class:`ava.published.Source`): 9 VFMs x 14 abilities with the
    LLM head (Qwen2-0.5B + LoRA) on the paper's test split, every value (``Cell.value`` in ava's units, ``Cell.printed``
    as printed) and printed rank, the printed average ranks, the units and provenance, and the cells the table
    contradicts itself on (``Source.flags``, each with its reason). ``ava report --paper`` compares runs with it."""
    from ava.published import paper_table as table

    return table()


def load_published(location: PathLike) -> Any:
    """A results folder (a path or an fsspec URL, written by :func:`export_results`) as a
    :class:`ava.published.Source`; a malformed, truncated or tampered folder raises
    :class:`ava.published.PublishedError` naming the file and field."""
    from ava.published import read_folder

    return read_folder(str(location))


@dataclass
class ExportResult:
    """A results folder written by :func:`export_results`: where, and its index (one line per entry)."""

    out: str
    index: dict[str, Any] = field(repr=False)

    @property
    def entries(self) -> list[dict[str, Any]]:
        return list(self.index["entries"])


def export_results(
    runs: list[PathLike] | PathLike,
    out: PathLike,
    *,
    split: str = "test",
    title: str | None = None,
    force: bool = False,
    n_boot: int = 2000,
    seed: int = 0,
) -> ExportResult:
    """Write run directories as a results folder at ``out`` (a path or an fsspec URL; ``ava results export``): per
    VFM and head the values, n, 95% intervals (drawn as ``ava report`` draws them), the run's identity, data identity,
    config and versions, an ``index.json`` with each file's digest and a README card. Adding to a folder keeps its
    entries; an entry already there (same VFM and head) is replaced only with ``force``."""
    from ava.report.export import export_results as run_export

    if isinstance(runs, str | os.PathLike):
        runs = [runs]
    if n_boot < 100:
        raise AvaError(f"n_boot must be >= 100, got {n_boot}")
    index = run_export(
        [Path(r) for r in runs], str(out), split=split, title=title, force=force, n_boot=n_boot, seed=seed
    )
    return ExportResult(str(out), index)


# -- reproducing the paper ------------------------------------------------------------------------------------------
@dataclass
class ReproduceResult:
    """What ``reproduce`` did: the plan file, what it did before stage 3 (``stages``, in words: the shortcut when no
    caption or instruction data was given), each job's state, the jobs run or submitted now and those skipped (done
    before), and the report beside the paper (``report``: report.json's content, None until its job has run) in
    ``report_dir``. With ``dry_run``: only ``dry_run``, one row per job (nothing ran, nothing was written)."""

    plan: str
    stages: list[str]
    report_dir: Path
    jobs: list[dict[str, Any]] = field(default_factory=list)
    submitted: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    report: dict[str, Any] | None = field(default=None, repr=False)
    dry_run: list[dict[str, Any]] | None = None

    @property
    def diff(self) -> list[dict[str, Any]]:
        """Per reproduced VFM: per ability ours, the paper's, the difference and the interval verdict."""
        blocks = (self.report or {}).get("published") or []
        return [d for b in blocks for c in b["comparisons"] for d in c["diff"]]


def reproduce(
    vfm: list[str] | str,
    *,
    data: PathLike,
    cache: PathLike,
    out: PathLike,
    captions: PathLike | None = None,
    instructions: PathLike | None = None,
    llm: str = "qwen2-0.5b",
    ava: list[str] | str | None = None,
    executor: str = "local",
    jobs: int = 1,
    device: str = "auto",
    slurm: dict[str, Any] | None = None,
    epochs: int | None = None,
    batch_size: int | None = None,
    lora_r: int | None = None,
    dtype: str | None = None,
    max_train: int | None = None,
    max_eval: int | None = None,
    force: bool = False,
    dry_run: bool = False,
    progress: bool = False,
) -> ReproduceResult:
    """The paper's protocol end to end for the paper's VFMs (``ava reproduce``): extraction, stage 1 on ``captions``
    and stage 2 on ``instructions`` when given (else stage 3 starts from the LLM as released: the shortcut, named in
    ``stages``), stage 3 per ability with the paper's settings (``epochs``, ``batch_size``, ``lora_r``, ``max_*``
    override them, and the report lists each difference), then the report beside the paper's Table 5 in
    ``OUT/report``. Jobs run on the executors of :mod:`ava.sweep` (``local`` or ``slurm``); a rerun resumes. A VFM
    the paper lacks is refused by name; its ``tiny-<key>`` test models run as labelled pipeline checks."""
    from ava.reproduce import ReproducePlan
    from ava.reproduce import reproduce as run
    from ava.sweep.plan import SlurmOptions

    try:
        options = SlurmOptions(**(slurm or {}))
    except TypeError as e:
        raise AvaError(f"slurm options: {e}") from None
    plan = ReproducePlan(
        vfm=_paths(vfm) or [],
        data=str(data),
        cache=str(cache),
        out=str(out),
        captions=str(captions) if captions is not None else None,
        instructions=str(instructions) if instructions is not None else None,
        llm=llm,
        ava=_paths(ava) or [],
        executor=executor,
        jobs=jobs,
        device=device,
        slurm=options,
        epochs=epochs,
        batch_size=batch_size,
        lora_r=lora_r,
        dtype=dtype,
        max_train=max_train,
        max_eval=max_eval,
    )
    if not plan.vfm:
        raise AvaError("--vfm: give the paper's VFMs to reproduce (siglip2, dinov2 ...)")
    result = run(plan, force=force, progress=progress, dry=dry_run)
    report_dir = Path(out) / "report"
    if dry_run:
        return ReproduceResult(result["plan"], result["stages"], report_dir, dry_run=result["dry_run"])
    return ReproduceResult(
        result["plan"],
        result["stages"],
        report_dir,
        result["jobs"],
        result["submitted"],
        result["skipped"],
        result["report"],
    )


# -- options (FOCI hard negatives) -----------------------------------------------------------------------------
def rewrite_options(
    data: PathLike,
    out: PathLike,
    *,
    miner: str = "random",
    k: int = 4,
    seed: int = 0,
    ava: list[str] | str | None = None,
    cache: PathLike | None = None,
    template: str = "keep",
    domain: str = "choices",
    label_template: str | None = None,
    device: str = "cpu",
    force: bool = False,
) -> Any:
    """A copy of ``data`` whose choice questions ask the truth plus ``k - 1`` mined wrong classes
    (``ava data options``; miners ``random``, ``cache:VFM`` with ``cache``, ``clip@<hub-id-or-dir>``). Returns
    :class:`ava.distractors.OptionsResult`."""
    from ava.distractors import rewrite_options as run

    return run(
        data,
        out,
        miner=miner,
        k=k,
        seed=seed,
        ava=_paths(ava),
        cache=str(cache) if cache else None,
        template=template,
        domain=domain,
        label_template=label_template,
        device=device,
        force=force,
    )


# -- VLM replies -----------------------------------------------------------------------------------------------
def vlm_answer(
    model: PathLike,
    data: PathLike,
    out: PathLike,
    *,
    ava: list[str] | str | None = None,
    split: str = "test",
    batch_size: int = 8,
    max_new_tokens: int = 32,
    max_samples: int | None = None,
    device: str = "auto",
    dtype: str = "auto",
    trust_remote_code: bool = False,
    random_weights: bool = False,
    progress: bool = False,
) -> Any:
    """A VLM's greedy reply to every question of ``split``, written to the run directory ``out`` sample by sample
    (a re-run resumes) and scored like ``ava score`` (``ava vlm answer``). Returns :class:`ava.vlm.AnswerResult`."""
    from ava.vlm import AnswerConfig, answer

    config = AnswerConfig(
        model=str(model),
        data=str(data),
        out=str(out),
        ava=_paths(ava),
        split=split,
        batch_size=batch_size,
        max_new_tokens=max_new_tokens,
        max_samples=max_samples,
        device=device,
        dtype=dtype,
        trust_remote_code=trust_remote_code,
        random_weights=random_weights,
        progress=progress,
    )
    return answer(config)


@dataclass
class SweepResult:
    """What :func:`run_sweep` ran or would run: the plan file written (None for a dry run), the jobs started or
    submitted, those already done or in flight (``skipped``), those found still running from an earlier driver
    and waited for (``adopted``), the GPUs used and those skipped (another process fills them), the estimate
    (per job its seconds, bytes, start, end and GPUs in the simulated schedule; the GPU-hours, wall time and bytes
    of the whole), and each job's status after the run (a dry run: what each would do, with its estimate)."""

    plan: Path | None
    folder: Path  # OUT/sweep: the plan, the jobs' state and their logs
    submitted: list[str]
    skipped: list[str]
    estimate: dict[str, Any]
    jobs: list[dict[str, Any]] = field(default_factory=list)
    adopted: list[str] = field(default_factory=list)
    gpus: list[str] = field(default_factory=list)
    skipped_gpus: list[str] = field(default_factory=list)
    dry_run: bool = False


def sweep_plan(plan: PathLike | None = None, **fields: Any) -> Any:
    """The checked :class:`ava.sweep.SweepPlan` of a plan file (``plan``) with ``fields`` over it, or of ``fields``
    alone (the options of ``ava sweep``: ``vfm``, ``head``, ``ava``, ``data``, ``cache``, ``out``, ``executor``,
    ``jobs``, ``device``, ``gpus``, ``jobs_per_gpu``, ``gpus_per_extract``, ``gpu_min_free``, ``slurm``)."""
    from ava.sweep.plan import load_plan, make_plan

    given = {k: os.fspath(v) if isinstance(v, os.PathLike) else v for k, v in fields.items() if v is not None}
    if "ava" in given and not (isinstance(given["ava"], list) and given["ava"] and isinstance(given["ava"][0], list)):
        given["ava"] = [",".join(_listed(given["ava"]))]
    if isinstance(given.get("gpus"), (int, list)):
        given["gpus"] = given["gpus"] if isinstance(given["gpus"], list) else str(given["gpus"])
    slurm = given.pop("slurm", None) or {}
    return load_plan(plan, **given, slurm=slurm) if plan is not None else make_plan({**given, "slurm": slurm})


def _listed(value: list[str] | str) -> list[str]:
    return [v.strip() for item in ([value] if isinstance(value, str) else value) for v in item.split(",") if v.strip()]


def run_sweep(
    vfm: list[str] | str | None = None,
    *,
    plan: PathLike | None = None,
    force: bool = False,
    dry_run: bool = False,
    calibrate: bool = False,
    device_kind: str | None = None,
    progress: bool = False,
    **fields: Any,
) -> SweepResult:
    """``ava sweep``: the grid of VFM x head x ability set as jobs (an extraction per VFM, then a job per cell),
    run on this machine (``executor="local"``, ``jobs`` at once; ``gpus="all"|N|"0,2,5"``: each job on its own
    GPU(s)) or submitted to SLURM. A job starts as soon as the jobs it waits for are done; a rerun runs only what
    is not done. ``fields``: the plan's fields (see :func:`sweep_plan`), over the plan file ``plan`` if given.

    ``dry_run``: nothing is written or run; the result's ``estimate`` says what each job would cost and when it
    would run on the slots given (for GPUs this machine lacks too). ``calibrate``: time this machine first.
    ``device_kind``: the speed table's device to estimate with (``nvidia-h100`` ...; default: this machine's)."""
    from ava.sweep.run import sweep

    the_plan = sweep_plan(plan, vfm=vfm, **fields)
    out = sweep(the_plan, force=force, progress=progress, dry_run=dry_run, calibrate=calibrate, device_kind=device_kind)
    return SweepResult(
        plan=Path(out["plan"]) if out.get("plan") else None,
        folder=the_plan.folder,
        submitted=out["submitted"],
        skipped=out["skipped"],
        estimate=out["estimate"],
        jobs=out.get("jobs", []),
        adopted=out.get("adopted", []),
        gpus=out.get("gpus", []),
        skipped_gpus=out.get("skipped_gpus", []),
        dry_run=dry_run,
    )


def sweep_estimate(vfm: list[str] | str | None = None, **options: Any) -> dict[str, Any]:
    """The estimate of a sweep before it runs (``run_sweep(..., dry_run=True).estimate``): per job its device seconds,
    bytes written, start, end and GPUs in the simulated schedule; ``gpu_hours``, ``wall_s`` and ``bytes`` in all."""
    return run_sweep(vfm, dry_run=True, **options).estimate


def sweep_status(plan: PathLike) -> dict[str, Any]:
    """``ava sweep status``: each job's state, GPUs, elapsed time beside its estimate, progress (running), log and
    results or error; ``plan`` is the plan file or the runs directory."""
    from ava.sweep.plan import load_plan
    from ava.sweep.run import status

    return status(load_plan(plan))


# Every public function above checks its arguments against its annotations before it runs (ava.arguments): a wrong
# type is an AvaError naming the argument. Keep this the module's last statement: it covers what is defined above it.
check_public_functions(globals())
