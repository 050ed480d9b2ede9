"""What a metric is: a per-sample score, its direction, and the fixed value an unparsed reply gets."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ava.abilities.base import Ability
    from ava.data.format import Sample


@dataclass(frozen=True)
class Metric:
    """A per-sample metric; an ability's score is the mean over all its samples.

    ``compute(prediction, truth)`` takes the values ``parse_reply`` and ``truth_value`` return.
    ``worst(truth, ability, sample)`` is the score of an unparsed (or missing) reply: never dropped from
    the mean, it is counted as unparsed and scored at this value. ``worst_rule`` says how it is chosen.
    ``compute_many(predictions, truths)``, where given, is ``compute`` over two lists at once (the same values, one
    vectorized call: for metrics whose library costs far more per call than per value).
    """

    key: str
    title: str
    higher_is_better: bool
    best: float
    compute: Callable[[Any, Any], float]
    worst: Callable[[Any, Ability, Sample], float]
    worst_rule: str
    compute_many: Callable[[list[Any], list[Any]], Any] | None = None

    @property
    def arrow(self) -> str:
        return "↑" if self.higher_is_better else "↓"


def constant(value: float) -> Callable[[Any, Any, Any], float]:
    """A worst-value rule that does not depend on the sample."""

    def worst(truth: Any, ability: Any, sample: Any) -> float:
        return value

    return worst
