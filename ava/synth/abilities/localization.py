"""Localization: one object of a named class among distractors of other classes on a textured background.

The content is a non-square canvas padded to a square with RGB(124,120,111), as the paper pads its images; no
box is drawn. The truth is the object's exact pixel bbox (from a mask), normalized and rounded to 3 decimals
so the answer string and the truth agree. Box area is balanced over the paper's subgroup bins, within
(0.002, 0.5) of the padded image; the area bin is the size knob here, so the difficulty's scale does not apply
(its clutter and noise do).
"""

from __future__ import annotations

import math

from PIL import ImageDraw

from ava.synth.abilities import ask, fmt_box
from ava.synth.core import Ctx, Rendered
from ava.synth.shapes import OBJECTS, add_noise, draw_icon, icon_size, pad_to_square, place, random_color, tight_box
from ava.synth.textures import backdrop

AREA_BINS = ((0.004, 0.1), (0.1, 0.2), (0.2, 0.3), (0.3, 0.45))


def _canvas_size(ctx: Ctx) -> tuple[int, int]:
    s = ctx.size
    short = round(s * ctx.uniform(0.65, 1.0))
    return (s, short) if ctx.rng.random() < 0.5 else (short, s)


def distractors(ctx: Ctx) -> int:
    """Objects of other classes besides the named one: none on easy, 1-3 on medium, 2-6 on hard.

    The cheap heads (kNN, probes) never read the question, so with distractors they cannot tell which object is
    asked for; on easy the named object is alone and every head can show whether its features place it (with 1-3
    distractors every extractor sat at chance at the demo's size: ``benchmarks/bench_synth_signal.py``).
    """
    return round(ctx.randint(1, 3) * (ctx.knobs.clutter - 1))


def render_localization(ctx: Ctx) -> Rendered:
    s = ctx.size
    (k,) = ctx.balanced(len(OBJECTS), salt="class")
    (a,) = ctx.balanced(len(AREA_BINS), salt="area")
    name = OBJECTS[k]
    cw, ch = _canvas_size(ctx)
    aspect = icon_size(name, 1.0)[0]
    area = ctx.uniform(*AREA_BINS[a]) * s * s
    h = math.sqrt(area / aspect)
    shrink = min(1.0, (cw - 2) / (h * aspect), (ch - 2) / h)
    w, h = h * aspect * shrink, h * shrink
    target = place(ctx, w, h, (0, 0, cw, ch), [])
    assert target is not None
    canvas = backdrop(ctx, cw, ch)
    draw = ImageDraw.Draw(canvas)
    boxes = [target]
    others = [o for o in OBJECTS if o != name]
    for _ in range(distractors(ctx)):
        other = ctx.choice(others)
        dh = s * ctx.uniform(0.08, 0.2)
        b = place(ctx, *icon_size(other, dh), (0, 0, cw, ch), boxes, gap=s * 0.02)
        if b is not None:
            boxes.append(b)
            draw_icon(draw, other, b, random_color(ctx))
    draw_icon(draw, name, target, random_color(ctx))
    image, (ox, oy) = pad_to_square(add_noise(ctx, canvas), s)
    x0, y0, x1, y1 = tight_box((cw, ch), name, target)
    box = [round((x0 + ox) / s, 3), round((y0 + oy) / s, 3), round((x1 + ox) / s, 3), round((y1 + oy) / s, 3)]
    return Rendered(
        image=image,
        question=ask("localization", object=f"the {name}"),
        answer=fmt_box(box),
        truth={"box": box},
        meta={
            "class": name,
            "box_area": round((box[2] - box[0]) * (box[3] - box[1]), 4),
            "canvas": [cw, ch],
            "distractors": len(boxes) - 1,
        },
    )
