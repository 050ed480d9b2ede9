"""The metrics of AVA-Bench, registered by key; see docs/metrics.md.

Entries are lazy so listing them imports neither colour-science nor rapidfuzz.
"""

from __future__ import annotations

from ava.metrics.base import Metric
from ava.registry import Registry

METRICS: Registry[Metric] = Registry("metric")
METRICS.register("accuracy", "ava.metrics.accuracy:ACCURACY", aliases=("acc",))
METRICS.register("mae_gt", "ava.metrics.mae_gt:MAE_GT", aliases=("mae/gt",))
METRICS.register("giou", "ava.metrics.giou:GIOU")
METRICS.register("ciede2000", "ava.metrics.ciede2000:CIEDE2000", aliases=("delta_e", "de2000"))
METRICS.register("anls", "ava.metrics.anls:ANLS")


def get_metric(name: str) -> Metric:
    return METRICS.get(name)


__all__ = ["METRICS", "Metric", "get_metric"]
