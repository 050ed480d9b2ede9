"""Probe heads: a linear probe on pooled features (mean, or mean plus grid cells), an attentive probe on tokens.

Both train one small head per ability from the feature cache, pick it from a grid on a held-out slice
of train, and score through ``ava.metrics`` (see :mod:`ava.heads.probe.train`).
"""

from __future__ import annotations

from typing import Any

from ava.heads.base import HeadSpec
from ava.heads.probe.config import AttnProbeConfig, ProbeConfig


def _train(config: ProbeConfig) -> Any:
    from ava.heads.probe.train import train

    return train(config)


def _evaluate(run_dir: Any, split: str = "test", **options: Any) -> dict[str, Any]:
    from ava.heads.probe.train import evaluate

    return evaluate(run_dir, split, **options)


LINEAR_SPEC = HeadSpec(
    name="probe-linear",
    description="linear probe on pooled patch features, mean or mean + grid cells (OCR: a CTC decoder over the tokens)",
    config_cls=ProbeConfig,
    train=_train,
    evaluate=_evaluate,
)
ATTN_SPEC = HeadSpec(
    name="probe-attn",
    description="attentive probe: learned queries pool the patch tokens, then a linear layer (OCR: CTC decoder)",
    config_cls=AttnProbeConfig,
    train=_train,
    evaluate=_evaluate,
)

__all__ = ["ATTN_SPEC", "LINEAR_SPEC", "AttnProbeConfig", "ProbeConfig"]
