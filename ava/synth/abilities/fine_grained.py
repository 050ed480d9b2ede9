"""Fine-grained: 24 sub-classes ("species") of one family, birds, told apart by small details only.

A species is a tail shape (forked or fan) x a wing pattern (plain, barred, spotted, streaked) x a beak (short
conical "finch", long thin "warbler", hooked "shrike"). Body colour, size, pose direction and background are
nuisances drawn at random, so the body colour never gives the answer away. Options list every species.
"""

from __future__ import annotations

import itertools

from PIL import Image, ImageDraw

from ava.synth.abilities import ask, option_truth
from ava.synth.core import Ctx, Rendered
from ava.synth.shapes import BROWN, GREEN, INK, add_noise, contrasting_color, gradient, random_color, shade

TAILS = ("fork-tailed", "fan-tailed")
PATTERNS = ("plain", "barred", "spotted", "streaked")
BEAKS = ("finch", "warbler", "shrike")
SPECIES: tuple[str, ...] = tuple(f"{t} {p} {b}" for t, p, b in itertools.product(TAILS, PATTERNS, BEAKS))
FAMILY = "bird"


def _wing_pattern(ctx: Ctx, pattern: str, size: tuple[int, int], color) -> Image.Image:
    """The wing's pattern on a transparent layer of the wing's box size."""
    w, h = size
    layer = Image.new("RGBA", size, (0, 0, 0, 0))
    d = ImageDraw.Draw(layer)
    lw = max(1, round(h * 0.08))
    if pattern == "barred":
        for x in range(0, w, max(3, w // 6)):
            d.line([(x, 0), (x + h * 0.3, h)], fill=(*color, 255), width=lw)
    elif pattern == "spotted":
        r = max(1.0, h * 0.09)
        for _ in range(10):
            x, y = ctx.uniform(0, w), ctx.uniform(0, h)
            d.ellipse([x - r, y - r, x + r, y + r], fill=(*color, 255))
    elif pattern == "streaked":
        for y in range(max(1, h // 5), h, max(3, h // 4)):
            d.line([(w * 0.1, y), (w * 0.95, y + h * 0.06)], fill=(*color, 255), width=lw)
    return layer


def draw_bird(ctx: Ctx, image: Image.Image, species: str, cx: float, cy: float, L: float, facing: int) -> None:
    """A side-view bird of body length ``L`` centred at (cx, cy); ``facing`` 1 = beak to the right."""
    tail, pattern, beak = species.split(" ")
    draw = ImageDraw.Draw(image)
    body = random_color(ctx, 40, 220)
    wing = shade(body, 0.65)

    def X(u: float) -> float:
        return cx + facing * u * L

    # legs and tail behind the body
    draw.line([(X(0.0), cy + 0.2 * L), (X(0.02), cy + 0.42 * L)], fill=INK, width=max(1, round(L * 0.03)))
    draw.line([(X(0.12), cy + 0.2 * L), (X(0.14), cy + 0.42 * L)], fill=INK, width=max(1, round(L * 0.03)))
    if tail == "fork-tailed":
        pts = [
            (X(-0.3), cy - 0.05 * L),
            (X(-0.75), cy - 0.2 * L),
            (X(-0.58), cy + 0.02 * L),
            (X(-0.75), cy + 0.22 * L),
            (X(-0.3), cy + 0.08 * L),
        ]
    else:
        pts = [
            (X(-0.3), cy - 0.04 * L),
            (X(-0.7), cy - 0.2 * L),
            (X(-0.78), cy + 0.02 * L),
            (X(-0.7), cy + 0.24 * L),
            (X(-0.3), cy + 0.08 * L),
        ]
    draw.polygon(pts, fill=wing)
    bx0, bx1 = sorted((X(-0.45), X(0.4)))
    draw.ellipse([bx0, cy - 0.24 * L, bx1, cy + 0.24 * L], fill=body)
    hx, hy, hr = X(0.42), cy - 0.2 * L, 0.17 * L
    draw.ellipse([hx - hr, hy - hr, hx + hr, hy + hr], fill=body)
    er = max(1.0, 0.035 * L)
    draw.ellipse([X(0.47) - er, hy - 0.04 * L - er, X(0.47) + er, hy - 0.04 * L + er], fill=INK)
    bx = 0.56
    beak_col = (235, 180, 60)
    if beak == "finch":
        draw.polygon([(X(bx), hy - 0.08 * L), (X(bx + 0.14), hy + 0.0 * L), (X(bx), hy + 0.08 * L)], fill=beak_col)
    elif beak == "warbler":
        draw.polygon([(X(bx), hy - 0.03 * L), (X(bx + 0.3), hy + 0.01 * L), (X(bx), hy + 0.04 * L)], fill=beak_col)
    else:  # shrike: a hooked tip
        draw.polygon(
            [
                (X(bx), hy - 0.05 * L),
                (X(bx + 0.17), hy - 0.03 * L),
                (X(bx + 0.2), hy + 0.06 * L),
                (X(bx + 0.14), hy + 0.01 * L),
                (X(bx), hy + 0.05 * L),
            ],
            fill=beak_col,
        )
    # the wing with its pattern
    wx0, wx1 = sorted((X(-0.3), X(0.22)))
    wy0, wy1 = cy - 0.12 * L, cy + 0.14 * L
    ww, wh = max(2, round(wx1 - wx0)), max(2, round(wy1 - wy0))
    mask = Image.new("L", (ww, wh), 0)
    ImageDraw.Draw(mask).ellipse([0, 0, ww - 1, wh - 1], fill=255)
    wing_img = Image.new("RGB", (ww, wh), wing)
    if pattern != "plain":
        pat = _wing_pattern(ctx, pattern, (ww, wh), contrasting_color(ctx, wing, 70))
        wing_img.paste(pat, (0, 0), pat)
    image.paste(wing_img, (round(wx0), round(wy0)), mask)


def render_fine_grained(ctx: Ctx) -> Rendered:
    s = ctx.size
    (k,) = ctx.balanced(len(SPECIES))
    species = SPECIES[k]
    image = gradient((s, s), shade(random_color(ctx, 100, 220), 1.5), shade(random_color(ctx, 100, 220), 1.2))
    draw = ImageDraw.Draw(image)
    L = s * ctx.uniform(0.42, 0.6) * ctx.knobs.scale
    facing = 1 if ctx.rng.random() < 0.5 else -1
    cx, cy = s / 2 + ctx.uniform(-0.1, 0.1) * s, s / 2 + ctx.uniform(-0.1, 0.05) * s
    branch_y = cy + 0.42 * L
    draw.line(
        [(0, branch_y + ctx.uniform(-5, 5)), (s, branch_y + ctx.uniform(-5, 5))],
        fill=BROWN,
        width=max(2, round(L * 0.06)),
    )
    for _ in range(ctx.n_clutter(1, 4)):  # leaves
        lx, ly, lr = ctx.uniform(0, s), ctx.uniform(0, s), s * ctx.uniform(0.02, 0.05)
        if abs(lx - cx) > 0.8 * L or abs(ly - cy) > 0.5 * L:
            draw.ellipse([lx - 1.6 * lr, ly - lr, lx + 1.6 * lr, ly + lr], fill=shade(GREEN, ctx.uniform(0.7, 1.3)))
    draw_bird(ctx, image, species, cx, cy, L, facing)
    options = list(SPECIES)
    return Rendered(
        image=add_noise(ctx, image),
        question=ask("fine_grained", options, family=FAMILY),
        answer=species,
        truth=option_truth(options, k),
        options=options,
        meta={"class": species, "family": FAMILY, "bird_px": round(L, 1), "facing": "right" if facing > 0 else "left"},
    )
