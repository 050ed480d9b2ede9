"""Shared drawing primitives: colours, noise, boxes, placement, and a vocabulary of object icons.

Icons are described as lists of primitives in unit coordinates (x right, y down, 0..1 within the icon's box)
so one small table draws every object class, at any size, with Pillow's rasterizer.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from ava.synth.core import BLUE, PAD, RED, Ctx

Box = tuple[float, float, float, float]
Color = tuple[int, int, int]

BROWN: Color = (110, 70, 40)
GREEN: Color = (60, 140, 60)
INK: Color = (30, 30, 30)
YELLOW: Color = (240, 200, 60)
ORANGE: Color = (240, 140, 40)
SKIN: Color = (224, 182, 150)


# -- colours ----------------------------------------------------------------------------------------
def _far_from_box_colours(c: Color) -> bool:
    return all(sum((a - b) ** 2 for a, b in zip(c, ref, strict=True)) > 90**2 for ref in (RED, BLUE))


def random_color(ctx: Ctx, lo: int = 30, hi: int = 230) -> Color:
    """A saturated-enough colour never close to the pure red / blue of the annotation boxes."""
    while True:
        c = tuple(int(v) for v in ctx.rng.integers(lo, hi + 1, size=3))
        if max(c) - min(c) > 40 and _far_from_box_colours(c):  # type: ignore[arg-type]
            return c  # type: ignore[return-value]


def shade(c: Color, f: float) -> Color:
    """Darker (f < 1) or lighter (f > 1, blended towards white) version of ``c``."""
    if f <= 1:
        return tuple(int(v * f) for v in c)  # type: ignore[return-value]
    t = min(f - 1, 1.0)
    return tuple(int(v + (255 - v) * t) for v in c)  # type: ignore[return-value]


def luminance(c: Color) -> float:
    return 0.299 * c[0] + 0.587 * c[1] + 0.114 * c[2]


def contrasting_color(ctx: Ctx, bg: Color, min_diff: float = 90) -> Color:
    """A random colour whose luminance differs from ``bg`` by at least ``min_diff``."""
    for _ in range(100):
        c = random_color(ctx, 0, 255)
        if abs(luminance(c) - luminance(bg)) >= min_diff:
            return c
    return (20, 20, 20) if luminance(bg) > 128 else (235, 235, 235)


# -- whole-image operations ---------------------------------------------------------------------------
NOISE_CELL = 2  # px: noise grain size


def add_noise(ctx: Ctx, image: Image.Image, sigma: float | None = None) -> Image.Image:
    """Additive Gaussian luminance grain of the difficulty's strength (no-op on easy).

    The noise is one value per 2x2 pixel cell, the same on R, G and B: it degrades edges and flat regions like
    sensor grain without shifting hues, and keeps PNGs near 80 KB at 384 px where independent per-channel,
    per-pixel noise would make them incompressible (~370 KB, and 2x slower to encode).
    """
    sigma = ctx.knobs.noise if sigma is None else sigma
    if sigma <= 0:
        return image
    arr = np.asarray(image, dtype=np.float32)
    h, w = arr.shape[:2]
    c = NOISE_CELL
    grain = ctx.rng.standard_normal(((h + c - 1) // c, (w + c - 1) // c), dtype=np.float32) * np.float32(sigma)
    grain = np.repeat(np.repeat(grain, c, axis=0), c, axis=1)[:h, :w, None]
    return Image.fromarray(np.clip(arr + grain, 0, 255).astype(np.uint8))


def gradient(size: tuple[int, int], top: Color, bottom: Color) -> Image.Image:
    """A vertical colour gradient of ``size`` (width, height)."""
    w, h = size
    t = np.linspace(0.0, 1.0, max(h, 1), dtype=np.float32)[:, None, None]
    column = np.asarray(top, np.float32) * (1 - t) + np.asarray(bottom, np.float32) * t
    # one column, stretched sideways by Pillow: much cheaper than building the full array in numpy
    return Image.fromarray(np.round(column).astype(np.uint8)).resize((w, h), Image.NEAREST)


def pad_to_square(image: Image.Image, size: int) -> tuple[Image.Image, tuple[int, int]]:
    """Pad to a ``size`` square with the paper's fill colour, centred; returns the image and the offset."""
    out = Image.new("RGB", (size, size), PAD)
    off = ((size - image.width) // 2, (size - image.height) // 2)
    out.paste(image, off)
    return out, off


# -- boxes and placement -------------------------------------------------------------------------------
def box_width(size: int) -> int:
    """Outline width of annotation boxes: about 1/128 of the image, at least 2 px."""
    return max(2, round(size / 128))


def draw_box(image: Image.Image, box: Box, color: Color) -> Box:
    """Outline ``box`` (grown by a small margin so it does not hide the object); returns the drawn box."""
    w = box_width(image.width)
    m = w + 1
    x0, y0, x1, y1 = box
    drawn = (max(0, x0 - m), max(0, y0 - m), min(image.width - 1, x1 + m), min(image.height - 1, y1 + m))
    ImageDraw.Draw(image).rectangle([round(v) for v in drawn], outline=color, width=w)
    return drawn


def overlaps(a: Box, b: Box, gap: float = 0.0) -> bool:
    return not (a[2] + gap <= b[0] or b[2] + gap <= a[0] or a[3] + gap <= b[1] or b[3] + gap <= a[1])


def place(ctx: Ctx, w: float, h: float, area: Box, avoid: list[Box], gap: float = 4.0, tries: int = 40) -> Box | None:
    """A random ``w`` x ``h`` box inside ``area`` not overlapping any of ``avoid`` (None if none was found)."""
    ax0, ay0, ax1, ay1 = area
    if ax1 - ax0 < w or ay1 - ay0 < h:
        return None
    for _ in range(tries):
        x = ctx.uniform(ax0, ax1 - w)
        y = ctx.uniform(ay0, ay1 - h)
        box = (x, y, x + w, y + h)
        if not any(overlaps(box, o, gap) for o in avoid):
            return box
    return None


# -- icons -----------------------------------------------------------------------------------------------
def _poly_star(points: int, inner: float) -> list[tuple[float, float]]:
    pts = []
    for i in range(points * 2):
        r = 0.5 if i % 2 == 0 else 0.5 * inner
        a = -math.pi / 2 + i * math.pi / points
        pts.append((0.5 + r * math.cos(a), 0.5 + r * math.sin(a)))
    return _normalize(pts)


def _poly_regular(n: int, phase: float = -math.pi / 2) -> list[tuple[float, float]]:
    return _normalize(
        [(math.cos(phase + 2 * math.pi * i / n), math.sin(phase + 2 * math.pi * i / n)) for i in range(n)]
    )


def _normalize(pts: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Stretch a polygon so it touches all four sides of the unit square (tight boxes)."""
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    return [((x - min(xs)) / (max(xs) - min(xs)), (y - min(ys)) / (max(ys) - min(ys))) for x, y in pts]


def _heart() -> list[tuple[float, float]]:
    pts = []
    for i in range(40):
        t = 2 * math.pi * i / 40
        pts.append(
            (16 * math.sin(t) ** 3, -(13 * math.cos(t) - 5 * math.cos(2 * t) - 2 * math.cos(3 * t) - math.cos(4 * t)))
        )
    return _normalize(pts)


def _crescent() -> list[tuple[float, float]]:
    outer = [
        (0.5 + 0.5 * math.cos(a), 0.5 + 0.5 * math.sin(a)) for a in np.linspace(0.35 * math.pi, 1.65 * math.pi, 30)
    ]
    inner = [
        (0.78 + 0.42 * math.cos(a), 0.5 + 0.42 * math.sin(a)) for a in np.linspace(1.78 * math.pi, 0.22 * math.pi, 30)
    ]
    return _normalize(outer + inner)


# Each icon: (aspect w/h, primitives). Primitive: (kind, geometry, colour key[, width as a fraction of w]).
# Colour keys: "main", "dark", "light" derive from the icon's colour; others are fixed named colours.
ICONS: dict[str, tuple[float, list[tuple]]] = {
    "circle": (1.0, [("ellipse", (0, 0, 1, 1), "main")]),
    "square": (1.0, [("rect", (0, 0, 1, 1), "main")]),
    "triangle": (1.1, [("poly", [(0.5, 0), (1, 1), (0, 1)], "main")]),
    "diamond": (0.75, [("poly", [(0.5, 0), (1, 0.5), (0.5, 1), (0, 0.5)], "main")]),
    "hexagon": (1.0, [("poly", _poly_regular(6), "main")]),
    "cross": (1.0, [("poly", [(0.35, 0), (0.65, 0), (0.65, 0.35), (1, 0.35), (1, 0.65), (0.65, 0.65), (0.65, 1),
                              (0.35, 1), (0.35, 0.65), (0, 0.65), (0, 0.35), (0.35, 0.35)], "main")]),
    "star": (1.0, [("poly", _poly_star(5, 0.45), "main")]),
    "heart": (1.1, [("poly", _heart(), "main")]),
    "moon": (0.8, [("poly", _crescent(), "main")]),
    "house": (1.0, [("rect", (0.12, 0.45, 0.88, 1), "main"), ("poly", [(0, 0.5), (0.5, 0), (1, 0.5)], "dark"),
                    ("rect", (0.42, 0.68, 0.58, 1), "light"), ("rect", (0.2, 0.55, 0.34, 0.68), "light")]),
    "tree": (0.8, [("rect", (0.42, 0.6, 0.58, 1), "brown"), ("ellipse", (0, 0, 1, 0.7), "main")]),
    "pine": (0.7, [("rect", (0.42, 0.8, 0.58, 1), "brown"), ("poly", [(0.5, 0), (0.82, 0.35), (0.18, 0.35)], "main"),
                   ("poly", [(0.5, 0.18), (0.92, 0.6), (0.08, 0.6)], "main"),
                   ("poly", [(0.5, 0.4), (1, 0.84), (0, 0.84)], "main")]),
    "car": (2.0, [("rect", (0, 0.42, 1, 0.8), "main"),
                  ("poly", [(0.2, 0.43), (0.32, 0.05), (0.68, 0.05), (0.82, 0.43)], "main"),
                  ("poly", [(0.27, 0.4), (0.36, 0.13), (0.48, 0.13), (0.48, 0.4)], "light"),
                  ("poly", [(0.53, 0.4), (0.53, 0.13), (0.65, 0.13), (0.75, 0.4)], "light"),
                  ("ellipse", (0.12, 0.6, 0.32, 1), "ink"), ("ellipse", (0.68, 0.6, 0.88, 1), "ink")]),
    "fish": (1.6, [("poly", [(0.62, 0.5), (1, 0.1), (1, 0.9)], "dark"), ("ellipse", (0, 0.12, 0.75, 0.88), "main"),
                   ("ellipse", (0.1, 0.35, 0.2, 0.5), "ink")]),
    "sun": (1.0, [*[("line", [(0.5 + 0.33 * math.cos(a), 0.5 + 0.33 * math.sin(a)),
                             (0.5 + 0.5 * math.cos(a), 0.5 + 0.5 * math.sin(a))], "main", 0.07)
                    for a in np.linspace(0, 2 * math.pi, 8, endpoint=False)],
                  ("ellipse", (0.22, 0.22, 0.78, 0.78), "main")]),
    "umbrella": (1.0, [("pie", (0, 0, 1, 0.9), "main"),
                       ("line", [(0.5, 0.44), (0.5, 0.93), (0.44, 1), (0.36, 0.93)], "ink", 0.06)]),
    "mug": (1.1, [("ring", (0.52, 0.28, 1, 0.78), "dark", 0.1), ("rect", (0, 0.05, 0.72, 1), "main"),
                  ("rect", (0, 0.05, 0.72, 0.14), "light")]),
    "flower": (0.75, [("line", [(0.5, 0.45), (0.5, 1)], "green", 0.08),
                      *[("ellipse", (0.5 + 0.28 * math.cos(a) - 0.2, 0.3 + 0.21 * math.sin(a) - 0.15,
                                     0.5 + 0.28 * math.cos(a) + 0.2, 0.3 + 0.21 * math.sin(a) + 0.15), "main")
                        for a in np.linspace(0, 2 * math.pi, 6, endpoint=False)],
                      ("ellipse", (0.36, 0.2, 0.64, 0.4), "yellow")]),
    "mushroom": (1.0, [("rect", (0.36, 0.4, 0.64, 1), "light"), ("pie", (0, 0, 1, 0.9), "main"),
                       ("ellipse", (0.25, 0.15, 0.37, 0.27), "light"), ("ellipse", (0.6, 0.22, 0.72, 0.34), "light")]),
    "apple": (0.95, [("line", [(0.5, 0.22), (0.56, 0)], "brown", 0.07), ("ellipse", (0.56, 0.0, 0.84, 0.13), "green"),
                     ("ellipse", (0, 0.15, 0.56, 1), "main"), ("ellipse", (0.44, 0.15, 1, 1), "main")]),
    "arrow": (1.5, [("poly", [(0, 0.35), (0.6, 0.35), (0.6, 0.05), (1, 0.5), (0.6, 0.95), (0.6, 0.65), (0, 0.65)],
                     "main")]),
    "lightning": (0.6, [("poly", [(0.55, 0), (0.05, 0.56), (0.42, 0.56), (0.25, 1), (0.95, 0.4), (0.56, 0.4), (0.8, 0)],
                         "main")]),
    "cloud": (1.6, [("ellipse", (0, 0.4, 0.42, 1), "main"), ("ellipse", (0.18, 0.05, 0.66, 0.8), "main"),
                    ("ellipse", (0.5, 0.25, 1, 1), "main"), ("rect", (0.2, 0.65, 0.8, 1), "main")]),
    "balloon": (0.6, [("line", [(0.5, 0.7), (0.4, 0.85), (0.55, 1)], "ink", 0.05), ("ellipse", (0, 0, 1, 0.72), "main"),
                      ("poly", [(0.5, 0.68), (0.42, 0.76), (0.58, 0.76)], "dark")]),
    "kite": (0.75, [("line", [(0.5, 0.72), (0.35, 0.8), (0.6, 0.9), (0.45, 1)], "ink", 0.05),
                    ("poly", [(0.5, 0), (1, 0.3), (0.5, 0.75), (0, 0.3)], "main"),
                    ("line", [(0.5, 0), (0.5, 0.75)], "dark", 0.04), ("line", [(0, 0.3), (1, 0.3)], "dark", 0.04)]),
    "rocket": (0.55, [("poly", [(0.36, 0.8), (0.5, 1), (0.64, 0.8)], "orange"),
                      ("poly", [(0.28, 0.5), (0, 0.88), (0.28, 0.8)], "dark"),
                      ("poly", [(0.72, 0.5), (1, 0.88), (0.72, 0.8)], "dark"),
                      ("poly", [(0.5, 0), (0.72, 0.25), (0.72, 0.82), (0.28, 0.82), (0.28, 0.25)], "main"),
                      ("ellipse", (0.38, 0.3, 0.62, 0.45), "light")]),
    "sailboat": (1.0, [("line", [(0.5, 0), (0.5, 0.76)], "ink", 0.04),
                       ("poly", [(0.54, 0.04), (0.54, 0.7), (0.95, 0.7)], "main"),
                       ("poly", [(0.46, 0.14), (0.46, 0.7), (0.1, 0.7)], "light"),
                       ("poly", [(0, 0.75), (1, 0.75), (0.82, 1), (0.18, 1)], "dark")]),
    "bottle": (0.42, [("rect", (0.1, 0.35, 0.9, 1), "main"),
                      ("poly", [(0.35, 0), (0.65, 0), (0.65, 0.2), (0.9, 0.38), (0.1, 0.38), (0.35, 0.2)], "main"),
                      ("rect", (0.1, 0.55, 0.9, 0.8), "light")]),
    "chair": (0.6, [("rect", (0, 0, 0.16, 1), "dark"), ("rect", (0, 0.5, 1, 0.62), "main"),
                    ("rect", (0.84, 0.5, 1, 1), "dark")]),
    "table": (1.6, [("rect", (0, 0, 1, 0.13), "main"), ("rect", (0.05, 0.1, 0.13, 1), "dark"),
                    ("rect", (0.87, 0.1, 0.95, 1), "dark")]),
    "lamp": (0.35, [("rect", (0.45, 0.22, 0.55, 0.95), "ink"), ("rect", (0.12, 0.92, 0.88, 1), "ink"),
                    ("poly", [(0.22, 0), (0.78, 0), (1, 0.28), (0, 0.28)], "main")]),
    "cabinet": (0.45, [("rect", (0, 0, 1, 1), "dark"), ("rect", (0.07, 0.04, 0.47, 0.96), "main"),
                       ("rect", (0.53, 0.04, 0.93, 0.96), "main"), ("rect", (0.36, 0.45, 0.43, 0.55), "ink"),
                       ("rect", (0.57, 0.45, 0.64, 0.55), "ink")]),
    "person": (0.32, [("rect", (0.12, 0.52, 0.46, 1), "dark"), ("rect", (0.54, 0.52, 0.88, 1), "dark"),
                      ("rect", (0, 0.15, 1, 0.56), "main"), ("ellipse", (0.22, 0, 0.78, 0.15), "skin")]),
    "key": (1.8, [("ring", (0, 0.1, 0.42, 0.9), "main", 0.09), ("rect", (0.38, 0.42, 1, 0.58), "main"),
                  ("rect", (0.78, 0.58, 0.86, 0.82), "main"), ("rect", (0.9, 0.58, 0.98, 0.76), "main")]),
}  # fmt: skip
ICON_NAMES: tuple[str, ...] = tuple(ICONS)
BASIC_SHAPES = ("circle", "square", "triangle", "diamond", "hexagon", "cross", "star", "heart", "moon")
OBJECTS = tuple(n for n in ICON_NAMES if n not in ("circle", "square", "triangle", "diamond", "hexagon", "cross"))
PLURALS = {n: n + "es" if n.endswith(("sh", "ss", "x")) else n + "s" for n in ICON_NAMES}


def icon_size(name: str, height: float) -> tuple[float, float]:
    """(width, height) of icon ``name`` drawn ``height`` px tall."""
    return ICONS[name][0] * height, height


def draw_icon(draw: ImageDraw.ImageDraw, name: str, box: Box, color: Color, mask: bool = False) -> None:
    """Draw icon ``name`` filling ``box``; with ``mask`` every part is drawn in white (for a tight bbox)."""
    x0, y0, x1, y1 = box
    w, h = x1 - x0, y1 - y0
    named = {
        "main": color,
        "dark": shade(color, 0.6),
        "light": shade(color, 1.55),
        "brown": BROWN,
        "green": GREEN,
        "ink": INK,
        "yellow": YELLOW,
        "orange": ORANGE,
        "skin": SKIN,
    }

    def pt(p: tuple[float, float]) -> tuple[float, float]:
        return (x0 + p[0] * w, y0 + p[1] * h)

    for prim in ICONS[name][1]:
        kind, geom, key = prim[0], prim[1], prim[2]
        fill = 255 if mask else named[key]
        if kind == "poly":
            draw.polygon([pt(p) for p in geom], fill=fill)
        elif kind in ("rect", "ellipse", "pie", "ring"):
            a, b = pt(geom[:2]), pt(geom[2:])
            if kind == "rect":
                draw.rectangle([a, b], fill=fill)
            elif kind == "ellipse":
                draw.ellipse([a, b], fill=fill)
            elif kind == "pie":
                draw.pieslice([a, (b[0], b[1] + (b[1] - a[1]))], 180, 360, fill=fill)
            else:
                draw.ellipse([a, b], outline=fill, width=max(1, round(prim[3] * w)))
        elif kind == "line":
            draw.line([pt(p) for p in geom], fill=fill, width=max(1, round(prim[3] * w)), joint="curve")


def tight_box(size: tuple[int, int], name: str, box: Box) -> Box:
    """The exact pixel bbox (x0, y0, x1, y1 exclusive) of icon ``name`` drawn in ``box``."""
    mask = Image.new("L", size, 0)
    draw_icon(ImageDraw.Draw(mask), name, box, (255, 255, 255), mask=True)
    bb = mask.getbbox()
    return tuple(float(v) for v in bb) if bb else box  # type: ignore[return-value]


# -- text ---------------------------------------------------------------------------------------------------
@lru_cache(maxsize=256)
def font(size: int) -> ImageFont.FreeTypeFont:
    """Pillow's bundled scalable font (Pillow >= 10.1) at ``size`` px."""
    return ImageFont.load_default(size=max(6, int(size)))  # type: ignore[return-value]
