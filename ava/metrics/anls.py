"""ANLS: average normalized Levenshtein similarity with threshold 0.5 (Biten et al., ICCV 2019).

Per sample NLS = 1 - Lev(p, g) / max(len p, len g), both sides lowercased and whitespace-collapsed; an NLS
below 0.5 counts as 0 (an NLS of exactly 0.5 is kept, as ava-spec section 3 words it and as lmms-eval does;
the ST-VQA paper's "NL < tau" would zero it: the two differ only at that single point).
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
    score = 1.0 - Levenshtein.distance(p, g) / longest
    return score if score >= tau else 0.0


ANLS = Metric(
    key="anls",
    title="ANLS",
    higher_is_better=True,
    best=1.0,
    compute=nls,
    worst=constant(0.0),
    worst_rule="0, the lowest NLS.",
)
