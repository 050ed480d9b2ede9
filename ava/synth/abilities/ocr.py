"""OCR: a random string in varied size, colour and slant inside a red box, with distractor strings outside it.

Strings avoid glyphs that Pillow's bundled font makes ambiguous (0/O, 1/l/I, i); scoring is case-insensitive
(ANLS), so case is free. Lengths are balanced over the paper's subgroup bins (1-5, 6-10, 11-20, >20).
"""

from __future__ import annotations

from PIL import Image, ImageDraw

from ava.synth.abilities import ask
from ava.synth.core import RED, Ctx, Rendered
from ava.synth.shapes import add_noise, contrasting_color, draw_box, font, place
from ava.synth.textures import backdrop

ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZabdefghjkmnpqrstuvwxyz23456789"
LENGTH_BINS = ((1, 5), (6, 10), (11, 20), (21, 24))


def random_string(ctx: Ctx, length: int) -> str:
    chars = [ALPHABET[int(i)] for i in ctx.rng.integers(len(ALPHABET), size=length)]
    if length >= 6:  # some word breaks, never at the ends nor doubled
        for pos in range(2, length - 2, 1):
            if ctx.rng.random() < 0.12 and chars[pos - 1] != " ":
                chars[pos] = " "
    return "".join(chars)


def text_layer(ctx: Ctx, text: str, size: float, color: tuple[int, int, int]) -> Image.Image:
    """The text on a transparent layer, sheared by a random slant and cropped to its ink."""
    f = font(round(size))
    x0, y0, x1, y1 = f.getbbox(text)
    pad = round(size)
    layer = Image.new("RGBA", (x1 - x0 + 2 * pad, y1 - y0 + 2 * pad), (0, 0, 0, 0))
    ImageDraw.Draw(layer).text((pad - x0, pad - y0), text, font=f, fill=(*color, 255))
    k = ctx.uniform(-0.35, 0.35)
    layer = layer.transform(layer.size, Image.AFFINE, (1, k, -k * layer.height / 2, 0, 1, 0), Image.BILINEAR)
    return layer.crop(layer.getbbox())


def _fit_size(text: str, want: float, max_width: float) -> float:
    width = font(round(want)).getlength(text)
    return max(6.0, want * min(1.0, max_width / max(width, 1.0)))


def render_ocr(ctx: Ctx) -> Rendered:
    s = ctx.size
    (b,) = ctx.balanced(len(LENGTH_BINS))
    text = random_string(ctx, ctx.randint(*LENGTH_BINS[b]))
    image = backdrop(ctx, s)
    bg = image.getpixel((s // 2, s // 2))
    size = _fit_size(text, s * ctx.uniform(0.06, 0.12) * ctx.knobs.scale, s * 0.8)
    layer = text_layer(ctx, text, size, contrasting_color(ctx, bg, 110))
    m = s * 0.04
    if layer.width > s - 2 * m - 2:  # tiny images: the smallest font is still too wide, so scale the ink down
        f = (s - 2 * m - 2) / layer.width
        layer = layer.resize((max(1, int(layer.width * f)), max(1, int(layer.height * f))), Image.BILINEAR)
    target = place(ctx, layer.width, layer.height, (m, m, s - m, s - m), [])
    assert target is not None, f"text {text!r} does not fit a {s}px image"
    boxes = [target]
    for _ in range(ctx.n_clutter(1, 3)):
        other = random_string(ctx, ctx.randint(3, 12))
        dl = text_layer(
            ctx, other, _fit_size(other, s * ctx.uniform(0.05, 0.1), s * 0.6), contrasting_color(ctx, bg, 90)
        )
        bb = place(ctx, dl.width, dl.height, (0, 0, s, s), boxes, gap=s * 0.03)
        if bb is not None:
            boxes.append(bb)
            image.paste(dl, (round(bb[0]), round(bb[1])), dl)
    image.paste(layer, (round(target[0]), round(target[1])), layer)
    image = add_noise(ctx, image)
    draw_box(
        image,
        (round(target[0]), round(target[1]), round(target[0]) + layer.width, round(target[1]) + layer.height),
        RED,
    )
    return Rendered(
        image=image, question=ask("ocr"), answer=text, truth={"text": text},
        meta={"text_length": len(text), "font_px": round(size, 1)},
    )  # fmt: skip
