"""Procedural textures named after Describable Textures Dataset (DTD) classes, vectorized with numpy.

Each texture is a function ``(ctx, size, period) -> mask`` returning a float32 ``[size, size]`` array in 0..1
(1 = foreground colour). Period and angle are random per sample so a class is a pattern, not a picture.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from PIL import Image, ImageDraw

from ava.synth.core import Ctx

Mask = np.ndarray


def _coords(ctx: Ctx, size: int, angle: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Pixel coordinates rotated by ``angle`` (random when None) and shifted by a random phase."""
    a = ctx.uniform(0, math.pi) if angle is None else angle
    xs = np.arange(size, dtype=np.float32)[None, :] + np.float32(ctx.uniform(0, 1000))
    ys = np.arange(size, dtype=np.float32)[:, None] + np.float32(ctx.uniform(0, 1000))
    c, s = np.float32(math.cos(a)), np.float32(math.sin(a))
    return xs * c - ys * s, xs * s + ys * c


def value_noise(ctx: Ctx, size: int, cells: int) -> np.ndarray:
    """Smooth noise in 0..1 with about ``cells`` features across the image (bicubic upsampled random grid)."""
    small = ctx.rng.random((cells + 1, cells + 1), dtype=np.float32)
    img = Image.fromarray(small, mode="F").resize((size, size), Image.BICUBIC)
    return np.clip(np.asarray(img), 0, 1)


def striped(ctx: Ctx, size: int, p: float) -> Mask:
    x, _ = _coords(ctx, size)
    return ((x / p) % 1.0 < 0.5).astype(np.float32)


def chequered(ctx: Ctx, size: int, p: float) -> Mask:
    x, y = _coords(ctx, size, ctx.uniform(-0.3, 0.3))
    return ((np.floor(x / p) + np.floor(y / p)) % 2).astype(np.float32)


def polka_dotted(ctx: Ctx, size: int, p: float) -> Mask:
    x, y = _coords(ctx, size)
    fx, fy = (x / p) % 1.0 - 0.5, (y / p) % 1.0 - 0.5
    return (fx * fx + fy * fy < 0.28**2).astype(np.float32)


def flecked(ctx: Ctx, size: int, p: float) -> Mask:
    k = max(1, round(p / 8))
    n = size // k + 1
    specks = (ctx.rng.random((n, n), dtype=np.float32) > 0.93).astype(np.float32)
    return np.kron(specks, np.ones((k, k), np.float32))[:size, :size]


def grid(ctx: Ctx, size: int, p: float) -> Mask:
    x, y = _coords(ctx, size, ctx.uniform(-0.15, 0.15))
    t = 0.12
    return (((x / p) % 1.0 < t) | ((y / p) % 1.0 < t)).astype(np.float32)


def crosshatched(ctx: Ctx, size: int, p: float) -> Mask:
    """Two families of thin dense lines crossing at about 60 degrees (diamond cells, unlike the square grid)."""
    a = ctx.uniform(0, math.pi)
    x1, _ = _coords(ctx, size, a + 0.52)
    x2, _ = _coords(ctx, size, a - 0.52)
    q = p * 0.45
    return (((x1 / q) % 1.0 < 0.25) | ((x2 / q) % 1.0 < 0.25)).astype(np.float32)


def zigzagged(ctx: Ctx, size: int, p: float) -> Mask:
    x, y = _coords(ctx, size, ctx.uniform(-0.3, 0.3))
    tri = np.abs((x / p) % 1.0 - 0.5) * 2
    return (((y + tri * p * 0.8) / p) % 1.0 < 0.5).astype(np.float32)


def honeycombed(ctx: Ctx, size: int, p: float) -> Mask:
    """Outlines of a regular hexagonal lattice."""
    img = Image.new("L", (size, size), 0)
    draw = ImageDraw.Draw(img)
    width = max(1, round(size / 120))
    r = p * 0.55
    dx, dy = r * math.sqrt(3), r * 1.5
    ox, oy = ctx.uniform(0, dx), ctx.uniform(0, dy)
    hexagon = [
        (r * math.cos(math.pi / 6 + k * math.pi / 3), r * math.sin(math.pi / 6 + k * math.pi / 3)) for k in range(6)
    ]
    for j in range(-1, int(size / dy) + 2):
        for i in range(-1, int(size / dx) + 2):
            cx, cy = ox + i * dx + (j % 2) * dx / 2, oy + j * dy
            draw.polygon([(cx + hx, cy + hy) for hx, hy in hexagon], outline=255, width=width)
    return np.asarray(img, dtype=np.float32) / 255.0


def marbled(ctx: Ctx, size: int, p: float) -> Mask:
    x, _ = _coords(ctx, size)
    turb = value_noise(ctx, size, 4) + 0.5 * value_noise(ctx, size, 9)
    v = np.sin(2 * math.pi * (x / (p * 2) + 2.0 * turb))
    return (np.abs(v) < 0.25).astype(np.float32) * 0.85 + 0.15 * turb / 1.5


def cracked(ctx: Ctx, size: int, p: float) -> Mask:
    """Branching random-walk cracks, as in dried mud or paint (drawn with Pillow, cheap at any size)."""
    img = Image.new("L", (size, size), 0)
    draw = ImageDraw.Draw(img)
    width = max(1, round(size / 150))
    for _ in range(int(1.5 * size / p) + 3):
        x, y = ctx.uniform(0, size), ctx.uniform(0, size)
        a = ctx.uniform(0, 2 * math.pi)
        pts = [(x, y)]
        for _ in range(ctx.randint(8, 25)):
            a += ctx.uniform(-0.6, 0.6)
            x, y = x + math.cos(a) * p * 0.4, y + math.sin(a) * p * 0.4
            pts.append((x, y))
            if ctx.rng.random() < 0.15:  # a short side branch
                b = a + ctx.choice((-1, 1)) * ctx.uniform(0.6, 1.2)
                draw.line([(x, y), (x + math.cos(b) * p, y + math.sin(b) * p)], fill=255, width=width)
        draw.line(pts, fill=255, width=width, joint="curve")
    return np.asarray(img, dtype=np.float32) / 255.0


def spiralled(ctx: Ctx, size: int, p: float) -> Mask:
    cx, cy = ctx.uniform(0.3, 0.7) * size, ctx.uniform(0.3, 0.7) * size
    xs = np.arange(size, dtype=np.float32)[None, :] - np.float32(cx)
    ys = np.arange(size, dtype=np.float32)[:, None] - np.float32(cy)
    r = np.hypot(xs, ys)
    th = np.arctan2(ys, xs)
    arms = ctx.randint(1, 3) * (1 if ctx.rng.random() < 0.5 else -1)
    return (np.sin(arms * th + 2 * math.pi * r / p) > 0).astype(np.float32)


def blotchy(ctx: Ctx, size: int, p: float) -> Mask:
    n = value_noise(ctx, size, max(3, round(size / (p * 2.5))))
    return (n > 0.55).astype(np.float32)


def bubbly(ctx: Ctx, size: int, p: float) -> Mask:
    img = Image.new("L", (size, size), 0)
    draw = ImageDraw.Draw(img)
    width = max(1, round(size / 150))
    for _ in range(int(2.5 * (size / p) ** 2)):
        r = ctx.uniform(0.2, 0.7) * p
        cx, cy = ctx.uniform(0, size), ctx.uniform(0, size)
        draw.ellipse([cx - r, cy - r, cx + r, cy + r], outline=255, width=width)
    return np.asarray(img, dtype=np.float32) / 255.0


def woven(ctx: Ctx, size: int, p: float) -> Mask:
    """Basket weave: square cells alternately filled with horizontal and vertical strands."""
    x, y = _coords(ctx, size, ctx.uniform(-0.2, 0.2))
    cell = (np.floor(x / p) + np.floor(y / p)) % 2
    along = np.where(cell == 0, y, x)
    return ((along / (p / 3)) % 1.0 < 0.62).astype(np.float32) * (0.6 + 0.4 * cell)


def scaly(ctx: Ctx, size: int, p: float) -> Mask:
    """Overlapping fish scales: rows of outlined discs, each row half a scale lower and shifted."""
    img = Image.new("L", (size, size), 0)
    draw = ImageDraw.Draw(img)
    width = max(1, round(size / 140))
    r = p * 0.6
    rows = int(size / (p * 0.5)) + 3
    for j in range(rows):
        y = (j - 1) * p * 0.5
        off = (j % 2) * p * 0.5
        for i in range(int(size / p) + 2):
            x = (i - 0.5) * p + off
            draw.ellipse([x - r, y - r, x + r, y + r], fill=90, outline=255, width=width)
    return np.asarray(img, dtype=np.float32) / 255.0


TEXTURES: dict[str, Callable[[Ctx, int, float], Mask]] = {
    "striped": striped,
    "chequered": chequered,
    "polka-dotted": polka_dotted,
    "flecked": flecked,
    "grid": grid,
    "crosshatched": crosshatched,
    "zigzagged": zigzagged,
    "honeycombed": honeycombed,
    "marbled": marbled,
    "cracked": cracked,
    "spiralled": spiralled,
    "blotchy": blotchy,
    "bubbly": bubbly,
    "woven": woven,
    "scaly": scaly,
}


def colorize(mask: Mask, fg: tuple[int, int, int], bg: tuple[int, int, int]) -> Image.Image:
    """An RGB image blending ``bg`` (mask 0) and ``fg`` (mask 1)."""
    alpha = Image.fromarray((np.clip(mask, 0, 1) * 255).astype(np.uint8), mode="L")
    size = alpha.size
    return Image.composite(Image.new("RGB", size, fg), Image.new("RGB", size, bg), alpha)


def render_texture(
    ctx: Ctx, name: str, size: int, fg: tuple[int, int, int], bg: tuple[int, int, int], period: float | None = None
) -> Image.Image:
    """Texture ``name`` as an RGB image; period defaults to a random 1/14..1/7 of the image."""
    p = period if period is not None else size * ctx.uniform(1 / 14, 1 / 7)
    return colorize(TEXTURES[name](ctx, size, p), fg, bg)


def backdrop(
    ctx: Ctx, width: int, height: int | None = None, textured: bool = False, flat: bool = False
) -> Image.Image:
    """A distracting but low-contrast background: plain, a gradient, or a faint texture (always with ``textured``,
    never with ``flat``)."""
    from ava.synth.shapes import gradient, random_color, shade

    height = height or width
    base = shade(random_color(ctx, 60, 220), 1.5)
    kind = 2 if textured else ctx.randint(0, 1 if flat else 2)
    if kind == 0:
        return Image.new("RGB", (width, height), base)
    if kind == 1:
        return gradient((width, height), base, shade(random_color(ctx, 60, 220), 1.4))
    side = max(width, height)
    name = ctx.choice(list(TEXTURES))
    tex = render_texture(ctx, name, side, shade(base, 0.88), base)
    return tex.crop((0, 0, width, height))
