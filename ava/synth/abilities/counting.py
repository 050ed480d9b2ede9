"""Counting: 1..40 instances of a named shape among distractor shapes, balanced over the count values.

Instances sit in distinct cells of a jittered 8x8 grid, so they never overlap and every one is countable.
"""

from __future__ import annotations

from PIL import ImageDraw

from ava.synth.abilities import ask
from ava.synth.core import Ctx, Rendered
from ava.synth.shapes import BASIC_SHAPES, PLURALS, add_noise, draw_icon, icon_size, random_color
from ava.synth.textures import backdrop

MAX_COUNT = 40
GRID = 8


def render_counting(ctx: Ctx) -> Rendered:
    s = ctx.size
    (c,) = ctx.balanced(MAX_COUNT)
    count = c + 1
    (k,) = ctx.balanced(len(BASIC_SHAPES), salt="class")
    name = BASIC_SHAPES[k]
    others = [o for o in BASIC_SHAPES if o != name]
    n_distract = min(ctx.n_clutter(0, 4), GRID * GRID - count)
    cells = ctx.rng.permutation(GRID * GRID)[: count + n_distract]
    cell = s / GRID
    same_color = ctx.rng.random() < 0.5  # half the images: one colour for all, so colour cannot be the cue
    shared = random_color(ctx)
    image = backdrop(ctx, s)
    draw = ImageDraw.Draw(image)
    for i, c_idx in enumerate(cells):
        shape = name if i < count else ctx.choice(others)
        h = cell * ctx.uniform(0.5, 0.8) * max(0.6, ctx.knobs.scale)
        w, h = icon_size(shape, h)
        if w > cell * 0.9:
            w, h = cell * 0.9, cell * 0.9 * h / w
        gx, gy = divmod(int(c_idx), GRID)
        x = gx * cell + ctx.uniform(0, cell - w)
        y = gy * cell + ctx.uniform(0, cell - h)
        draw_icon(draw, shape, (x, y, x + w, y + h), shared if same_color else random_color(ctx))
    return Rendered(
        image=add_noise(ctx, image),
        question=ask("counting", object=PLURALS[name]),
        answer=str(count),
        truth={"value": count},
        meta={"class": name, "count": count, "distractors": int(n_distract)},
    )
