"""Accuracy: the parsed option is the true option (1) or not (0)."""

from __future__ import annotations

from ava.metrics.base import Metric, constant


def accuracy(prediction: int, truth: int) -> float:
    return 1.0 if int(prediction) == int(truth) else 0.0


ACCURACY = Metric(
    key="accuracy",
    title="Accuracy",
    higher_is_better=True,
    best=1.0,
    compute=accuracy,
    worst=constant(0.0),
    worst_rule="0: a reply that names no option is wrong.",
)
