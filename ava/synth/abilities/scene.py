"""Scene: 10 layouts composed from primitives (sky, ground, water, buildings, trees, mountains, road, room).

Each layout has a fixed composition rule and random geometry and colours within it, so the class is the
arrangement, not one colour: e.g. a coast has water meeting sand at an open horizon, a lake has water ringed
by green banks and hills, a field has crop rows converging to the horizon, a road has a grey road with lane
dashes. Options list all 10 classes.
"""

from __future__ import annotations

import math

from PIL import Image, ImageDraw

from ava.synth.abilities import ask, option_truth
from ava.synth.core import Ctx, Rendered
from ava.synth.shapes import BROWN, add_noise, draw_icon, gradient, shade

Draw = ImageDraw.ImageDraw


def _j(ctx: Ctx, c: tuple[int, int, int], amt: int = 18) -> tuple[int, int, int]:
    """``c`` with a random brightness/hue jitter of +-amt per channel."""
    return tuple(int(min(255, max(0, v + ctx.randint(-amt, amt)))) for v in c)  # type: ignore[return-value]


def _sky(ctx: Ctx, s: int) -> Image.Image:
    return gradient((s, s), _j(ctx, (90, 150, 220)), _j(ctx, (190, 215, 240)))


def _horizon(ctx: Ctx, s: int, lo: float = 0.35, hi: float = 0.55) -> float:
    return s * ctx.uniform(lo, hi)


def coast(ctx: Ctx, s: int) -> Image.Image:
    im = _sky(ctx, s)
    d = ImageDraw.Draw(im)
    hz = _horizon(ctx, s, 0.3, 0.5)
    d.rectangle([0, hz, s, s], fill=_j(ctx, (40, 110, 170)))
    a, b = ctx.uniform(0.6, 0.8) * s, ctx.uniform(0.75, 1.0) * s  # the shoreline rises diagonally
    left = ctx.rng.random() < 0.5
    pts = [(0, s), (0, a), (s, b), (s, s)] if left else [(0, s), (0, b), (s, a), (s, s)]
    d.polygon(pts, fill=_j(ctx, (225, 205, 150)))
    for _ in range(6):  # wave crests
        y = ctx.uniform(hz + 0.02 * s, min(a, b))
        x = ctx.uniform(0, s * 0.8)
        d.line([(x, y), (x + s * 0.15, y)], fill=(235, 240, 245), width=max(1, s // 200))
    return im


def lake(ctx: Ctx, s: int) -> Image.Image:
    im = _sky(ctx, s)
    d = ImageDraw.Draw(im)
    hz = _horizon(ctx, s, 0.3, 0.42)
    for _ in range(3):  # hills behind the lake
        cx, w, h = ctx.uniform(0, s), ctx.uniform(0.3, 0.6) * s, ctx.uniform(0.08, 0.18) * s
        d.ellipse([cx - w, hz - h, cx + w, hz + h], fill=_j(ctx, (70, 120, 70)))
    d.rectangle([0, hz, s, s], fill=_j(ctx, (90, 160, 80)))
    cx, cy = s * ctx.uniform(0.4, 0.6), s * ctx.uniform(0.62, 0.72)
    d.ellipse([cx - 0.42 * s, cy - 0.14 * s, cx + 0.42 * s, cy + 0.14 * s], fill=_j(ctx, (60, 120, 170)))
    for _ in range(4):
        x = ctx.uniform(0, s)
        draw_icon(d, "pine", (x, hz - 0.12 * s, x + 0.06 * s, hz + 0.02 * s), _j(ctx, (40, 100, 50)))
    return im


def forest(ctx: Ctx, s: int) -> Image.Image:
    im = gradient((s, s), _j(ctx, (120, 170, 120)), _j(ctx, (50, 90, 50)))
    d = ImageDraw.Draw(im)
    d.rectangle([0, 0.8 * s, s, s], fill=_j(ctx, (60, 80, 40)))
    for _ in range(ctx.randint(14, 22)):
        x, h = ctx.uniform(-0.05, 1.0) * s, ctx.uniform(0.4, 0.9) * s
        w = h * 0.35
        base = ctx.uniform(0.8, 1.0) * s
        name = "pine" if ctx.rng.random() < 0.6 else "tree"
        draw_icon(d, name, (x, base - h, x + w, base), _j(ctx, (40, 110, 50), 30))
    return im


def skyline(ctx: Ctx, s: int) -> Image.Image:
    im = gradient((s, s), _j(ctx, (120, 160, 210)), _j(ctx, (230, 200, 170)))
    d = ImageDraw.Draw(im)
    ground = s * ctx.uniform(0.8, 0.9)
    x = -ctx.uniform(0, 0.05) * s
    while x < s:
        w, h = ctx.uniform(0.07, 0.15) * s, ctx.uniform(0.25, 0.7) * s
        col = _j(ctx, (90, 95, 110), 30)
        d.rectangle([x, ground - h, x + w, ground], fill=col)
        win = max(2.0, w / 6)
        for wy in range(int(ground - h + win), int(ground - win), int(win * 2)):
            for wx in range(int(x + win * 0.6), int(x + w - win), int(win * 1.6)):
                d.rectangle([wx, wy, wx + win * 0.7, wy + win * 0.8], fill=(230, 220, 140))
        x += w + ctx.uniform(0, 0.02) * s
    d.rectangle([0, ground, s, s], fill=_j(ctx, (70, 70, 70)))
    return im


def desert(ctx: Ctx, s: int) -> Image.Image:
    im = gradient((s, s), _j(ctx, (150, 190, 230)), _j(ctx, (240, 225, 200)))
    d = ImageDraw.Draw(im)
    hz = _horizon(ctx, s, 0.45, 0.6)
    for layer in range(3):  # dunes: sine-shaped ridges, lighter in front
        base = hz + layer * 0.12 * s
        amp, ph, fr = ctx.uniform(0.03, 0.07) * s, ctx.uniform(0, 6.3), ctx.uniform(1, 2.5)
        pts = [(x, base - amp * math.sin(ph + fr * 2 * math.pi * x / s)) for x in range(0, s + 8, 8)]
        d.polygon([(0, s), *pts, (s, s)], fill=_j(ctx, (200 + 15 * layer, 160 + 15 * layer, 100 + 10 * layer), 10))
    if ctx.rng.random() < 0.6:
        x = ctx.uniform(0.1, 0.8) * s
        cw, ch = 0.03 * s, 0.16 * s
        col = _j(ctx, (60, 120, 60))
        d.rectangle([x, hz + 0.1 * s - ch, x + cw, hz + 0.1 * s], fill=col)
        d.rectangle([x - cw, hz + 0.1 * s - ch * 0.7, x, hz + 0.1 * s - ch * 0.55], fill=col)
    return im


def snowy_mountain(ctx: Ctx, s: int) -> Image.Image:
    im = _sky(ctx, s)
    d = ImageDraw.Draw(im)
    base = s * ctx.uniform(0.65, 0.8)
    for _ in range(ctx.randint(2, 4)):
        cx, w, h = ctx.uniform(0.1, 0.9) * s, ctx.uniform(0.25, 0.45) * s, ctx.uniform(0.35, 0.6) * s
        peak = (cx, base - h)
        d.polygon([(cx - w, base), peak, (cx + w, base)], fill=_j(ctx, (110, 110, 125)))
        t = ctx.uniform(0.25, 0.4)  # snow cap: the top fraction t of the triangle
        d.polygon([(cx - w * t, base - h * (1 - t)), peak, (cx + w * t, base - h * (1 - t))], fill=(245, 248, 252))
    d.rectangle([0, base, s, s], fill=_j(ctx, (235, 240, 245), 8))
    return im


def night_sky(ctx: Ctx, s: int) -> Image.Image:
    im = gradient((s, s), _j(ctx, (10, 15, 45), 8), _j(ctx, (30, 35, 80), 10))
    d = ImageDraw.Draw(im)
    for _ in range(ctx.randint(40, 90)):
        x, y, r = ctx.uniform(0, s), ctx.uniform(0, 0.8 * s), ctx.uniform(0.5, 1.8) * s / 384
        d.ellipse([x - r, y - r, x + r, y + r], fill=(250, 250, 230))
    if ctx.rng.random() < 0.7:
        x, y, r = ctx.uniform(0.1, 0.8) * s, ctx.uniform(0.05, 0.4) * s, ctx.uniform(0.05, 0.09) * s
        draw_icon(d, "moon", (x, y, x + 1.6 * r, y + 2 * r), (240, 235, 200))
    d.rectangle([0, 0.85 * s, s, s], fill=(15, 15, 20))
    return im


def field(ctx: Ctx, s: int) -> Image.Image:
    im = _sky(ctx, s)
    d = ImageDraw.Draw(im)
    hz = _horizon(ctx, s, 0.3, 0.5)
    crop = _j(ctx, (190, 170, 70) if ctx.rng.random() < 0.5 else (110, 170, 60))
    d.rectangle([0, hz, s, s], fill=crop)
    vx = ctx.uniform(0.3, 0.7) * s
    for i in range(-12, 13):  # crop rows converge to a vanishing point on the horizon
        d.line([(vx, hz), (vx + i * 0.12 * s, s)], fill=shade(crop, 0.75), width=max(1, s // 160))
    return im


def road(ctx: Ctx, s: int) -> Image.Image:
    im = _sky(ctx, s)
    d = ImageDraw.Draw(im)
    hz = _horizon(ctx, s, 0.35, 0.5)
    d.rectangle([0, hz, s, s], fill=_j(ctx, (100, 150, 80)))
    vx = ctx.uniform(0.35, 0.65) * s
    hw = ctx.uniform(0.35, 0.6) * s
    d.polygon([(vx - 2, hz), (vx + 2, hz), (s / 2 + hw, s), (s / 2 - hw, s)], fill=_j(ctx, (80, 80, 85), 10))
    for k in range(8):  # lane dashes shrink with distance
        t0, t1 = (k + 0.2) / 8, (k + 0.6) / 8
        y0, y1 = hz + (s - hz) * t0**2, hz + (s - hz) * t1**2
        x0, x1 = vx + (s / 2 - vx) * t0**2, vx + (s / 2 - vx) * t1**2
        d.line([(x0, y0), (x1, y1)], fill=(240, 230, 120), width=max(1, round(s / 90 * t1)))
    return im


def room(ctx: Ctx, s: int) -> Image.Image:
    wall = _j(ctx, (215, 200, 170), 25)
    im = Image.new("RGB", (s, s), shade(wall, 0.85))
    d = ImageDraw.Draw(im)
    bx0, by0 = ctx.uniform(0.2, 0.3) * s, ctx.uniform(0.15, 0.25) * s
    bx1, by1 = ctx.uniform(0.7, 0.8) * s, ctx.uniform(0.6, 0.7) * s
    d.rectangle([bx0, by0, bx1, by1], fill=wall)  # back wall
    d.polygon([(0, 0), (bx0, by0), (bx1, by0), (s, 0)], fill=shade(wall, 1.2))  # ceiling
    d.polygon([(0, s), (bx0, by1), (bx1, by1), (s, s)], fill=_j(ctx, (150, 100, 60)))  # floor
    for line in ((0, 0, bx0, by0), (s, 0, bx1, by0), (0, s, bx0, by1), (s, s, bx1, by1)):
        d.line(line, fill=shade(wall, 0.6), width=max(1, s // 200))
    wx = ctx.uniform(bx0 + 0.05 * s, bx1 - 0.2 * s)
    d.rectangle(
        [wx, by0 + 0.06 * s, wx + 0.15 * s, by0 + 0.22 * s],
        fill=(170, 210, 240),
        outline=(240, 240, 240),
        width=max(1, s // 120),
    )
    tx = ctx.uniform(bx0, bx1 - 0.2 * s)
    draw_icon(d, "table", (tx, by1 - 0.12 * s, tx + 0.2 * s, by1 + 0.01 * s), _j(ctx, BROWN, 25))
    return im


LAYOUTS = {
    "coast": coast, "forest": forest, "skyline": skyline, "desert": desert, "snowy mountain": snowy_mountain,
    "night sky": night_sky, "lake": lake, "field": field, "road": road, "room": room,
}  # fmt: skip
CLASSES: tuple[str, ...] = tuple(LAYOUTS)


def render_scene(ctx: Ctx) -> Rendered:
    (k,) = ctx.balanced(len(CLASSES))
    name = CLASSES[k]
    image = add_noise(ctx, LAYOUTS[name](ctx, ctx.size))
    options = list(CLASSES)
    return Rendered(
        image=image, question=ask("scene", options), answer=name, truth=option_truth(options, k),
        options=options, meta={"class": name},
    )  # fmt: skip
