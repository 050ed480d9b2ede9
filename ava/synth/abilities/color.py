"""Colour: a red box around a uniform patch whose sRGB value is drawn uniformly from the whole gamut.

The patch is large (0.4-0.6 of the image side): with small patches (0.14-0.3) no cheap head did better than the
median colour at the demo's size, raw pixels included; a large one lets a colour-faithful extractor lead, as
raw pixels should (``benchmarks/bench_synth_signal.py``). Smaller patches of other colours outside the
box are the clutter, so the box, not the dominant colour alone, decides the answer.
The patch itself stays noise-free (noise is added first, the patch painted over it) so its colour is exact.
"""

from __future__ import annotations

from PIL import ImageDraw

from ava.synth.abilities import ask, fmt_rgb
from ava.synth.core import Ctx, Rendered
from ava.synth.shapes import add_noise, draw_box, place, random_color
from ava.synth.textures import backdrop


def render_color(ctx: Ctx) -> Rendered:
    s = ctx.size
    rgb = tuple(int(v) for v in ctx.rng.integers(0, 256, size=3))
    side = max(8.0, s * ctx.uniform(0.4, 0.6) * ctx.knobs.scale)
    w, h = side * ctx.uniform(0.7, 1.4), side
    m = s * 0.04
    target = place(ctx, w, h, (m, m, s - m, s - m), [])
    assert target is not None
    image = backdrop(ctx, s)
    draw = ImageDraw.Draw(image)
    boxes = [target]
    for _ in range(ctx.n_clutter(1, 3)):
        d = s * ctx.uniform(0.06, 0.16)
        b = place(ctx, d * ctx.uniform(0.6, 1.5), d, (0, 0, s, s), boxes, gap=s * 0.03)
        if b is not None:
            boxes.append(b)
            fill = random_color(ctx, 0, 255)
            (draw.ellipse if ctx.rng.random() < 0.5 else draw.rectangle)(b, fill=fill)
    image = add_noise(ctx, image)
    ImageDraw.Draw(image).rectangle([round(v) for v in target], fill=rgb)
    draw_box(image, target, (255, 0, 0))
    return Rendered(
        image=image,
        question=ask("color"),
        answer=fmt_rgb(rgb),
        truth={"rgb": list(rgb)},
        meta={"patch_px": round(w * h)},
    )
