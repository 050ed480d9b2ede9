"""Scene: 30 classes (9 outdoor layouts x 3 weathers, 3 kinds of room) drawn from primitives (sky, water, ...).

Each layout has a fixed composition rule and random geometry and colours within it, so the class is the
arrangement, not one colour: e.g. a coast has water meeting sand at an open horizon, a lake has water ringed
by green banks and hills, a field has crop rows converging to the horizon, a road has a grey road with lane
dashes. Each outdoor layout is seen in clear weather, in fog (a haze that thickens towards the horizon and lowers the
contrast) or in rain (thin slanted streaks over the whole picture, of random density and strength). The layout
is in the overall colours, which raw pixels keep; fog partly (it greys the picture); rain is a fine texture that
a mean over pixel patches cannot see, so a trained feature extractor should lead. The rooms differ by their
furniture only (a table, a bed, shelves of books): shapes, not colours. Every question lists the 30
classes in a random order, as the paper's scene questions list 30 sampled classes.
"""

from __future__ import annotations

import math

import numpy as np
from PIL import Image, ImageDraw

from ava.synth.abilities import ask, option_truth
from ava.synth.core import Ctx, Rendered
from ava.synth.shapes import BROWN, add_noise, draw_icon, gradient, random_color, shade

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


def _room_shell(ctx: Ctx, s: int) -> tuple[Image.Image, tuple[float, float, float, float]]:
    """Walls, ceiling and floor in one-point perspective, with a window; returns the back wall's box."""
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
    return im, (bx0, by0, bx1, by1)


def room(ctx: Ctx, s: int) -> Image.Image:
    im, (bx0, _, bx1, by1) = _room_shell(ctx, s)
    tx = ctx.uniform(bx0, bx1 - 0.2 * s)
    draw_icon(ImageDraw.Draw(im), "table", (tx, by1 - 0.12 * s, tx + 0.2 * s, by1 + 0.01 * s), _j(ctx, BROWN, 25))
    return im


def bedroom(ctx: Ctx, s: int) -> Image.Image:
    """A room with a bed: a long low frame, a blanket and a pillow at the head end."""
    im, (bx0, _, bx1, by1) = _room_shell(ctx, s)
    d = ImageDraw.Draw(im)
    w, h = ctx.uniform(0.32, 0.42) * s, ctx.uniform(0.08, 0.12) * s
    x = ctx.uniform(bx0 - 0.05 * s, bx1 - w + 0.05 * s)
    y = by1 + ctx.uniform(0.02, 0.1) * s
    d.rectangle([x, y - h, x + w, y], fill=_j(ctx, BROWN, 25))  # frame
    d.rectangle([x + 0.02 * w, y - 1.5 * h, x + w, y - 0.6 * h], fill=random_color(ctx))  # blanket
    left = ctx.rng.random() < 0.5
    px = x + 0.03 * w if left else x + 0.75 * w
    d.ellipse([px, y - 1.9 * h, px + 0.22 * w, y - 1.3 * h], fill=(240, 240, 235))
    d.rectangle(
        [x, y - 2.4 * h, x + 0.04 * w, y] if left else [x + 0.96 * w, y - 2.4 * h, x + w, y],
        fill=shade(_j(ctx, BROWN, 25), 0.8),
    )
    return im


def library(ctx: Ctx, s: int) -> Image.Image:
    """A room whose back wall is shelves of books: rows of narrow upright spines in many colours."""
    im, (bx0, by0, bx1, by1) = _room_shell(ctx, s)
    d = ImageDraw.Draw(im)
    x0, x1 = bx0 + ctx.uniform(0.0, 0.08) * s, bx1 - ctx.uniform(0.0, 0.08) * s
    rows = ctx.randint(3, 4)
    shelf_h = (by1 - by0) * 0.85 / rows
    for r in range(rows):
        top = by0 + 0.1 * (by1 - by0) + r * shelf_h
        d.rectangle([x0, top + shelf_h - 0.08 * shelf_h, x1, top + shelf_h], fill=shade(BROWN, 0.8))
        x = x0
        while x < x1 - 2:
            w = ctx.uniform(0.012, 0.025) * s
            d.rectangle(
                [x, top + ctx.uniform(0.1, 0.3) * shelf_h, min(x + w, x1), top + 0.92 * shelf_h], fill=random_color(ctx)
            )
            x += w + 1
    return im


OUTDOOR = {
    "coast": coast,
    "forest": forest,
    "skyline": skyline,
    "desert": desert,
    "snowy mountain": snowy_mountain,
    "night sky": night_sky,
    "lake": lake,
    "field": field,
    "road": road,
}
INDOOR = {"living room": room, "bedroom": bedroom, "library": library}
WEATHERS = ("clear", "foggy", "rainy")
# (class name, layout, weather): 9 outdoor layouts in 3 weathers, and 3 kinds of room (no weather indoors)
VARIANTS: tuple[tuple[str, str, str], ...] = (
    *((name if w == "clear" else f"{w} {name}", name, w) for w in WEATHERS for name in OUTDOOR),
    *((name, name, "clear") for name in INDOOR),
)
CLASSES: tuple[str, ...] = tuple(v[0] for v in VARIANTS)


def fog(ctx: Ctx, image: Image.Image, horizon: float) -> Image.Image:
    """A haze of a random pale grey, densest at ``horizon`` (fraction of the height) and thinning away from it."""
    s = image.width
    strength = ctx.uniform(0.45, 0.7)
    rows = np.abs(np.arange(s, dtype=np.float32) / s - horizon)
    alpha = strength * np.clip(1.0 - rows / ctx.uniform(0.6, 0.9), 0.25, 1.0)
    haze = np.asarray(_j(ctx, (200, 203, 208), 12), np.float32)
    arr = np.asarray(image, np.float32)
    out = arr * (1 - alpha[:, None, None]) + haze * alpha[:, None, None]
    return Image.fromarray(np.round(out).astype(np.uint8))


def rain(ctx: Ctx, image: Image.Image) -> Image.Image:
    """Thin slanted streaks, light or heavy, a little lighter than what they fall over."""
    s = image.width
    layer = Image.new("L", (s, s), 0)
    d = ImageDraw.Draw(layer)
    slant = ctx.uniform(-0.35, 0.35)
    n = int(ctx.uniform(0.6, 1.6) * s)  # streak count grows with the area's side: the same look at any size
    length, width = ctx.uniform(0.04, 0.09) * s, max(1, round(s / 256))
    xs, ys = ctx.rng.uniform(-0.2 * s, 1.2 * s, n), ctx.rng.uniform(-0.1 * s, s, n)
    for x, y in zip(xs, ys, strict=True):
        d.line([(x, y), (x + slant * length, y + length)], fill=255, width=width)
    alpha = np.asarray(layer, np.float32)[..., None] / 255 * ctx.uniform(0.35, 0.6)
    arr = np.asarray(image, np.float32)
    out = arr * (1 - alpha) + 225.0 * alpha
    dim = ctx.uniform(0.8, 0.92)  # overcast: the picture darkens a little under rain
    return Image.fromarray(np.round(out * dim).astype(np.uint8))


def render_scene(ctx: Ctx) -> Rendered:
    (k,) = ctx.balanced(len(CLASSES))
    name, layout, weather = VARIANTS[k]
    image = {**OUTDOOR, **INDOOR}[layout](ctx, ctx.size)
    if weather == "foggy":
        image = fog(ctx, image, horizon=0.4)
    elif weather == "rainy":
        image = rain(ctx, image)
    image = add_noise(ctx, image)
    options = [CLASSES[int(i)] for i in ctx.rng.permutation(len(CLASSES))]
    return Rendered(
        image=image,
        question=ask("scene", options),
        answer=name,
        truth=option_truth(options, options.index(name)),
        options=options,
        meta={"class": name, "layout": layout, "weather": weather},
    )
