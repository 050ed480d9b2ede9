"""Synthetic scenes written as the source formats ``ava data build`` reads, with their exact truth beside them.

``write_sources(DIR)`` writes::

    DIR/images/scene_<i>.png, text_<i>.png   # flat-coloured shapes on a flat background; words
    DIR/instances.json                          # COCO instances: polygons, one crowd region as RLE per few images
    DIR/depth/scene_<i>.png                     # 16-bit millimetres; each shape a card at one depth, background 0
    DIR/classes/<ability>/<class>/<i>.png       # class folders for the six class-folder abilities
    DIR/text.json                               # COCO-Text layout: word boxes and transcriptions
    DIR/raters.csv                              # occluded / facing_camera, three raters each
    DIR/truth.json                              # what the generator decided: boxes, counts, depths, words, votes

Every image is drawn from the annotations written for it (the polygons are filled, the depth map is the cards'
depths), so the annotations are the truth, exactly. Depths sit inside their 1 m bin, at least 0.25 m from its
edges, so the bin is never decided by rounding. A test builds from these files and checks every kept question
against ``truth.json``.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from ava.data.format import atomic_write_text

SHAPES = ("disk", "square", "triangle", "diamond", "hexagon")
SIZES = ((160, 120), (128, 160), (144, 144))
WORDS = ("STOP", "exit", "Hotel", "OPEN", "cafe", "Main St", "2024", "push", "SALE", "taxi", "north", "Bakery")
FOLDER_CLASSES = {
    "texture": ("striped", "dotted", "chequered"),
    "fine_grained": ("sparrow", "robin", "finch"),
    "scene": ("beach", "forest", "kitchen"),
    "action": ("running", "jumping", "sitting"),
    "emotion": ("happy", "sad", "angry"),
    "orientation": ("front", "back", "left"),
}
RATER_VALUES = {"occluded": ("no", "partly", "mostly"), "facing_camera": ("yes", "no")}


def _polygon(shape: str, cx: float, cy: float, r: float) -> list[tuple[float, float]]:
    n, phase = {
        "disk": (24, 0.0),
        "square": (4, math.pi / 4),
        "triangle": (3, -math.pi / 2),
        "diamond": (4, 0.0),
        "hexagon": (6, 0.0),
    }[shape]
    return [
        (cx + r * math.cos(phase + 2 * math.pi * k / n), cy + r * math.sin(phase + 2 * math.pi * k / n))
        for k in range(n)
    ]


def _colour(rng: np.random.Generator, avoid: list[tuple[int, int, int]]) -> tuple[int, int, int]:
    """A colour far from the box colours (pure red, blue) and from the colours already in the scene."""
    while True:
        c = tuple(int(v) for v in rng.integers(20, 236, 3))
        others = [(255, 0, 0), (0, 0, 255), *avoid]
        if all(sum((a - b) ** 2 for a, b in zip(c, o, strict=True)) > 70**2 for o in others):
            return c  # type: ignore[return-value]


def _scene(rng: np.random.Generator, index: int, scale: int = 1) -> dict[str, Any]:
    """Shapes of known class, box, depth and colour; some touching, some cut by the frame, none overlapping."""
    w, h = (v * scale for v in SIZES[index % len(SIZES)])
    bg = _colour(rng, [])
    objects: list[dict[str, Any]] = []
    indoor = index % 2 == 0
    n_target = int(rng.integers(2, 8))
    tries = 0
    while len(objects) < n_target and tries < 200:
        tries += 1
        shape = "square" if not objects and index % 3 != 1 else str(rng.choice(SHAPES[:3] if index % 3 else SHAPES))
        r = float(rng.uniform(5, 0.3 * min(w, h)))
        cut = len(objects) == 0 and index % 4 == 1  # the first shape of every 4th scene leaves the frame
        cx = float(rng.uniform(-0.4 * r, 0.4 * r)) if cut else float(rng.uniform(r + 4, w - r - 4))
        cy = float(rng.uniform(r + 4, h - r - 4))
        if any(abs(cx - o["c"][0]) < r + o["r"] + 3 and abs(cy - o["c"][1]) < r + o["r"] + 3 for o in objects):
            continue
        objects.append({"shape": shape, "c": (cx, cy), "r": r, "cut": cut})
    if index % 3 != 1 and objects:  # a square touching the first object's box edge, when it fits
        o = objects[0]
        r = 8.0
        cx, cy = o["c"][0] + o["r"] + r, o["c"][1]
        box = (cx - r, cy - r, cx + r, cy + r)
        if (
            o["shape"] == "square"
            and box[2] < w - 4
            and all(abs(cx - p["c"][0]) >= r + p["r"] + 3 or abs(cy - p["c"][1]) >= r + p["r"] + 3 for p in objects[1:])
        ):
            objects.append({"shape": "square", "c": (cx, cy), "r": r, "cut": False, "touches": 0, "axis": True})
    used = [bg]
    for o in objects:
        o["colour"] = _colour(rng, used)
        used.append(o["colour"])
        lo = int(rng.integers(1, 6)) if indoor else int(rng.integers(8, 30))
        o["depth"] = round(lo + float(rng.uniform(0.25, 0.75)), 3)
        if o.get("axis"):  # an axis-aligned square, so its edge meets the neighbour's exactly
            x, y, r = o["c"][0], o["c"][1], o["r"]
            poly = [(x - r, y - r), (x + r, y - r), (x + r, y + r), (x - r, y + r)]
        else:
            poly = _polygon(o["shape"], o["c"][0], o["c"][1], o["r"] / (math.sqrt(2) if o["shape"] == "square" else 1))
            if o["shape"] == "square":  # axis-aligned with the same half-side r
                x, y, r = o["c"][0], o["c"][1], o["r"]
                poly = [(x - r, y - r), (x + r, y - r), (x + r, y + r), (x - r, y + r)]
        o["poly"] = [(min(max(x, 0.0), w), min(max(y, 0.0), h)) for x, y in poly]
    return {"size": (w, h), "bg": bg, "objects": objects, "indoor": indoor}


def _draw(scene: dict[str, Any]) -> tuple[Image.Image, np.ndarray]:
    w, h = scene["size"]
    image = Image.new("RGB", (w, h), scene["bg"])
    depth = Image.new("I", (w, h), 0)
    di, dd = ImageDraw.Draw(image), ImageDraw.Draw(depth)
    for o in scene["objects"]:
        di.polygon(o["poly"], fill=o["colour"])
        dd.polygon(o["poly"], fill=round(o["depth"] * 1000))
    return image, np.asarray(depth, dtype=np.uint16)


def _rle(mask: np.ndarray) -> dict[str, Any]:
    from pycocotools import mask as mask_utils

    rle = mask_utils.encode(np.asfortranarray(mask.astype(np.uint8)))
    return {"size": [int(v) for v in rle["size"]], "counts": rle["counts"].decode("ascii")}


def write_sources(
    out: str | Path, n_images: int = 24, seed: int = 0, *, scale: int = 1, image_format: str = "png"
) -> dict[str, Any]:
    """Write the synthetic sources to ``out`` (see the module docstring); returns the truth also written to
    ``truth.json``. ``scale`` multiplies the scene sizes (4: COCO-like 640x480 images, for benchmarks);
    ``image_format`` "jpeg" stores the scenes as JPEG as COCO does (their colours are then no longer exact)."""
    out = Path(out)
    rng = np.random.default_rng(seed)
    for sub in ("images", "depth"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    categories = [{"id": i + 1, "name": s} for i, s in enumerate(SHAPES)]
    cat_id = {s: i + 1 for i, s in enumerate(SHAPES)}
    coco: dict[str, Any] = {
        "info": {"description": "ava synthetic sources", "ava_synthetic": True, "seed": seed},
        "images": [],
        "annotations": [],
        "categories": categories,
    }
    truth: dict[str, Any] = {
        "instances": {},
        "counts": {},
        "images": {},
        "touching": [],
        "attributes": {},
        "words": {},
        "classes": {},
    }
    ann_id = 1
    for i in range(n_images):
        scene = _scene(rng, i, scale)
        image, depth = _draw(scene)
        name = f"scene_{i:04d}.{'jpg' if image_format == 'jpeg' else 'png'}"
        image.save(out / "images" / name, quality=90) if image_format == "jpeg" else image.save(out / "images" / name)
        if i % 6 != 5:  # every 6th image has no depth map: its depth questions are dropped and counted
            Image.fromarray(depth).save(out / "depth" / f"scene_{i:04d}.png")
        w, h = scene["size"]
        coco["images"].append({"id": i + 1, "file_name": name, "width": w, "height": h})
        truth["images"][str(i + 1)] = {
            "file": name,
            "bg": list(scene["bg"]),
            "indoor": scene["indoor"],
            "has_depth": i % 6 != 5,
        }
        counts: dict[str, int] = {}
        ids = []
        for o in scene["objects"]:
            xs, ys = [p[0] for p in o["poly"]], [p[1] for p in o["poly"]]
            box = [min(xs), min(ys), max(xs), max(ys)]
            coco["annotations"].append(
                {
                    "id": ann_id,
                    "image_id": i + 1,
                    "category_id": cat_id[o["shape"]],
                    "iscrowd": 0,
                    "bbox": [box[0], box[1], box[2] - box[0], box[3] - box[1]],
                    "area": (box[2] - box[0]) * (box[3] - box[1]),
                    "segmentation": [[round(v, 2) for p in o["poly"] for v in p]],
                }
            )
            truth["instances"][str(ann_id)] = {
                "image_id": i + 1,
                "class": o["shape"],
                "box": box,
                "depth_m": o["depth"],
                "truncated": o["cut"],
                "colour": list(o["colour"]),
            }
            counts[o["shape"]] = counts.get(o["shape"], 0) + 1
            ids.append(ann_id)
            if "touches" in o:
                truth["touching"].append(sorted([ids[o["touches"]], ann_id]))
            ann_id += 1
        if i % 8 == 7:  # a crowd region (RLE) of a class not otherwise present: its count is unknown
            mask = np.zeros((h, w), dtype=bool)
            mask[: h // 8, : w // 8] = True
            coco["annotations"].append(
                {
                    "id": ann_id,
                    "image_id": i + 1,
                    "category_id": cat_id["hexagon"],
                    "iscrowd": 1,
                    "bbox": [0, 0, w // 8, h // 8],
                    "area": int(mask.sum()),
                    "segmentation": _rle(mask),
                }
            )
            truth["instances"][str(ann_id)] = {
                "image_id": i + 1,
                "class": "hexagon",
                "crowd": True,
                "box": [0, 0, w // 8, h // 8],
            }
            counts["hexagon"] = -1  # unknown
            ann_id += 1
        truth["counts"][str(i + 1)] = counts
    atomic_write_text(out / "instances.json", json.dumps(coco))
    _write_raters(out, rng, truth)
    _write_text(out, rng, truth)
    _write_classes(out, rng, truth)
    atomic_write_text(out / "truth.json", json.dumps(truth, indent=1))
    return truth


def _write_raters(out: Path, rng: np.random.Generator, truth: dict[str, Any]) -> None:
    """Three raters per attribute for most objects: all agree, two of three agree, or (occluded) all differ."""
    rows = []
    for aid, inst in truth["instances"].items():
        if inst.get("crowd"):
            continue
        row: dict[str, Any] = {"annotation_id": aid}
        facts: dict[str, Any] = {}
        for attr, values in RATER_VALUES.items():
            pattern = int(rng.integers(0, 3))
            major = str(values[int(rng.integers(len(values)))])
            if pattern == 2 and len(values) == 3:
                votes = list(values)  # a tie: no majority
                facts[attr] = {"majority": None}
            else:
                other = str(next(v for v in values if v != major))
                votes = [major, major, major] if pattern == 0 else [major, other, major]
                facts[attr] = {"majority": major, "ambiguity": 0.0 if pattern == 0 else round(1 / 3, 4)}
            for r, v in enumerate(votes, 1):
                row[f"{attr}@r{r}"] = v
        rows.append(row)
        truth["attributes"][aid] = facts
    cols = ["annotation_id"] + [f"{a}@r{r}" for a in RATER_VALUES for r in (1, 2, 3)]
    with (out / "raters.csv").open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=cols)
        writer.writeheader()
        writer.writerows(rows)


def _font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow without a bundled scalable font
        return ImageFont.load_default()


def _write_text(out: Path, rng: np.random.Generator, truth: dict[str, Any]) -> None:
    imgs, anns = {}, {}
    font = _font(16)
    for i in range(max(6, len(truth["images"]) // 2)):
        image = Image.new("RGB", (200, 120), tuple(int(v) for v in rng.integers(180, 250, 3)))
        draw = ImageDraw.Draw(image)
        name = f"text_{i:04d}.png"
        imgs[str(i + 1)] = {"id": i + 1, "file_name": name, "width": 200, "height": 120}
        for j, y in enumerate((10, 45, 80)):
            word = str(WORDS[int(rng.integers(len(WORDS)))])
            x = int(rng.integers(5, 60))
            left, top, right, bottom = draw.textbbox((x, y), word, font=font)
            draw.text((x, y), word, fill=(0, 0, 0), font=font)
            wid = f"{i + 1}{j}"
            legible = j != 2 or i % 3 != 0  # some words are marked illegible, as COCO-Text does
            anns[wid] = {
                "id": int(wid),
                "image_id": i + 1,
                "bbox": [left - 2, top - 2, right - left + 4, bottom - top + 4],
                "utf8_string": word,
                "legibility": "legible" if legible else "illegible",
            }
            if legible:
                truth["words"][wid] = word
        image.save(out / "images" / name)
    atomic_write_text(out / "text.json", json.dumps({"imgs": imgs, "anns": anns}))


def _write_classes(out: Path, rng: np.random.Generator, truth: dict[str, Any]) -> None:
    for ava, classes in FOLDER_CLASSES.items():
        for k, cls in enumerate(classes):
            d = out / "classes" / ava / cls
            d.mkdir(parents=True, exist_ok=True)
            for i in range(6):
                a = rng.normal(60 + 60 * k, 20, (48, 48, 3))
                if ava == "texture":
                    a[:: 4 + 2 * k] = 250
                Image.fromarray(np.clip(a, 0, 255).astype(np.uint8)).save(d / f"{i}.png")
                truth["classes"].setdefault(ava, {})[f"{cls}/{i}.png"] = cls
