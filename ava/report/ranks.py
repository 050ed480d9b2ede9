"""Ranks of VFMs per ability and the agreement of two rankings (Kendall tau-b, Spearman rho).

Rank 1 is the best VFM, whatever the metric's direction (accuracy up, MAE/GT and CIEDE2000 down). Ties get
the average of the ranks they span (two VFMs sharing 2nd and 3rd place both get 2.5), as in the paper's
Table 5, so average ranks stay comparable however many ties there are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np


def rank_values(values: Mapping[str, float], higher_is_better: bool) -> dict[str, float]:
    """Rank of each key (1 = best) by its value; tied values share their average rank."""
    from scipy.stats import rankdata

    keys = list(values)
    if not keys:
        return {}
    scores = np.asarray([values[k] for k in keys], dtype=float)
    ranks = rankdata(-scores if higher_is_better else scores, method="average")
    return {k: float(r) for k, r in zip(keys, ranks, strict=True)}


def average_ranks(ranks: Mapping[str, Mapping[str, float]], abilities: list[str]) -> dict[str, float]:
    """Mean rank of each VFM over ``abilities`` (``ranks[ability][vfm]``); every VFM must have every ability."""
    vfms = sorted({v for a in abilities for v in ranks[a]})
    return {v: float(np.mean([ranks[a][v] for a in abilities])) for v in vfms} if abilities else {}


MIN_VFMS = 3  # rank agreement needs at least this many VFMs ranked by both heads


@dataclass
class Agreement:
    """How well two rankings of the same VFMs agree. Values are None, with a reason, when undefined."""

    n: int  # VFMs ranked by both
    kendall_tau: float | None
    spearman_rho: float | None
    kendall_p: float | None = None
    spearman_p: float | None = None
    reason: str | None = None  # why the coefficients are n/a

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def rank_agreement(
    first: Mapping[str, float], second: Mapping[str, float], names: tuple[str, str] = ("first", "second")
) -> Agreement:
    """Kendall tau-b and Spearman rho between two rankings (``vfm -> rank``, lower is better) on their common VFMs.

    Tau-b and rho (Pearson correlation of average ranks) both account for ties. They are n/a, with the reason,
    below ``MIN_VFMS`` VFMs in common (with two VFMs tau can only be +1 or -1: a coin, not an agreement) or when
    one ranking ties every VFM.
    """
    from scipy.stats import kendalltau, spearmanr

    common = sorted(set(first) & set(second))
    n = len(common)
    if n < MIN_VFMS:
        return Agreement(n, None, None, reason=f"n/a: needs >= {MIN_VFMS} VFMs in common (has {n})")
    x = np.asarray([first[k] for k in common], dtype=float)
    y = np.asarray([second[k] for k in common], dtype=float)
    for arr, name in ((x, names[0]), (y, names[1])):
        if np.all(arr == arr[0]):
            return Agreement(n, None, None, reason=f"constant: all {n} VFMs tie under {name}")
    tau = kendalltau(x, y)
    rho = spearmanr(x, y)
    return Agreement(
        n=n,
        kendall_tau=float(tau.statistic),
        spearman_rho=float(rho.statistic),
        kendall_p=float(tau.pvalue),
        spearman_p=float(rho.pvalue),
    )


def normalized_scores(values: Mapping[str, float], baseline: float, best: float) -> dict[str, float]:
    """Scores mapped so that ``baseline`` (chance or majority, whichever is better) is 0 and ``best`` (the
    metric's best possible value) is 1, direction included (works for lower-is-better metrics as given).

    This is an absolute scale per ability, the same whatever VFMs a report holds: a VFM at chance is 0, a
    perfect one 1, below chance negative. Two VFMs 0.1 delta E apart stay 0.1 delta E apart on it.
    """
    span = best - baseline
    if span == 0:
        return dict.fromkeys(values, float("nan"))
    return {k: float((v - baseline) / span) for k, v in values.items()}
