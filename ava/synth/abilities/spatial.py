"""Spatial: a red-boxed target and a blue-boxed reference that overlap neither in x nor in y.

The 4 answers are balanced; the gap between the two drawn boxes is at least a few pixels on both axes.
"""

from __future__ import annotations

from PIL import ImageDraw

from ava.abilities import SPATIAL_ANSWERS
from ava.synth.abilities import ask, option_truth
from ava.synth.core import BLUE, RED, Ctx, Rendered
from ava.synth.shapes import OBJECTS, add_noise, box_width, draw_box, draw_icon, icon_size, place, random_color
from ava.synth.textures import backdrop


def _spans(ctx: Ctx, a: float, b: float, first: bool, gap: float) -> tuple[float, float]:
    """Start coordinates of two spans of lengths a, b on [0, size] with the first span before the second."""
    s = ctx.size
    lo, hi = (a, b) if first else (b, a)
    start1 = ctx.uniform(gap, max(gap, s - gap - lo - gap - hi - gap))
    start2 = ctx.uniform(start1 + lo + gap, max(start1 + lo + gap, s - gap - hi))
    return (start1, start2) if first else (start2, start1)


def render_spatial(ctx: Ctx) -> Rendered:
    s = ctx.size
    (ans,) = ctx.balanced(len(SPATIAL_ANSWERS))
    left, above = ans in (0, 1), ans in (0, 2)
    a, b = (OBJECTS[int(i)] for i in ctx.rng.choice(len(OBJECTS), 2, replace=False))
    gap = 2 * (box_width(s) + 1) + max(3, s * 0.02)
    ta = icon_size(a, s * ctx.uniform(0.1, 0.25) * ctx.knobs.scale)
    rb = icon_size(b, s * ctx.uniform(0.1, 0.25) * ctx.knobs.scale)
    scale = min(1.0, (s - 4 * gap) / (ta[0] + rb[0]), (s - 4 * gap) / (ta[1] + rb[1]))
    ta, rb = (ta[0] * scale, ta[1] * scale), (rb[0] * scale, rb[1] * scale)
    tx, rx = _spans(ctx, ta[0], rb[0], left, gap)
    ty, ry = _spans(ctx, ta[1], rb[1], above, gap)
    target, ref = (tx, ty, tx + ta[0], ty + ta[1]), (rx, ry, rx + rb[0], ry + rb[1])
    image = backdrop(ctx, s)
    draw = ImageDraw.Draw(image)
    boxes = [target, ref]
    for _ in range(ctx.n_clutter(0, 3)):
        other = ctx.choice(OBJECTS)
        bb = place(ctx, *icon_size(other, s * ctx.uniform(0.06, 0.14)), (0, 0, s, s), boxes, gap=gap)
        if bb is not None:
            boxes.append(bb)
            draw_icon(draw, other, bb, random_color(ctx))
    draw_icon(draw, a, target, random_color(ctx))
    draw_icon(draw, b, ref, random_color(ctx))
    image = add_noise(ctx, image)
    draw_box(image, target, RED)
    draw_box(image, ref, BLUE)
    options = list(SPATIAL_ANSWERS)
    return Rendered(
        image=image,
        question=ask("spatial", options, a=a, b=b),
        answer=options[ans],
        truth=option_truth(options, ans),
        options=options,
        meta={
            "class": options[ans],
            "target": a,
            "reference": b,
            "target_px": round(max(ta), 1),
            "reference_px": round(max(rb), 1),
        },
    )
