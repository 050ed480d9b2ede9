"""A contact sheet of dataset samples with their question and answer, for a person to check by eye.

Works on any ava dataset (synthetic or imported). Localization truth boxes are drawn in green on the tile,
since the image itself carries no box.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from PIL import Image, ImageDraw

from ava.data.format import Dataset, atomic_write_bytes, encode_png
from ava.errors import AvaError
from ava.synth.shapes import font

TILE = 256
CAPTION_LINES = 7


def _caption(question: str, answer: str, width_chars: int) -> list[str]:
    lines = textwrap.wrap(question, width_chars)
    if len(lines) > CAPTION_LINES - 1:
        lines = lines[: CAPTION_LINES - 2] + [lines[CAPTION_LINES - 2][: width_chars - 3] + "..."]
    ans = textwrap.shorten(f"answer: {answer}", width_chars, placeholder="...")
    return [*lines, ans]


def _tile(ds: Dataset, sample) -> Image.Image:
    image = ds.load_image(sample)
    scale = TILE / max(image.size)
    size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
    image = image.resize(size, Image.NEAREST if scale > 1 else Image.LANCZOS)  # small images stay crisp
    if "box" in sample.truth:
        x0, y0, x1, y1 = sample.truth["box"]
        w, h = image.size
        ImageDraw.Draw(image).rectangle([x0 * w, y0 * h, x1 * w, y1 * h], outline=(0, 200, 0), width=2)
    f = font(11)
    line_h = 13
    tile = Image.new("RGB", (TILE, TILE + CAPTION_LINES * line_h + 6), (255, 255, 255))
    tile.paste(image, ((TILE - image.width) // 2, 0))
    draw = ImageDraw.Draw(tile)
    for i, line in enumerate(_caption(sample.question, sample.answer, 44)):
        color = (0, 110, 0) if line.startswith("answer:") else (20, 20, 20)
        draw.text((4, TILE + 3 + i * line_h), line, font=f, fill=color)
    return tile


def contact_sheet(root: str | Path, ava: str, out: str | Path, *, n: int = 16, split: str | None = None) -> Path:
    """Write a grid of ``n`` samples of ability ``ava`` (spread evenly over the dataset) to the PNG ``out``."""
    from ava.abilities import ABILITIES

    ds = Dataset(root)
    key = ABILITIES.canonical(ava)
    samples = ds.samples(key, split=split)
    if not samples:
        raise AvaError(f"{root}: no {key} samples{f' in split {split!r}' if split else ''} to preview")
    if n < 1:
        raise AvaError(f"--n {n}: must be at least 1")
    step = max(1, len(samples) // n)
    chosen = samples[::step][:n]
    tiles = [_tile(ds, s) for s in chosen]
    cols = min(4, len(tiles))
    rows = (len(tiles) + cols - 1) // cols
    tw, th = tiles[0].size
    sheet = Image.new("RGB", (cols * (tw + 6) + 6, rows * (th + 6) + 30), (235, 235, 235))
    ImageDraw.Draw(sheet).text(
        (8, 6), f"{key}: {len(chosen)} of {len(samples)} samples from {root}", font=font(14), fill=(0, 0, 0)
    )
    for i, t in enumerate(tiles):
        sheet.paste(t, (6 + (i % cols) * (tw + 6), 30 + (i // cols) * (th + 6)))
    out = Path(out)
    atomic_write_bytes(out, encode_png(sheet))
    return out
