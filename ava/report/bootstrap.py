"""Sampling uncertainty of a report's scores, by the bootstrap over test samples (vectorized with numpy).

An ability's score is the mean of per-sample scores over its test samples, so the score another draw of test
samples would give is estimated by resampling those samples with replacement: ``B`` replicate means per VFM,
from which a percentile interval (95% by default), ranks per replicate, and paired "A beats B" probabilities
follow. VFMs scored on the same samples are resampled with the *same* draws (a paired bootstrap), so the
difference between two VFMs is judged on the samples they share, not on two independent noises.

Every draw comes from ``numpy.random.default_rng((seed, crc32(label)))``: a report rebuilt from the same runs
with the same seed gives the same intervals, and one table's draws do not depend on which other tables exist.

Replicates are computed from resampling counts: ``[chunk, n]`` sample indices drawn at once, counted per row with
one ``bincount``, then ``scores @ counts.T / n`` (one BLAS product for every VFM), in chunks of about a million
indices so memory stays bounded for any n; much faster than gathering the scores per VFM
(``benchmarks/bench_report_bootstrap.py``).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

N_BOOT = 2000
LEVEL = 0.95
SEED = 0
SEPARATED = 0.95  # "A beats B" at or above this probability (or at or below 1 - it) separates two ranks
_CHUNK_ELEMENTS = 1 << 20


def rng_for(label: str, seed: int = SEED) -> np.random.Generator:
    """The generator of one table/ability: seeded by ``seed`` and a stable hash of ``label``."""
    return np.random.default_rng((seed, zlib.crc32(label.encode("utf-8"))))


def replicate_means(scores: np.ndarray, n_boot: int = N_BOOT, rng: np.random.Generator | None = None) -> np.ndarray:
    """``[V, n_boot]`` bootstrap means of ``scores`` ``[V, n]`` (rows: VFMs scored on the same ``n`` samples,
    resampled with the same draws: paired)."""
    scores = np.atleast_2d(np.asarray(scores, dtype=float))
    v, n = scores.shape
    if n == 0:
        raise ValueError("cannot bootstrap zero samples")
    rng = rng or np.random.default_rng(SEED)
    out = np.empty((v, n_boot))
    chunk = max(1, _CHUNK_ELEMENTS // n)
    for start in range(0, n_boot, chunk):
        c = min(chunk, n_boot - start)
        idx = rng.integers(0, n, size=(c, n)) + np.arange(c)[:, None] * n
        counts = np.bincount(idx.ravel(), minlength=c * n).reshape(c, n).astype(float)
        out[:, start : start + c] = scores @ counts.T / n
    return out


def interval(replicates: np.ndarray, level: float = LEVEL) -> np.ndarray:
    """``[..., 2]`` percentile interval of replicates along the last axis."""
    tail = (1.0 - level) / 2 * 100
    lo, hi = np.percentile(replicates, [tail, 100 - tail], axis=-1)
    return np.stack([lo, hi], axis=-1)


def beats(replicates: np.ndarray, higher_is_better: bool) -> np.ndarray:
    """``[V, V]`` probability that row VFM scores better than column VFM over the replicates (ties count half)."""
    r = replicates if higher_is_better else -replicates
    diff = r[:, None, :] - r[None, :, :]
    return (diff > 0).mean(-1) + 0.5 * (diff == 0).mean(-1)


def replicate_ranks(replicates: np.ndarray, higher_is_better: bool) -> np.ndarray:
    """``[V, B]`` rank (1 = best, ties averaged) of each VFM within each replicate."""
    from scipy.stats import rankdata

    return rankdata(-replicates if higher_is_better else replicates, axis=0, method="average")


def tie_groups(order: list[int], p_beats: np.ndarray, threshold: float = SEPARATED) -> list[list[int]]:
    """Group neighbours in ``order`` (best first) that the bootstrap does not separate: a VFM joins the group of
    the one before it when neither beats the other with probability >= ``threshold``."""
    groups: list[list[int]] = []
    for i in order:
        if groups and max(p_beats[groups[-1][-1], i], p_beats[i, groups[-1][-1]]) < threshold:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


# -- rank correlations on replicates (rows), checked against scipy in tests/test_bootstrap.py ------------------
def kendall_tau_b_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Kendall tau-b of each row pair of ``x``, ``y`` ``[B, V]``; NaN where one row is constant."""
    iu = np.triu_indices(x.shape[1], k=1)
    dx = np.sign(x[:, :, None] - x[:, None, :])[:, iu[0], iu[1]]
    dy = np.sign(y[:, :, None] - y[:, None, :])[:, iu[0], iu[1]]
    n0 = dx.shape[1]
    nx, ny = np.count_nonzero(dx, axis=1), np.count_nonzero(dy, axis=1)
    denom = np.sqrt(nx.astype(float) * ny)
    with np.errstate(invalid="ignore", divide="ignore"):
        tau = (dx * dy).sum(1) / denom
    return np.where((denom == 0) | (n0 == 0), np.nan, tau)


def spearman_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman rho (Pearson correlation of average ranks) of each row pair; NaN where one row is constant."""
    from scipy.stats import rankdata

    rx, ry = rankdata(x, axis=1), rankdata(y, axis=1)
    rx = rx - rx.mean(1, keepdims=True)
    ry = ry - ry.mean(1, keepdims=True)
    denom = np.sqrt((rx * rx).sum(1) * (ry * ry).sum(1))
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = (rx * ry).sum(1) / denom
    return np.where(denom == 0, np.nan, rho)


@dataclass
class Summary:
    """The interval of a replicated statistic, with how many replicates left it undefined."""

    low: float | None
    high: float | None
    undefined: int  # replicates where the statistic was undefined (NaN), left out of the interval

    @classmethod
    def of(cls, replicates: np.ndarray, level: float = LEVEL) -> Summary:
        ok = replicates[np.isfinite(replicates)]
        if ok.size == 0:
            return cls(None, None, int(replicates.size))
        lo, hi = interval(ok, level)
        return cls(float(lo), float(hi), int(replicates.size - ok.size))
