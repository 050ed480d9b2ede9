"""MAE/GT: abs(prediction - truth) / truth per sample, mean over samples (lower is better).

Counting compares integers, absolute depth compares metres (a bin counts as its midpoint, "2-3" -> 2.5).
An unparsed reply gets the worst relative error an in-range answer could get for that sample: for counting
the farther end of the count range 1..40, for depth the farthest midpoint among the question's options (the
paper's indoor and outdoor bins together when a sample lists none). It is finite, sample-specific, and no
parsed answer inside the range can score worse.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ava.errors import AvaError
from ava.metrics.base import Metric

if TYPE_CHECKING:
    from ava.abilities.base import Ability
    from ava.data.format import Sample

COUNT_RANGE = (1, 40)  # the paper's counts


def mae_gt(prediction: float, truth: float) -> float:
    truth = float(truth)
    if truth <= 0:
        raise AvaError(f"MAE/GT needs a positive truth, got {truth}")
    return abs(float(prediction) - truth) / truth


def _depth_midpoints(ability: Ability, sample: Sample) -> list[float]:
    from ava.abilities import INDOOR_DEPTH_BINS, OUTDOOR_DEPTH_BINS
    from ava.abilities.parsers import bin_midpoint, sample_options

    options = sample_options(ability, sample.options) or [*INDOOR_DEPTH_BINS, *OUTDOOR_DEPTH_BINS]
    mids = [m for m in (bin_midpoint(o) for o in options) if m is not None]
    if not mids:
        raise AvaError(f"sample {sample.ava}/{sample.id}: no depth bin among its options {options}")
    return mids


def worst_mae_gt(truth: Any, ability: Ability, sample: Sample) -> float:
    """The largest MAE/GT an answer inside the sample's answer range could get."""
    candidates = _depth_midpoints(ability, sample) if ability.answer_kind == "depth_bin" else list(COUNT_RANGE)
    return max(mae_gt(c, truth) for c in candidates)


MAE_GT = Metric(
    key="mae_gt",
    title="MAE/GT",
    higher_is_better=False,
    best=0.0,
    compute=mae_gt,
    worst=worst_mae_gt,
    worst_rule=(
        "the worst relative error an in-range answer could get for that sample: counting, the farther of 1 and "
        "40; depth, the farthest option midpoint."
    ),
)
