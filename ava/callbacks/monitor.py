""":class:`FingerprintMonitor`: the in-training fingerprint for any loop (``monitor.maybe_run(step)``), and the
default evaluation suite (:func:`default_suite`). The Lightning callback (:mod:`ava.callbacks.lightning`) wraps it.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ava.errors import AvaError
from ava.home import ava_home
from ava.jsonfile import read_json

if TYPE_CHECKING:
    from ava.heads.memory import EvalSuite, FingerprintScores

JSONL = "fingerprints.jsonl"
BASELINES = "fingerprint_baselines.json"


def default_suite(
    per_ava: int = 150,
    size: int = 224,
    seed: int = 0,
    root: str | os.PathLike[str] | None = None,
    progress: bool = False,
) -> Path:
    """The built-in synthetic suite (14 abilities x ``per_ava`` samples at ``size`` px, split 80/20), generated once
    under ``root`` (default ``$AVA_HOME/suites``, ``~/.cache/ava/suites``) and reused: its bytes depend only on the
    arguments. Under ``torch.distributed`` rank 0 generates it while the others wait."""
    from ava.heads.memory import all_ranks_ok, rank_and_world

    path = Path(root or ava_home() / "suites") / f"synth-{per_ava}-{size}px-seed{seed}"
    rank, world = rank_and_world()
    failure: Exception | None = None
    if rank == 0 and not (path / "dataset.json").is_file():
        from ava.synth import SynthConfig, generate

        try:
            generate(
                SynthConfig(out=str(path), per_ava=per_ava, size=size, seed=seed, overwrite=True), progress=progress
            )
        except Exception as e:
            if world == 1:
                raise
            failure = e
    if world > 1:  # the others wait for rank 0, and raise (not wait for ever) when it failed
        all_ranks_ok(failure, f"while generating the suite {path}")
    return path


def check_every(every: Any, what: str = "every") -> int:
    """``every`` as a positive int; else one AvaError saying so."""
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise AvaError(
            f"{what}={every!r}: the fingerprint interval must be a positive number of steps (e.g. {what}=500)"
        )
    return every


class FingerprintMonitor:
    """Every ``every`` steps, the fingerprint of a model being trained, logged (call :meth:`maybe_run` each step).

    - ``vfm``: a :func:`~ava.vfm.module.vfm_from_module` VFM wrapping the model being trained (it reads the live
      weights at each evaluation), or a function of no argument returning one.
    - ``suite``: a dataset directory, an :class:`~ava.heads.memory.EvalSuite`, or None for the built-in synthetic
      suite (:func:`default_suite` with ``per_ava`` and ``suite_size``).
    - ``baselines``: registered VFM names (``"pixels"``, ``"random-vit"``) fingerprinted once on the same suite and
      stored in ``out/fingerprint_baselines.json``, or :class:`~ava.heads.memory.FingerprintScores` already made.
      Each evaluation logs the model's average rank among itself and them (1 = best on every ability).
    - ``out``: where ``fingerprints.jsonl`` (one line per evaluation, every ability) and the baselines go.
    - ``log``: called as ``log(metrics, step)`` with ``{"ava/<head>/<ability>": value, "ava/<head>/avg_rank": r}``
      (a TensorBoard ``SummaryWriter``'s ``add_scalar`` loop, ``wandb.log``...), on rank 0 only.

    Under ``torch.distributed`` call it on every rank at the same steps: the images are shared between ranks, the
    heads run on rank 0, every rank gets the result; only rank 0 logs and writes. When one rank fails (its share of
    the extraction, rank 0's heads or its generation of the suite), every rank raises, none waits for ever.

    Speed: on a CPU with bf16 units, wrap the model with ``vfm_from_module(..., dtype="bf16")`` (the forward on a bf16
    copy of the weights; faster than fp32 or ``autocast="bf16"`` on AMX: ``benchmarks/bench_in_training.py``).
    """

    def __init__(
        self,
        vfm: Any,
        *,
        every: int,
        suite: str | os.PathLike[str] | EvalSuite | None = None,
        out: str | os.PathLike[str] | None = None,
        heads: Sequence[str] = ("probe-linear", "knn"),
        baselines: Sequence[str | FingerprintScores] = ("pixels",),
        device: str = "cpu",
        log: Callable[[dict[str, float], int], None] | None = None,
        per_ava: int = 150,
        suite_size: int = 224,
        max_train: int | None = None,
        seed: int = 0,
        progress: bool = False,
    ) -> None:
        from ava.heads.memory import check_heads

        self.every = check_every(every)
        self._vfm = vfm
        self._suite_arg, self.per_ava, self.suite_size = suite, per_ava, suite_size
        self.out = Path(out) if out is not None else None
        self.heads = check_heads(heads)
        self.baseline_names = list(baselines)
        self.device, self.log, self.max_train, self.seed, self.progress = device, log, max_train, seed, progress
        self._suite: EvalSuite | None = None
        self._baselines: dict[str, FingerprintScores] | None = None
        self.history: list[dict[str, Any]] = []
        self.last_step: int | None = None

    # -- when ------------------------------------------------------------------------------------------------
    def due(self, step: int) -> bool:
        return step % self.every == 0 and step != self.last_step

    def maybe_run(self, step: int) -> dict[str, Any] | None:
        """:meth:`run` when ``step`` is a multiple of ``every`` (and not the step evaluated last), else None."""
        return self.run(step) if self.due(step) else None

    # -- what ------------------------------------------------------------------------------------------------
    @property
    def suite(self) -> EvalSuite:
        from ava.heads.memory import EvalSuite

        if self._suite is None:
            arg = self._suite_arg
            if isinstance(arg, EvalSuite):
                self._suite = arg
            else:
                data = arg if arg is not None else default_suite(self.per_ava, self.suite_size, self.seed)
                self._suite = EvalSuite(data, max_train=self.max_train, seed=self.seed, keep_pixels=True)
        return self._suite

    def vfm(self) -> Any:
        return self._vfm() if callable(self._vfm) and not hasattr(self._vfm, "identity") else self._vfm

    def run(self, step: int) -> dict[str, Any]:
        """Fingerprint the model now: extract, train the heads, log, append a JSONL line; returns that line's record.

        Everything training depends on is put back afterwards (:func:`ava.training_state.preserved_training_state`).
        """
        from ava.heads.memory import fingerprint_in_memory, rank_and_world
        from ava.training_state import preserved_training_state

        started = time.time()
        vfm = self.vfm()
        with preserved_training_state(getattr(vfm, "module", None)):
            baselines = self.baselines()
            scores = fingerprint_in_memory(
                vfm, self.suite, heads=self.heads, device=self.device, progress=self.progress
            )
        record = self._record(step, scores, baselines, started)
        self.last_step = step
        self.history.append(record)
        if rank_and_world()[0] == 0:
            self._write(record)
            if self.log is not None:
                self.log(self.metrics(record), step)
        return record

    def metrics(self, record: dict[str, Any]) -> dict[str, float]:
        """The scalars of one evaluation: ``ava/<head>/<ability>`` and ``ava/<head>/avg_rank``."""
        out = {f"ava/{h}/{a}": v for h, per in record["scores"].items() for a, v in per.items()}
        out.update({f"ava/{h}/avg_rank": r for h, r in record["avg_rank"].items() if r is not None})
        return out

    def _record(
        self, step: int, scores: FingerprintScores, baselines: dict[str, FingerprintScores], started: float
    ) -> dict[str, Any]:
        from ava.report.ranks import rank_values

        ranks: dict[str, dict[str, float]] = {}
        avg: dict[str, float | None] = {}
        for head, per in scores.scores.items():
            others = {n: b.scores[head] for n, b in baselines.items() if head in b.scores}
            if not others:
                avg[head] = None
                continue
            ranks[head] = {
                a: rank_values({"model": v, **{n: o[a] for n, o in others.items()}}, scores.higher_is_better[a])[
                    "model"
                ]
                for a, v in per.items()
            }
            avg[head] = sum(ranks[head].values()) / len(ranks[head])
        return {
            "step": step,
            "time": round(started, 3),
            "vfm": scores.vfm,
            "scores": scores.scores,
            "avg_rank": avg,
            "ranks": ranks,
            "baselines": {n: b.scores for n, b in baselines.items()},
            "n": scores.n,
            "higher_is_better": scores.higher_is_better,
            "metrics": scores.metrics,
            "split": scores.split,
            "synthetic": scores.synthetic,
            "random_weights": scores.random_weights,
            "seconds": {**scores.seconds, "with_baselines": round(time.time() - started, 3)},
        }

    def _write(self, record: dict[str, Any]) -> None:
        if self.out is None:
            return
        self.out.mkdir(parents=True, exist_ok=True)
        with open(self.out / JSONL, "a", encoding="utf-8") as f:
            f.write(json.dumps(record, sort_keys=True) + "\n")

    # -- baselines -----------------------------------------------------------------------------------------
    def _suite_key(self) -> str:
        from ava.heads.rundir import data_identity

        suite = self.suite
        ident = {
            "data": data_identity(suite.dataset, suite.abilities),
            "split": suite.split,
            "max_train": suite.max_train,
            "seed": suite.seed,
            "heads": self.heads,
        }
        return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]

    def baselines(self) -> dict[str, FingerprintScores]:
        """The baselines' fingerprints on this suite: given, read from ``out`` when made for the same suite and heads,
        or made now (once) and stored there."""
        from ava.heads.memory import FingerprintScores, fingerprint_in_memory, rank_and_world

        if self._baselines is not None:
            return self._baselines
        made = {b.vfm: b for b in self.baseline_names if isinstance(b, FingerprintScores)}
        names = [b for b in self.baseline_names if isinstance(b, str)]
        stored = self._read_stored() if names else {}
        rank, world = rank_and_world()
        if world > 1:  # rank 0's file decides, so every rank takes part in the same extractions
            import torch

            box = [stored]
            torch.distributed.broadcast_object_list(box, src=0)
            stored = box[0]
        for name in names:
            if name not in stored:
                from ava.vfm import load_vfm

                stored[name] = fingerprint_in_memory(
                    load_vfm(name, device="cpu"),
                    self.suite,
                    heads=self.heads,
                    device=self.device,
                    progress=self.progress,
                )
        if names and rank == 0 and self.out is not None:
            self.out.mkdir(parents=True, exist_ok=True)
            doc = {"suite_key": self._suite_key(), "baselines": {n: stored[n].to_dict() for n in names}}
            (self.out / BASELINES).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        self._baselines = {**made, **{n: stored[n] for n in names}}
        return self._baselines

    def _read_stored(self) -> dict[str, FingerprintScores]:
        from ava.heads.memory import FingerprintScores

        if self.out is None or not (self.out / BASELINES).is_file():
            return {}
        try:
            doc = read_json(self.out / BASELINES)
            if doc.get("suite_key") != self._suite_key():
                return {}
            return {n: FingerprintScores(**d) for n, d in doc["baselines"].items()}
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            return {}  # made again: a damaged or foreign file is replaced
