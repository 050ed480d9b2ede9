"""A tiny fake AVA-Bench release (parquet layout) with every image kind the importer must normalize."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from ava.abilities import INDOOR_DEPTH_BINS, ORIENTATION_VIEWS, format_options

EXIF_ORIENTATION = 0x0112


def _save(im: Image.Image, fmt: str, **kw: Any) -> bytes:
    buf = io.BytesIO()
    im.save(buf, format=fmt, **kw)
    return buf.getvalue()


def _gradient(w: int, h: int, seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8), "RGB")


def image_kinds() -> dict[str, bytes]:
    """Encoded test images, one per kind the importer normalizes (and a corrupt one)."""
    rgba = Image.new("RGBA", (10, 8), (200, 10, 10, 255))
    rgba.putpixel((0, 0), (0, 0, 0, 0))  # fully transparent -> white after compositing
    pal_t = Image.new("P", (6, 6), 1)
    pal_t.putpalette([0, 0, 0, 0, 128, 255] + [0] * 762)
    pal_t.putpixel((0, 0), 0)
    pal_t.info["transparency"] = 0
    gray16 = Image.new("I;16", (5, 4))
    gray16.putdata([32896] * 20)  # 128/255 of full scale (clipping would give 255)
    exif = Image.Exif()
    exif[EXIF_ORIENTATION] = 6  # rotate 90 degrees clockwise to display
    mpo_frames = [Image.new("RGB", (12, 9), (250, 0, 0)), Image.new("RGB", (12, 9), (0, 250, 0))]
    jpeg = _save(_gradient(16, 12), "JPEG", quality=90)
    return {
        "jpeg": jpeg,
        "png_rgb": _save(_gradient(9, 7, 1), "PNG"),
        "mpo": _save(mpo_frames[0], "MPO", save_all=True, append_images=mpo_frames[1:]),
        "palette": _save(Image.new("P", (6, 5), 3), "PNG"),
        "palette_alpha": _save(pal_t, "PNG", transparency=0),
        "gray": _save(Image.new("L", (7, 7), 90), "PNG"),
        "gray16": _save(gray16, "PNG"),
        "la": _save(Image.new("LA", (4, 4), (0, 0)), "PNG"),
        "rgba": _save(rgba, "PNG"),
        "cmyk": _save(Image.new("CMYK", (8, 8), (0, 255, 255, 0)), "JPEG"),
        "exif_rotated": _save(_gradient(40, 20, 2), "JPEG", exif=exif.tobytes()),
        "corrupt": jpeg[:40] + b"\x00garbage" * 4,
    }


def conv(question: str, answer: str) -> list[dict[str, str]]:
    return [{"from": "human", "value": f"<image>\n{question}"}, {"from": "gpt", "value": answer}]


def _orientation_q(obj: str) -> str:
    return f"What is the orientation of the {obj} in the image? Choose one from below: " + format_options(
        ORIENTATION_VIEWS
    )


def _depth_q(obj: str) -> str:
    return (
        f"Based on the image, estimate how far the closest point of the {obj} (highlighted by a red box) is from "
        f"the camera in meters. Select the best option: {format_options(INDOOR_DEPTH_BINS, 'letter')}."
    )


def release_rows() -> dict[str, list[dict[str, Any]]]:
    """Rows per config. Counting carries every image kind; two rows share one image (dedup)."""
    imgs = image_kinds()
    counting = []
    for i, (kind, data) in enumerate(imgs.items()):
        q = "How many apples are there in the image?"
        counting.append({"id": f"cnt/{kind}", "kind": kind, "data": data, "q": q, "a": str(i + 1)})
    counting.append(
        {
            "id": "cnt/shared",
            "kind": "jpeg",
            "data": imgs["jpeg"],
            "q": "How many pears are there in the image?",
            "a": "seven",
        }
    )
    counting.append({"id": "cnt/malformed", "kind": "png_rgb", "data": imgs["png_rgb"], "conv": [{"from": "human"}]})
    orientation = [
        {
            "id": f"ori{i}",
            "kind": "png",
            "data": _save(_gradient(8, 8, 10 + i), "PNG"),
            "q": _orientation_q("car"),
            "a": ORIENTATION_VIEWS[i % 3] if i % 2 else f"{i % 3 + 1}. {ORIENTATION_VIEWS[i % 3]}",
        }
        for i in range(6)
    ]
    depth = [
        {
            "id": f"dep{i}",
            "kind": "png",
            "data": _save(_gradient(8, 8, 20 + i), "PNG"),
            "q": _depth_q("chair"),
            "a": "B" if i % 2 else "2-3",
        }
        for i in range(4)
    ]
    localization = [
        {
            "id": "loc_px",
            "kind": "png",
            "data": _save(_gradient(100, 50, 30), "PNG"),
            "q": "Provide bounding box coordinate for dog.",
            "a": "[10, 5, 50, 25]",
        },
        {
            "id": "loc_norm",
            "kind": "png",
            "data": _save(_gradient(20, 20, 31), "PNG"),
            "q": "Provide bounding box coordinate for cat.",
            "a": "[0.6, 0.7, 0.1, 0.2]",
        },
    ]
    color = [
        {
            "id": "col0",
            "kind": "png",
            "data": _save(_gradient(8, 8, 40), "PNG"),
            "q": "What color is shown within the red bounding box?",
            "a": "(12, 200, 3)",
        },
        {
            "id": "col_bad",
            "kind": "png",
            "data": _save(_gradient(8, 8, 41), "PNG"),
            "q": "What color is shown within the red bounding box?",
            "a": "reddish",
        },
    ]
    ocr = [
        {
            "id": "ocr0",
            "kind": "png",
            "data": _save(_gradient(8, 8, 50), "PNG"),
            "q": "What is written in the red bounding box in the image?",
            "a": "STOP here",
        }
    ]
    bogus = [{"id": "b0", "kind": "png", "data": imgs["png_rgb"], "q": "Why?", "a": "because"}]
    return {
        "Counting": counting,
        "Orientation": orientation,
        "Absolute_depth": depth,
        "Localization": localization,
        "Color": color,
        "OCR": ocr,
        "Bogus": bogus,
    }


def write_release(root: Path, *, split_column: bool = False) -> dict[str, list[dict[str, Any]]]:
    """Write ``root/train/<Config>/train-00000-of-00001.parquet`` for each config; returns the rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = release_rows()
    for config, items in rows.items():
        table = pa.table(
            {
                "id": [r["id"] for r in items],
                "image": [{"bytes": r["data"], "path": f"{r['id'].replace('/', '_')}.{r['kind']}"} for r in items],
                "conversations": [r.get("conv") or conv(r["q"], r["a"]) for r in items],
                "source": [f"src-{config.lower()}" for _ in items],
                "difficulty": [i % 3 for i in range(len(items))],
                **({"split": ["test" if i % 4 == 0 else "train" for i in range(len(items))]} if split_column else {}),
            }
        )
        path = root / "train" / config / "train-00000-of-00001.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, path, row_group_size=4)
    return rows
