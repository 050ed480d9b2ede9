"""ANLS: average normalized Levenshtein similarity with threshold 0.5 (Biten et al., ICCV 2019).

Per sample NL = Lev(p, g) / max(len p, len g), both sides lowercased and whitespace-collapsed; the sample scores
1 - NL when NL < tau = 0.5 and 0 otherwise (Biten et al. 2019, eq. 1, and the release's scorer). A distance of
exactly 0.5 scores 0: "V." read for "V" is half wrong, not half right.
"""

from __future__ import annotations

from rapidfuzz.distance import Levenshtein

from ava.metrics.base import Metric, constant

TAU = 0.5


def normalize(text: str) -> str:
    return " ".join(str(text).lower().split())


def nls(prediction: str, truth: str, tau: float = TAU) -> float:
    """Thresholded normalized Levenshtein similarity of one reply."""
    p, g = normalize(prediction), normalize(truth)
    longest = max(len(p), len(g))
    if longest == 0:
        return 1.0
    distance = Levenshtein.distance(p, g) / longest
    return 1.0 - distance if distance < tau else 0.0


ANLS = Metric(
    key="anls",
    title="ANLS",
    higher_is_better=True,
    best=1.0,
    compute=nls,
    worst=constant(0.0),
    worst_rule="0, the lowest NLS.",
)
