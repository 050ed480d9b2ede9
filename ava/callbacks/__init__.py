"""Fingerprints inside a training loop: every N steps, the ability fingerprint of the model being trained.

Made for people building VFMs, who want the fingerprint while pretraining rather than after: every ``every`` steps
the model's features of a fixed evaluation suite (the built-in synthetic suite by default, or your dataset) are
extracted into memory, the linear probe and kNN are trained per ability on them (:mod:`ava.heads.memory`: the same
code as ``ava fingerprint``), and one scalar per ability plus the average rank against stored baselines (the
``pixels`` floor by default) go to your logger and to a JSONL file. Training is not perturbed: model mode,
``requires_grad``, autocast, grad mode, thread count and every RNG state are put back (:mod:`ava.training_state`).

- :class:`FingerprintMonitor` (``.maybe_run(step)``) for any loop;
- :class:`Fingerprint` for PyTorch Lightning (``pip install ava-bench[lightning]``; imported only when used).
"""

from __future__ import annotations

from typing import Any

from ava.callbacks.monitor import FingerprintMonitor, default_suite
from ava.training_state import preserved_training_state

__all__ = ["Fingerprint", "FingerprintMonitor", "default_suite", "preserved_training_state"]


def __getattr__(name: str) -> Any:
    if name == "Fingerprint":
        from ava.callbacks.lightning import Fingerprint

        return Fingerprint
    raise AttributeError(f"module 'ava.callbacks' has no attribute {name!r}")
