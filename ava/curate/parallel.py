"""Per-item work of a build in ``--workers`` forked processes, results in input order.

The work is often a closure over the build's context (a rule's check, a question's renderer), which does not
pickle; forked workers inherit it instead, and only the items' indices and the results cross the process boundary.
Where ``fork`` is not offered (Windows, macOS's default is spawn but fork exists) or there is too little to share
out, the work runs in this process.
"""

from __future__ import annotations

import itertools
import multiprocessing as mp
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")

_JOB: list[Any] = [None]  # (fn, items) of the running imap, read by the forked workers


def forks(n_items: int, workers: int, chunk: int = 32) -> bool:
    """Whether :func:`imap` runs in worker processes for this many items."""
    return workers > 1 and n_items > chunk and "fork" in mp.get_all_start_methods()


def imap(fn: Callable[[T], R], items: Sequence[T], workers: int, chunk: int = 32) -> Iterator[R]:
    """``fn(item)`` for each item, in order as the chunks are done; by ``workers`` forked processes when
    ``workers > 1`` and there is more than one chunk. The first result is computed before this returns, so every
    worker is forked here, before any thread the caller starts afterwards (a progress bar's) runs: a child forked
    beside a running thread may inherit a lock that thread holds. A worker's exception is raised where its result
    would be, and the chunks not yet started are cancelled."""
    results = _imap(fn, items, workers, chunk)
    first = next(results, _NOTHING)
    return results if first is _NOTHING else itertools.chain([first], results)  # type: ignore[list-item]


_NOTHING = object()


def _imap(fn: Callable[[T], R], items: Sequence[T], workers: int, chunk: int) -> Iterator[R]:
    if not forks(len(items), workers, chunk):
        for item in items:
            yield fn(item)
        return
    if _JOB[0] is not None:
        raise RuntimeError("ava.curate.parallel.imap does not nest")
    _JOB[0] = (fn, items)
    pool = ProcessPoolExecutor(workers, mp_context=mp.get_context("fork"))
    try:
        spans = [(i, min(i + chunk, len(items))) for i in range(0, len(items), chunk)]
        for done in pool.map(_span, spans):
            yield from done
    finally:
        _JOB[0] = None
        pool.shutdown(wait=True, cancel_futures=True)


def _span(span: tuple[int, int]) -> list[Any]:
    fn, items = _JOB[0]
    return [fn(items[i]) for i in range(*span)]
