"""Feature heads trained ability by ability: the base class of their runs (:class:`AbilityRun`, the probe and kNN
runs subclass it), their per-ability records, and the loop that reads each ability's features once for every run
(:func:`train_abilities`). ``ava fingerprint`` (:mod:`ava.heads.fingerprint`) and ``ava head train`` both use it;
this module imports no head, so the heads import it and nothing imports back.

A feature head run names the samples and layers it needs for an ability, fits on an
:class:`~ava.heads.features.AbilityFeatures` (one ability's features held in memory), predicts the evaluated split
from the same features, and records the ability in its run directory at once::

    RUN/abilities/<ability>.json         # resume key, the head's metadata, the split's replies, result extras
    RUN/abilities/<ability>.safetensors  # the head's tensors of this ability (probe weights, kNN targets)

An interrupted run (``ava head train`` or ``ava fingerprint``) re-run with the same config and cache redoes only the
abilities without a record; a record made under another config or cache group is ignored (and replaced). When every
ability is recorded, the head writes its usual files (``probe.json``/``knn.json`` ...) and results, the format
``ava head eval`` and ``ava report`` read, so a fingerprint's run directories are ordinary head runs.

:func:`train_abilities` is the loop: per ability, the union of what the pending runs need is read once (one read of
the cache per layer), every pending run fits on it, and it is released before the next ability is placed (so the
next one finds the memory the last one held, on the GPU too).
"""

from __future__ import annotations

import abc
import gc
import hashlib
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ava.errors import AvaError
from ava.jsonfile import read_json

if TYPE_CHECKING:
    from ava.data.format import Dataset, Sample
    from ava.heads.features import AbilityFeatures

RECORDS_DIR = "abilities"
VOLATILE_FIELDS = ("progress", "eval_after")  # config fields that do not change what a run computes


def resume_key(config: Any, run: dict[str, Any]) -> str:
    """A hash of what defines a run's results: its config (less progress/eval_after) and run block (head, VFM,
    abilities, cache group, split of the data). Records made under another key are not reused."""
    from ava.config import to_jsonable

    cfg = {k: v for k, v in to_jsonable(config).items() if k not in VOLATILE_FIELDS}
    text = json.dumps({"config": cfg, "run": to_jsonable(run)}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class AbilityRun(abc.ABC):
    """One head run trained ability by ability (subclasses: the probe and kNN runs).

    Subclasses set ``head`` and implement :meth:`layers`, :meth:`fit_ability` and :meth:`write_head_files`.
    """

    head = ""

    def __init__(self, config: Any, dataset: Dataset, cache: Any, abilities: list[str], device: str) -> None:
        from ava.heads.rundir import run_block, start_run

        self.config, self.dataset, self.cache, self.abilities, self.device = config, dataset, cache, abilities, device
        self.run = run_block(self.head, config.vfm, abilities, cache, dataset, seed=config.seed)
        self.key = resume_key(config, self.run)
        self.run_dir = start_run(config.out, config, self.run)
        self.records: dict[str, dict[str, Any]] = {}
        for ava in abilities:
            if (record := self._read_record(ava)) is not None:
                self.records[ava] = record
        self.resumed = sorted(self.records)

    # -- what an ability needs ------------------------------------------------------------------------------
    def train_samples(self, ava: str) -> list[Sample]:
        from ava.heads.targets import train_samples

        return train_samples(self.dataset, ava, self.config.max_train, self.config.seed)

    def eval_samples(self, ava: str) -> list[Sample]:
        return self.dataset.samples(ava, split=self.config.split)

    @abc.abstractmethod
    def layers(self) -> list[int | None]:
        """The cached layers this run reads (``None``: the cache's default layer)."""

    def needs(self, ava: str) -> tuple[list[str], bool]:
        """(pooled views this run reads for ``ava``, whether it also reads the tokens)."""
        return [], True

    def pending(self, ava: str) -> bool:
        return ava not in self.records

    # -- one ability ---------------------------------------------------------------------------------------
    @abc.abstractmethod
    def fit_ability(
        self,
        ava: str,
        features: AbilityFeatures,
        on_step: Callable[[], None] | None,
    ) -> tuple[dict[str, Any], dict[str, Any], list[str], dict]:
        """Train on one ability and predict its evaluated split: (metadata, tensors, replies in the order of
        :meth:`eval_samples`, the results' extra for the ability)."""

    def fit(self, ava: str, features: AbilityFeatures, on_step: Callable[[], None] | None = None) -> None:
        """Fit one ability and record it in the run directory (tensors first, then the JSON that makes it count)."""
        meta, tensors, replies, extra = self.fit_ability(ava, features, on_step)
        samples = self.eval_samples(ava)
        record = {
            "resume_key": self.key,
            "head": self.head,
            "meta": meta,
            "split": self.config.split,
            "replies": [[s.id, r] for s, r in zip(samples, replies, strict=True)],
            "extra": extra,
            "features": getattr(features, "placement", None),
        }  # where they were held (ava.cache.placement)
        self._write_record(ava, record, tensors)
        self.records[ava] = record

    # -- records -------------------------------------------------------------------------------------------
    def _record_paths(self, ava: str) -> tuple[Path, Path]:
        folder = self.run_dir / RECORDS_DIR
        return folder / f"{ava}.json", folder / f"{ava}.safetensors"

    def _read_record(self, ava: str) -> dict[str, Any] | None:
        meta_path, tensor_path = self._record_paths(ava)
        try:
            record = read_json(meta_path)
        except (OSError, json.JSONDecodeError):
            return None
        if not isinstance(record, dict) or record.get("resume_key") != self.key:
            return None
        if record.get("tensors") and not tensor_path.is_file():
            return None
        return record

    def _write_record(self, ava: str, record: dict[str, Any], tensors: dict[str, Any]) -> None:
        from ava.heads.rundir import write_json

        meta_path, tensor_path = self._record_paths(ava)
        meta_path.parent.mkdir(parents=True, exist_ok=True)
        meta_path.unlink(missing_ok=True)  # an old record must not outlive the tensors it described
        record["tensors"] = bool(tensors)
        if tensors:
            save_tensors(tensor_path, tensors)
        write_json(meta_path, record)

    def record_tensors(self, ava: str) -> dict[str, Any]:
        """The tensors recorded for one ability (torch tensors, by name)."""
        from safetensors.torch import load_file

        _, tensor_path = self._record_paths(ava)
        return load_file(str(tensor_path)) if self.records[ava].get("tensors") else {}

    # -- the end -------------------------------------------------------------------------------------------
    @abc.abstractmethod
    def write_head_files(self) -> None:
        """The head's own combined files (weights, metadata) from the ability records."""

    def finish(self) -> dict[str, Any] | None:
        """Write the head's files and, when the config evaluates, results and predictions of its split."""
        from ava.heads.rundir import score_and_write

        missing = [a for a in self.abilities if a not in self.records]
        if missing:
            raise AvaError(f"{self.run_dir}: abilities {missing} were not trained")
        from ava.heads.rundir import write_json

        # where each ability's features were held while it trained (on-device, host-staged, host, streamed)
        self.run = {**self.run, "features": {a: self.records[a].get("features") for a in self.abilities}}
        write_json(self.run_dir / "run.json", self.run)
        self.write_head_files()
        if not getattr(self.config, "eval_after", True):
            return None
        predictions = {(ava, sid): reply for ava in self.abilities for sid, reply in self.records[ava]["replies"]}
        extra = {ava: self.records[ava]["extra"] for ava in self.abilities}
        from ava.config import to_jsonable

        return score_and_write(
            self.dataset,
            predictions,
            self.abilities,
            self.config.split,
            self.run,
            to_jsonable(self.config),
            self.run_dir,
            extra,
        )


def save_tensors(path: Path, tensors: dict[str, Any], metadata: dict[str, str] | None = None) -> None:
    """Write torch tensors (or numpy arrays) as safetensors, atomically (a full disk is named, see ``write_file``)."""
    import numpy as np
    import torch
    from safetensors.torch import save

    from ava.heads.rundir import write_file

    out = {
        k: (torch.from_numpy(np.ascontiguousarray(v)) if isinstance(v, np.ndarray) else v.detach().cpu()).contiguous()
        for k, v in tensors.items()
    }
    write_file(path, save(out, metadata=metadata))


def default_jobs(device: str, runs: int) -> int:
    """Heads fitted at once on one ability: 2 where there are 2+ heads, on a CPU with 2+ cores or on a GPU, else 1.

    - On an idle 2-core CPU two fits at once take the wall time of one at a time (they share memory bandwidth) with
      ~27% less CPU, and they stay fast beside other work, where two-thread ops spin.
    - On a GPU a probe's step is small and waits on the host's launches, which a second fit on another thread
      fills (``benchmarks/bench_fingerprint.py`` measures both ways)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if runs <= 1:
        return 1
    return 2 if device.startswith("cuda") or (device == "cpu" and cpus >= 2) else 1


def _fit_all(todo: Sequence[AbilityRun], ava: str, jobs: int, fit_one: Callable[[AbilityRun], None]) -> None:
    """Every run of ``todo`` fitted on one ability, ``jobs`` at a time (threads, in the runs' order).

    Each thread runs its fits with ``torch.get_num_threads() // jobs`` intra-op threads (OpenMP's count is per thread),
    so the cores are shared, not oversubscribed. A fit depends on its own seeded generators only, not on the order or
    timing of the others: its results are those of a run with that many intra-op threads (``--threads``; matmuls may
    round differently with another count). The first error is raised once the fits already started have ended (each
    records its ability, so a re-run resumes after them)."""
    if jobs <= 1 or len(todo) <= 1:
        for run in todo:
            fit_one(run)
        return
    from concurrent.futures import ThreadPoolExecutor

    import torch

    per_thread = max(1, torch.get_num_threads() // jobs)

    def task(run: AbilityRun) -> None:
        torch.set_num_threads(per_thread)
        fit_one(run)

    with ThreadPoolExecutor(max_workers=min(jobs, len(todo)), thread_name_prefix=f"fit-{ava}") as pool:
        futures = [pool.submit(task, run) for run in todo]
    for f in futures:
        f.result()


def train_abilities(
    runs: Sequence[AbilityRun],
    cache: Any,
    abilities: Sequence[str],
    *,
    device: str = "cpu",
    progress: bool = True,
    label: str = "",
    jobs: int = 1,
) -> dict[str, int]:
    """Fit every run on every ability it has not recorded yet, each ability's features read once for all runs
    (``jobs`` runs at a time, see :func:`_fit_all`), and released before the next ability's are placed.

    Returns the number of token reads (one per layer) per ability: 0 for abilities every run had recorded, and for
    those whose runs need only pooled views the cache stores (``ava.cache.pooling``)."""
    from ava.heads.features import read_ahead
    from ava.progress import progress as progress_bar

    reads: dict[str, int] = {}
    pending = [(ava, [r for r in runs if r.pending(ava)]) for ava in abilities]
    ahead = None  # the next ability's reads (tokens or codes, stored views), started while this one's heads fit
    with progress_bar(progress, transient=True) as bar:
        total = bar.add_task(label or "abilities x heads", total=len(abilities) * len(runs))
        for i, (ava, todo) in enumerate(pending):
            bar.advance(total, len(runs) - len(todo))
            nxt = next(((a, t) for a, t in pending[i + 1 :] if t), None)

            def start_next(nxt: tuple[str, list[AbilityRun]] | None = nxt) -> Any:
                if nxt is None or not reads_ahead(device):
                    return None
                samples, layers, views, tokens = _needs(nxt[1], nxt[0])
                return read_ahead(cache, samples, layers, device=device, views=views, tokens=tokens)

            if not todo:
                reads[ava] = 0
                continue
            reads[ava], ahead, released = _train_ability(
                todo, cache, ava, device, jobs, bar, total, label, ahead, start_next
            )
            # this ability's features are unreachable now and must be freed before the next ability is placed, so
            # that its placement sees the memory they held (on a GPU: reserved by the caching allocator, counted as
            # free). Reference counting has freed them unless a reference cycle holds them: only then a full
            # collection (0.1 s with a small dataset loaded, more with a large one: 14 per fingerprint)
            if not released():
                gc.collect()
    return reads


def reads_ahead(device: str) -> bool:
    """Whether the next ability's reads start while this one's heads fit: where the fits run on a GPU, whose host is
    idle meanwhile. On a CPU the reads would take the cores from the fits: the reads got shorter and the fits longer
    by more (``benchmarks/bench_fingerprint.py``)."""
    return device.startswith("cuda")


def _needs(todo: Sequence[AbilityRun], ava: str) -> tuple[list[Sample], list[int | None], list[str], bool]:
    """What the runs of ``todo`` read for ``ava``: the samples (train and evaluated, each once), the layers, the pooled
    views, and whether any needs the tokens."""
    samples: dict[tuple[str, str], Sample] = {}
    layers: list[int | None] = []
    views: list[str] = []
    tokens = False
    for run in todo:
        for s in (*run.train_samples(ava), *run.eval_samples(ava)):
            samples.setdefault(s.key, s)
        layers.extend(la for la in run.layers() if la not in layers)
        run_views, run_tokens = run.needs(ava)
        views.extend(v for v in run_views if v not in views)
        tokens = tokens or run_tokens
    return list(samples.values()), layers, views, tokens


def _train_ability(
    todo: Sequence[AbilityRun],
    cache: Any,
    ava: str,
    device: str,
    jobs: int,
    bar: Any,
    total: Any,
    label: str,
    reads: Any = None,
    start_next: Callable[[], Any] | None = None,
) -> tuple[int, Any, Callable[[], bool]]:
    """Read one ability's features once (waiting for ``reads`` when they were started ahead), start the next
    ability's reads (``start_next``: they run while the heads fit), fit every run of ``todo``; returns the token
    reads, the next ability's reads and whether the features have been freed (``AbilityFeatures.released``).
    Nothing here outlives the call (no closure or default argument keeps the features)."""
    from ava.heads.features import AbilityFeatures

    samples, layers, views, tokens = _needs(todo, ava)
    prefix = f"{label} " if label else ""
    bar.update(total, description=f"{prefix}{ava}: reading features")
    features = AbilityFeatures(cache, samples, layers, device=device, views=views, tokens=tokens, reads=reads)
    bar.update(total, description=f"{prefix}{ava}: {', '.join(r.head for r in todo)} ({features.placement})")
    ahead = start_next() if start_next is not None else None

    def fit_one(run: AbilityRun) -> None:
        step = bar.add_task(f"  {run.head} {ava}", total=None)
        run.fit(ava, features, on_step=lambda: bar.advance(step))
        bar.remove_task(step)
        bar.advance(total)

    _fit_all(todo, ava, jobs, fit_one)
    return features.reads, ahead, features.released()
