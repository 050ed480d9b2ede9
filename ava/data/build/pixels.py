"""One pass over the source images for every rule that reads pixels or masks before its questions are chosen.

Colour's superpixels, the variant tasks' checks, the corrupted-object and point tasks and "touching" each need
per-image work that is most of a build's proposal time. Run rule by rule, every rule would decode every image
again, in one process; here each image is decoded once for all of them, in ``--workers`` forked processes, and
each rule's per-image result (a verdict, a colour, a point pair: small, picklable) is kept in ``ctx.pixels`` for its
builder, which then proposes, drops and counts in image order as before, so the dataset does not depend on the
number of workers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ava.data.build.core import Context, cached_image
from ava.data.build.parallel import imap
from ava.data.build.sources import SourceImage

# A rule: which images it reads (None: every image of the COCO source) and what it computes for one of them.
Select = Callable[[Context], list[SourceImage]] | None
Compute = Callable[[Context, SourceImage], Any]


def run_pass(ctx: Context, rules: dict[str, tuple[Select, Compute]], progress: bool = False) -> None:
    """Fill ``ctx.pixels[key][image id]`` for every rule in ``rules`` (those of the abilities and tasks being
    built), decoding each image once."""
    if not rules or ctx.coco is None:
        return
    wanted: dict[Any, list[str]] = {}
    for key, (select, _) in rules.items():
        for im in select(ctx) if select is not None else ctx.coco.images.values():
            wanted.setdefault(im.id, []).append(key)
    items = [(im, wanted[im.id]) for im in ctx.coco.images.values() if im.id in wanted]

    def compute(item: tuple[SourceImage, list[str]]) -> list[Any]:
        im, keys = item
        try:
            return [rules[k][1](ctx, im) for k in keys]
        finally:
            cached_image.cache_clear()  # the next image is another one: do not hold this one's pixels

    ctx.pixels.update({k: {} for k in rules})
    from rich.progress import TimeRemainingColumn

    from ava.progress import progress as progress_bar

    with progress_bar(progress, TimeRemainingColumn()) as bar:
        job = bar.add_task("read pixels", total=len(items))
        for (im, keys), results in zip(items, imap(compute, items, ctx.workers), strict=True):
            bar.advance(job)
            for k, r in zip(keys, results, strict=True):
                ctx.pixels[k][im.id] = r
