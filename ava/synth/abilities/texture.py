"""Texture: the whole image is one procedural texture; options are the 47 DTD classes, as in the paper.

Only the classes of :data:`ava.synth.textures.TEXTURES` are ever the answer (balanced); the difficulty's scale
knob shrinks the pattern period, its noise knob adds pixel noise.
"""

from __future__ import annotations

from ava.abilities import DTD_TEXTURES
from ava.synth import textures as tex
from ava.synth.abilities import ask, option_truth
from ava.synth.core import Ctx, Rendered
from ava.synth.shapes import add_noise, contrasting_color, random_color

CLASSES: tuple[str, ...] = tuple(tex.TEXTURES)
assert set(CLASSES) <= set(DTD_TEXTURES), "texture classes must be DTD names"


def render_texture(ctx: Ctx) -> Rendered:
    (k,) = ctx.balanced(len(CLASSES))
    name = CLASSES[k]
    bg = random_color(ctx, 0, 255)
    fg = contrasting_color(ctx, bg, 70)
    period = ctx.size * ctx.uniform(1 / 12, 1 / 6) * ctx.knobs.scale
    image = add_noise(ctx, tex.render_texture(ctx, name, ctx.size, fg, bg, period))
    options = list(DTD_TEXTURES)
    return Rendered(
        image=image,
        question=ask("texture", options),
        answer=name,
        truth=option_truth(options, options.index(name)),
        options=options,
        meta={"class": name, "period_px": round(period, 1)},
    )
