"""``ava fingerprint``: the cheap heads (linear probe, attentive probe, kNN) on every ability of one VFM, with each
ability's features read once and shared by all of them (the loop and the runs' base class live in
:mod:`ava.heads.ability_runs`).
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ava.errors import AvaError
from ava.heads.ability_runs import AbilityRun, default_jobs, train_abilities
from ava.jsonfile import read_json

if TYPE_CHECKING:
    from ava.data.format import Dataset

__all__ = [
    "FINGERPRINT_HEADS",
    "FingerprintConfig",
    "FingerprintResult",
    "fingerprint",
    "head_config",
    "make_run",
    "run_dir_name",
]


# -- ava fingerprint ---------------------------------------------------------------------------------------------
FINGERPRINT_HEADS = ("probe-linear", "probe-attn", "knn")
# heads a fingerprint may also run that read no cached features (asked for by name with --head)
STANDALONE_HEADS = ("zero-shot",)


@dataclass
class FingerprintConfig:
    """``ava fingerprint``: the cheap heads on every ability of one VFM, one run directory per head under ``out``."""

    vfm: str = ""
    data: str = ""
    cache: str = ""
    out: str = ""  # run directories go to OUT/<head>-<vfm>
    ava: list[str] | None = None  # abilities; None or [] = every ability in the data
    heads: list[str] = field(default_factory=lambda: list(FINGERPRINT_HEADS))
    seed: int = 0
    device: str = "auto"
    max_train: int | None = None
    split: str = "test"
    progress: bool = True
    jobs: int | None = None  # heads fitted at once per ability; None: default_jobs (2 on a GPU or 2+ cores, else 1)


def run_dir_name(head: str, vfm: str) -> str:
    """``<head>-<vfm>``, with characters a directory name should not hold (``/``, ``:``...) replaced by ``_``."""
    return f"{head}-{re.sub(r'[^A-Za-z0-9._@+-]', '_', vfm)}"


def head_config(head: str, config: FingerprintConfig, out: Path, abilities: list[str]) -> Any:
    """The head's own config with the fingerprint's shared fields (everything else at the head's defaults)."""
    import dataclasses

    from ava.heads import HEADS

    spec = HEADS.get(head)
    values = {
        "ava": list(abilities),
        "vfm": config.vfm,
        "data": config.data,
        "cache": config.cache,
        "out": str(out / run_dir_name(spec.name, config.vfm)),
        "seed": config.seed,
        "device": config.device,
        "max_train": config.max_train,
        "split": config.split,
        "progress": False,
    }
    names = {f.name for f in dataclasses.fields(spec.config_cls)}
    return spec.config_cls(**{k: v for k, v in values.items() if k in names})


def make_run(head: str, config: Any, dataset: Dataset, cache: Any, abilities: list[str], device: str) -> AbilityRun:
    """The :class:`AbilityRun` of a feature head (``probe-linear``, ``probe-attn``, ``knn``)."""
    from ava.heads import HEADS

    name = HEADS.get(head).name
    if name in ("probe-linear", "probe-attn"):
        from ava.heads.probe.train import ProbeRun

        return ProbeRun(config, dataset, cache, abilities, device)
    if name == "knn":
        from ava.heads.knn.train import KNNRun

        return KNNRun(config, dataset, cache, abilities, device)
    known = ", ".join(FINGERPRINT_HEADS + STANDALONE_HEADS)
    raise AvaError(f"head {head!r} cannot be part of a fingerprint; use {known}")


@dataclass
class FingerprintResult:
    run_dirs: dict[str, Path]  # head -> run directory
    results: dict[str, dict[str, Any] | None]  # head -> results of the split
    reads: dict[str, int]  # ability -> cache reads (one per layer; 0 when every head had it recorded)
    resumed: dict[str, list[str]]  # head -> abilities taken from an earlier, interrupted run


def fingerprint(config: FingerprintConfig) -> FingerprintResult:
    """Train every head of ``config`` on every ability, each ability's features read once (see the module doc)."""
    from ava.cache import open_cache
    from ava.data.format import Dataset
    from ava.heads import HEADS
    from ava.heads.features import resolve_device
    from ava.heads.rundir import claim_run
    from ava.heads.targets import select_abilities
    from ava.vfm.capabilities import FEATURES, TEXT_TOWER, require

    if not config.out:
        raise AvaError("no output directory given (--out)")
    if not config.heads:
        raise AvaError(f"no heads given; use some of {', '.join(FINGERPRINT_HEADS)}")
    if config.jobs is not None and config.jobs < 1:
        raise AvaError(f"--jobs must be >= 1, got {config.jobs}")
    dataset = Dataset(config.data)
    abilities = select_abilities(dataset, config.ava)
    out = Path(config.out)
    standalone = [h for h in dict.fromkeys(config.heads) if HEADS.canonical(h) in STANDALONE_HEADS]
    feature_heads = [h for h in dict.fromkeys(config.heads) if h not in standalone]
    if standalone:  # a VFM without a text tower is refused before any feature head trains
        require(config.vfm, TEXT_TOWER)
    if not feature_heads:  # the zero-shot head alone: no cache is read
        return _standalone(config, standalone, out, abilities, FingerprintResult({}, {}, {}, {}))
    # before open_cache, whose "make it with ava cache extract" would mislead for a VFM that has no patch features
    require(config.vfm, FEATURES)
    cache = open_cache(config.cache, config.vfm)
    device = resolve_device(config.device)
    configs = {h: head_config(h, config, out, abilities) for h in feature_heads}
    with contextlib.ExitStack() as claims:  # each run dir is owned by this job (ava.heads.rundir): lock, no mixing
        for h, hc in configs.items():
            claims.enter_context(claim_run(hc.out, HEADS.get(h).name, hc))
        runs = [make_run(h, hc, dataset, cache, abilities, device) for h, hc in configs.items()]
        jobs = config.jobs or default_jobs(device, len(runs))
        reads = train_abilities(
            runs, cache, abilities, device=device, progress=config.progress, label=config.vfm, jobs=jobs
        )
        results = {run.head: run.finish() for run in runs}
    result = FingerprintResult({r.head: r.run_dir for r in runs}, results, reads, {r.head: r.resumed for r in runs})
    return _standalone(config, standalone, out, abilities, result)


def _standalone(
    config: FingerprintConfig, heads: list[str], out: Path, abilities: list[str], result: FingerprintResult
) -> FingerprintResult:
    """Heads that read no cached features (the zero-shot head embeds images with its own towers), run after the
    feature heads, each into its own run directory; their results join ``result``."""

    from ava.heads import HEADS

    for h in heads:
        spec = HEADS.get(h)
        run_dir = Path(spec.train(head_config(h, config, out, abilities)))
        found = run_dir / f"results_{config.split}.json"
        result.run_dirs[spec.name] = run_dir
        result.results[spec.name] = read_json(found) if found.is_file() else None
        result.resumed[spec.name] = []
    return result
