"""OCR: words from a short vocabulary in varied size, colour and slant inside a red box, on a plain or gradient
background, with distractor strings beyond easy.

The boxed text is one to six words of an 8-word vocabulary of 3-4 letter words, so a head trained on a couple of
hundred samples has seen every word many times and can get a foothold (random character strings scored 0 ANLS for
every cheap head at the demo's size; 16 words, textured backgrounds and stray strings still left every extractor
at chance: ``benchmarks/bench_synth_signal.py``). Lengths still span the paper's subgroup bins (1-5, 6-10, 11-20, >20
characters), with single words most frequent. Words avoid glyphs that Pillow's bundled font makes ambiguous (0/O,
1/l/I, i, c); scoring is case-insensitive (ANLS) and the text is upper case. Distractors outside the box (medium
and hard only) are random strings of the full alphabet in smaller type.
"""

from __future__ import annotations

from PIL import Image, ImageDraw

from ava.synth.abilities import ask
from ava.synth.core import RED, Ctx, Rendered
from ava.synth.shapes import add_noise, contrasting_color, draw_box, font, place
from ava.synth.textures import backdrop

ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZabdefghjkmnpqrstuvwxyz23456789"
LENGTH_BINS = ((1, 5), (6, 10), (11, 20), (21, 24))
BIN_SHARES = (21, 1, 1, 1)  # samples per bin in every round of 24: short texts dominate, every bin stays present
WORDS = ("SUN", "MAP", "KEY", "BUS", "DESK", "FERN", "GATE", "WAVE")


def random_string(ctx: Ctx, length: int) -> str:
    chars = [ALPHABET[int(i)] for i in ctx.rng.integers(len(ALPHABET), size=length)]
    if length >= 6:  # some word breaks, never at the ends nor doubled
        for pos in range(2, length - 2, 1):
            if ctx.rng.random() < 0.12 and chars[pos - 1] != " ":
                chars[pos] = " "
    return "".join(chars)


def word_text(ctx: Ctx, lo: int, hi: int) -> str:
    """Whole words of :data:`WORDS`, space-separated, with a total length in ``[lo, hi]``."""
    while True:
        words: list[str] = []
        while len(" ".join(words)) < lo:
            words.append(ctx.choice(WORDS))
        if len(" ".join(words)) <= hi:
            return " ".join(words)


def length_bin(ctx: Ctx) -> int:
    """A length bin, in the proportions of :data:`BIN_SHARES`, balanced within every round of samples."""
    (slot,) = ctx.balanced(sum(BIN_SHARES))
    for b, share in enumerate(BIN_SHARES):
        if slot < share:
            return b
        slot -= share
    raise AssertionError("unreachable")


def text_layer(ctx: Ctx, text: str, size: float, color: tuple[int, int, int]) -> Image.Image:
    """The text on a transparent layer, sheared by a random slant and cropped to its ink."""
    f = font(round(size))
    x0, y0, x1, y1 = f.getbbox(text)
    pad = round(size)
    layer = Image.new("RGBA", (x1 - x0 + 2 * pad, y1 - y0 + 2 * pad), (0, 0, 0, 0))
    ImageDraw.Draw(layer).text((pad - x0, pad - y0), text, font=f, fill=(*color, 255))
    k = ctx.uniform(-0.15, 0.15) * ctx.knobs.jitter
    layer = layer.transform(layer.size, Image.AFFINE, (1, k, -k * layer.height / 2, 0, 1, 0), Image.BILINEAR)
    return layer.crop(layer.getbbox())


def _fit_size(text: str, want: float, max_width: float) -> float:
    width = font(round(want)).getlength(text)
    return max(6.0, want * min(1.0, max_width / max(width, 1.0)))


def distractors(ctx: Ctx) -> int:
    """Strings outside the box: none on easy, 1-2 on medium, 2-4 on hard (the cheap heads pool the whole image
    and do not follow the red box, so on easy the boxed text is the only text)."""
    return round(ctx.randint(1, 2) * (ctx.knobs.clutter - 1))


def render_ocr(ctx: Ctx) -> Rendered:
    s = ctx.size
    text = word_text(ctx, *LENGTH_BINS[length_bin(ctx)])
    image = backdrop(ctx, s, flat=True)
    bg = image.getpixel((s // 2, s // 2))
    size = _fit_size(text, s * ctx.uniform(0.18, 0.28) * ctx.knobs.scale, s * 0.9)
    layer = text_layer(ctx, text, size, contrasting_color(ctx, bg, 110))
    m = s * 0.04
    if layer.width > s - 2 * m - 2:  # tiny images: the smallest font is still too wide, so scale the ink down
        f = (s - 2 * m - 2) / layer.width
        layer = layer.resize((max(1, int(layer.width * f)), max(1, int(layer.height * f))), Image.BILINEAR)
    target = place(ctx, layer.width, layer.height, (m, m, s - m, s - m), [])
    assert target is not None, f"text {text!r} does not fit a {s}px image"
    boxes = [target]
    for _ in range(distractors(ctx)):
        other = random_string(ctx, ctx.randint(3, 12))
        dl = text_layer(
            ctx, other, _fit_size(other, s * ctx.uniform(0.04, 0.07), s * 0.5), contrasting_color(ctx, bg, 90)
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
        image=image,
        question=ask("ocr"),
        answer=text,
        truth={"text": text},
        meta={"text_length": len(text), "font_px": round(size, 1), "distractors": len(boxes) - 1},
    )
