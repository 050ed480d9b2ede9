"""Recognition: a red box around one of the icon classes amid clutter; options are all classes, shuffled.

Distractors are other classes, so only the boxed object answers the question; they are drawn smaller than the
boxed object (its longer side is 0.45-0.65 of the image at easy, theirs 0.1-0.2), so the object the question asks
about is also the one that dominates the image: the cheap heads pool the whole image and cannot follow the red
box, and with the boxed object no bigger than its neighbours every extractor sat at chance at the demo's size
(``benchmarks/bench_synth_signal.py``). The canvas is padded to a square with RGB(124,120,111), as the paper pads
recognition images.
"""

from __future__ import annotations

from PIL import ImageDraw

from ava.synth.abilities import ask, option_truth
from ava.synth.core import RED, Ctx, Rendered
from ava.synth.shapes import OBJECTS, add_noise, draw_box, draw_icon, icon_size, pad_to_square, place, random_color
from ava.synth.textures import backdrop


def render_recognition(ctx: Ctx) -> Rendered:
    s = ctx.size
    (k,) = ctx.balanced(len(OBJECTS))
    name = OBJECTS[k]
    short = round(s * ctx.uniform(0.7, 1.0))
    cw, ch = (s, short) if ctx.rng.random() < 0.5 else (short, s)
    m = s * 0.03
    side = min(s * ctx.uniform(0.45, 0.65) * ctx.knobs.scale, min(cw, ch) - 2 * m - 1)  # the longer side
    w, h = icon_size(name, side / max(1.0, icon_size(name, 1.0)[0]))
    target = place(ctx, w, h, (m, m, cw - m, ch - m), [])
    assert target is not None
    canvas = backdrop(ctx, cw, ch)
    draw = ImageDraw.Draw(canvas)
    boxes = [target]
    others = [o for o in OBJECTS if o != name]
    for _ in range(ctx.n_clutter(1, 3)):
        other = ctx.choice(others)
        dh = s * ctx.uniform(0.1, 0.2) / max(1.0, icon_size(other, 1.0)[0])
        bb = place(ctx, *icon_size(other, dh), (0, 0, cw, ch), boxes, gap=s * 0.03)
        if bb is not None:
            boxes.append(bb)
            draw_icon(draw, other, bb, random_color(ctx))
    draw_icon(draw, name, target, random_color(ctx))
    image, (ox, oy) = pad_to_square(add_noise(ctx, canvas), s)
    draw_box(image, (target[0] + ox, target[1] + oy, target[2] + ox, target[3] + oy), RED)
    options = [OBJECTS[int(i)] for i in ctx.rng.permutation(len(OBJECTS))]
    return Rendered(
        image=image,
        question=ask("recognition", options),
        answer=name,
        truth=option_truth(options, options.index(name)),
        options=options,
        meta={"class": name, "object_px": round(max(target[2] - target[0], target[3] - target[1]), 1)},
    )
