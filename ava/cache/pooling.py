"""Pooled views of patch tokens: the global mean (``"mean"``), and ``"gridN"`` = the mean plus the means of N x N
cells of the token grid (coarse position, which the mean loses). The probes and kNN read them; extraction stores
them beside the tokens (``pooled/<layer>/<view>`` in a cache group, see :mod:`ava.cache.store`), computed from the
stored (decoded) tokens: by :func:`pool_tokens` on a CPU, so a stored view equals the view computed at read time bit
for bit, and by :func:`pool_tokens_torch` on a GPU, before the copy to the host (equal to float32 rounding). The
``int4`` codec's views are pooled from the features before encoding instead (``Codec.pools_input``: its 4-bit error
would otherwise reach the float32 views).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from ava.errors import AvaError

STORED_VIEWS = ("mean", "grid2", "grid4")  # stored at extraction: the views the probes' and kNN's defaults try

_POOL_RE = re.compile(r"^grid(\d+)$")


def token_grid(cache: Any) -> tuple[int, int] | None:
    """The (rows, cols) layout of the cache's patch tokens: the cache's own grid when it matches the token
    count, else a square sqrt(T) x sqrt(T) grid when T is a perfect square, else None (no known layout)."""
    t = int(cache.num_tokens)
    grid = tuple(int(g) for g in (getattr(cache, "grid", None) or ()))
    if len(grid) == 2 and grid[0] * grid[1] == t and min(grid) > 0:
        return grid  # type: ignore[return-value]
    side = math.isqrt(t)
    return (side, side) if side > 1 and side * side == t else None


def pool_cells(pool: str) -> int:
    """Cells per side of a pooled view: ``"mean"`` -> 0 (the global mean only), ``"gridN"`` -> N."""
    if pool == "mean":
        return 0
    m = _POOL_RE.match(pool)
    if not m or int(m.group(1)) < 1:
        raise AvaError(
            f"unknown pooling {pool!r}; use 'mean' or 'gridN' (the mean plus N x N cell means), e.g. 'grid4'"
        )
    return int(m.group(1))


def pool_candidates(cache: Any, pools: Sequence[str]) -> list[str]:
    """The pooled views a selection grid tries: ``pools`` validated, minus grid views the cache's tokens cannot
    take (no known layout, or more cells per side than token rows/cols); ``"mean"`` when nothing is left."""
    grid = token_grid(cache)
    out = []
    for pool in dict.fromkeys(pools):
        n = pool_cells(pool)
        if n == 0 or (grid is not None and n <= min(grid)):
            out.append(pool)
    return out or ["mean"]


def pool_dim(dim: int, pool: str) -> int:
    """Feature size of a pooled view of ``dim``-dimensional tokens (the mean, plus N * N cells)."""
    return dim * (1 + pool_cells(pool) ** 2)


def pool_tokens(tokens: np.ndarray, pool: str, grid: tuple[int, int] | None) -> np.ndarray:
    """[B, T, D] tokens -> [B, D'] pooled view: the mean over tokens, then for ``"gridN"`` the means of N x N
    cells of the token grid (row-major; cell edges as ``adaptive_avg_pool2d``: floor(i*R/N) .. ceil((i+1)*R/N)).

    Mean pooling forgets where things are; the cells keep coarse position (what spatial relations, counts
    per region, and the colour at a place need) at the cost of N * N times the features."""
    mean = tokens.mean(axis=1)
    cells = _cell_slices(pool, grid, tokens.shape[1])
    if not cells:
        return mean
    x = tokens.reshape(tokens.shape[0], *grid, tokens.shape[2])  # type: ignore[misc]
    means = [x[:, rs, cs].mean(axis=(1, 2)) for rs, cs in cells]
    return np.concatenate([mean, *means], axis=1).astype(np.float32, copy=False)


def _cell_slices(pool: str, grid: tuple[int, int] | None, num_tokens: int) -> list[tuple[slice, slice]]:
    """The (rows, cols) slices of a view's N x N cells, row-major, with the edges of ``adaptive_avg_pool2d``:
    floor(i*R/N) .. ceil((i+1)*R/N); none for ``"mean"``. A grid view of tokens without a layout is refused."""
    n = pool_cells(pool)
    if n == 0:
        return []
    if grid is None or grid[0] * grid[1] != num_tokens:
        raise AvaError(f"pooling {pool!r} needs a token grid, but the cache's {num_tokens} tokens have no layout")
    rows, cols = grid
    edges = lambda size: [slice((i * size) // n, -((-(i + 1) * size) // n)) for i in range(n)]  # noqa: E731
    return [(rs, cs) for rs in edges(rows) for cs in edges(cols)]


def pool_tokens_torch(tokens: Any, pool: str, grid: tuple[int, int] | None) -> Any:
    """:func:`pool_tokens` in torch, on the tokens' device (a GPU extraction pools there, before the copy to the
    host). The same cells and means; the sums run in another order than numpy's, so values agree with
    :func:`pool_tokens` of the same tokens to float32 rounding (a few ulp), not bit for bit."""
    import torch

    tokens = tokens.float()
    mean = tokens.mean(dim=1)
    cells = _cell_slices(pool, grid, tokens.shape[1])
    if not cells:
        return mean
    x = tokens.reshape(tokens.shape[0], *grid, tokens.shape[2])  # type: ignore[misc]
    return torch.cat([mean, *(x[:, rs, cs].mean(dim=(1, 2)) for rs, cs in cells)], dim=1)
