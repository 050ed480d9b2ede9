"""One pass over the source images for every rule that reads pixels or masks before its questions are chosen.

Colour's superpixels, the variant tasks' checks, the corrupted-object and point tasks and "touching" each need
per-image work that is most of a build's proposal time. Run rule by rule, every rule would decode every image
again, in one process; here each image is decoded once for all of them, in ``--workers`` forked processes, and
each rule's per-image result (a verdict, a colour, a point pair: small, picklable) is kept in ``ctx.pixels`` for its
builder, which then proposes, drops and counts in image order as before, so the dataset does not depend on the
number of workers. The builders that read no pixels run meanwhile, in the calling process.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ava.curate.core import Context, cached_image
from ava.curate.parallel import forks, imap
from ava.curate.sources import SourceImage

# A rule: which images it reads (None: every image of the COCO source) and what it computes for one of them.
Select = Callable[[Context], list[SourceImage]] | None
Compute = Callable[[Context, SourceImage], Any]


def run_pass(
    ctx: Context,
    rules: dict[str, tuple[Select, Compute]],
    progress: bool = False,
    meanwhile: Callable[[], None] | None = None,
) -> None:
    """Fill ``ctx.pixels[key][image id]`` for every rule in ``rules`` (those of the abilities and tasks being
    built), decoding each image once; ``meanwhile`` (the builders that read no pixels) runs in this process while
    the workers read the images, or after them when there are no workers."""
    items = _items(ctx, rules)
    ctx.pixels.update({k: {} for k in rules})

    def compute(item: tuple[SourceImage, list[str]]) -> list[Any]:
        im, keys = item
        try:
            return [rules[k][1](ctx, im) for k in keys]
        finally:
            cached_image.cache_clear()  # the next image is another one: do not hold this one's pixels

    from rich.progress import TimeRemainingColumn

    from ava.progress import progress as progress_bar

    done = zip(items, imap(compute, items, ctx.workers), strict=True)  # the workers are forked here
    with progress_bar(progress, TimeRemainingColumn()) as bar:
        job = bar.add_task("read pixels", total=len(items))

        def consume() -> None:
            for (im, keys), results in done:
                bar.advance(job)
                for k, r in zip(keys, results, strict=True):
                    ctx.pixels[k][im.id] = r

        if meanwhile is None or not forks(len(items), ctx.workers):
            consume()
            if meanwhile is not None:
                meanwhile()
            return
        failed: list[BaseException] = []

        def background() -> None:
            try:
                consume()
            except BaseException as e:  # raised in the calling thread below
                failed.append(e)

        thread = threading.Thread(target=background, name="ava-pixel-pass", daemon=True)
        thread.start()
        try:
            meanwhile()
        finally:
            thread.join()  # on an error in ``meanwhile`` the pass still ends (its workers are not cut off mid-image)
        if failed:
            raise failed[0]


def _items(ctx: Context, rules: dict[str, tuple[Select, Compute]]) -> list[tuple[SourceImage, list[str]]]:
    """Each image some rule reads, in the source's order, with the rules that read it."""
    if not rules or ctx.coco is None:
        return []
    wanted: dict[Any, list[str]] = {}
    for key, (select, _) in rules.items():
        for im in select(ctx) if select is not None else ctx.coco.images.values():
            wanted.setdefault(im.id, []).append(key)
    return [(im, wanted[im.id]) for im in ctx.coco.images.values() if im.id in wanted]
