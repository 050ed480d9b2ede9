"""Real-style sources: COCO-style instance annotations over pictures made of real photographs, for trying
``ava data build`` on real pixels where no annotated photo set can be downloaded.

The photographs are the ones scikit-image and matplotlib ship (``astronaut``, ``coffee``, ``chelsea``, ``rocket``,
``stereo_motorcycle``, ``camera``, ``clock``, ``coins``; Grace Hopper's portrait; ``grass``, ``gravel`` and
``brick`` for the grounds). Each written image is a ground of real texture with several objects cut from those
photographs pasted on it, some overlapping the ones pasted before (whose masks then keep only what stays visible),
clustered as the objects of a street or a table are: 11 classes (person, cup, spoon, cat, rocket, space shuttle,
motorcycle, coin, flag, helmet, clock), several instances of most per image. It is not COCO: the objects are cut-outs
on a texture, not a scene; what it has of a real photo set is real pixels (grain, JPEG blocks, texture, low-contrast
regions), several objects per image with polygon and RLE masks, crowd regions, COCO's file layout, and one JPEG
stored on its side with an EXIF orientation tag, as phones write them.

``write_photo_sources(DIR)`` writes ``DIR/images/photo_<i>.jpg`` (quality 90, as COCO's are) and
``DIR/instances.json``; the annotations are exact by construction (each mask is the pixels its object shows).
"""

from __future__ import annotations

import io
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageEnhance

from ava.data.format import atomic_write_text

# class -> pieces of the photographs: (photo, box x0, y0, x1, y1 in it, mask shape)
PIECES: dict[str, list[tuple[str, tuple[int, int, int, int], str]]] = {
    "person": [
        ("astronaut", (40, 0, 370, 512), "ellipse"),
        ("hopper", (110, 15, 420, 600), "ellipse"),
        ("camera", (0, 60, 335, 512), "ellipse"),
    ],
    "cup": [("coffee", (75, 15, 485, 392), "ellipse")],
    "spoon": [("coffee", (322, 62, 425, 330), "ellipse")],
    "cat": [("chelsea", (15, 0, 435, 300), "ellipse")],
    "rocket": [("rocket", (298, 118, 346, 412), "rect")],
    "space shuttle": [("astronaut", (352, 0, 476, 286), "rect")],
    "motorcycle": [("motorcycle", (88, 95, 702, 455), "ellipse")],
    "coin": [
        ("coins", box, "ellipse")
        for box in (
            (10, 30, 70, 90),
            (77, 33, 125, 88),
            (128, 25, 185, 85),
            (187, 27, 245, 85),
            (250, 32, 300, 85),
            (296, 10, 370, 92),
            (6, 95, 66, 150),
            (80, 97, 127, 148),
            (130, 100, 180, 148),
            (185, 100, 236, 150),
            (242, 90, 300, 150),
            (312, 100, 360, 145),
            (20, 152, 70, 205),
            (77, 150, 130, 205),
            (132, 152, 177, 203),
            (190, 150, 247, 210),
            (248, 147, 300, 205),
            (312, 150, 382, 230),
            (15, 228, 75, 290),
            (90, 232, 140, 285),
            (142, 230, 205, 290),
            (215, 232, 270, 290),
            (272, 232, 322, 290),
            (332, 240, 384, 290),
        )
    ],
    "flag": [("astronaut", (0, 0, 96, 330), "rect"), ("hopper", (0, 0, 152, 395), "rect")],
    "helmet": [("astronaut", (276, 340, 512, 512), "ellipse")],
    "clock": [("clock", (138, 88, 272, 218), "ellipse")],
}
GROUNDS = ("grass", "gravel", "brick")
SIZE = (640, 480)
# objects pasted per image, from a couple to a dozen (those left mostly hidden are not annotated)
COUNTS = (2, 3, 4, 5, 6, 7, 8, 10, 11, 13)
ROTATED = 3  # this image is stored on its side, with EXIF orientation 6 ("turn 90 degrees clockwise to view")


@lru_cache(maxsize=16)
def _photo(name: str) -> Image.Image:
    """One of the shipped photographs, as RGB (read once; not to be drawn on)."""
    if name == "hopper":
        import matplotlib.cbook as cbook

        with Image.open(cbook.get_sample_data("grace_hopper.jpg")) as im:
            return im.convert("RGB")
    import skimage.data as data

    array = data.stereo_motorcycle()[0] if name == "motorcycle" else getattr(data, name)()
    return Image.fromarray(array).convert("RGB")


def _ground(rng: np.random.Generator, size: tuple[int, int]) -> Image.Image:
    """A real texture (grass, gravel or brick), tinted, filling ``size``."""
    texture = _photo(str(rng.choice(GROUNDS))).convert("L").resize(size, Image.Resampling.BILINEAR)
    tint = rng.uniform(0.5, 1.1, 3)
    a = np.asarray(texture, np.float32)[..., None] * tint
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8))


def _shape(kind: str, size: tuple[int, int]) -> np.ndarray:
    """The mask of a piece: an ellipse inscribed in its box, or the whole box."""
    w, h = size
    mask = Image.new("L", size, 0)
    if kind == "rect":
        mask.paste(255, (0, 0, w, h))
    else:
        ImageDraw.Draw(mask).ellipse((0, 0, w - 1, h - 1), fill=255)
    return np.asarray(mask) > 0


def _piece(rng: np.random.Generator, cls: str, longest: float) -> tuple[Image.Image, np.ndarray]:
    """An instance of ``cls``: a piece of a photograph, scaled so its longest side is ``longest`` px, maybe
    mirrored, its brightness and contrast varied; and its mask."""
    photo, box, kind = PIECES[cls][int(rng.integers(len(PIECES[cls])))]
    crop = _photo(photo).crop(box)
    scale = longest / max(crop.size)
    size = (max(8, round(crop.width * scale)), max(8, round(crop.height * scale)))
    crop = crop.resize(size, Image.Resampling.LANCZOS)
    if rng.random() < 0.5:
        crop = crop.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    crop = ImageEnhance.Brightness(crop).enhance(rng.uniform(0.8, 1.2))
    crop = ImageEnhance.Contrast(crop).enhance(rng.uniform(0.8, 1.2))
    if cls == "coin":  # the coins photograph is grey: silver or brass
        tone = np.array([1.0, 0.85, 0.45]) if rng.random() < 0.5 else np.array([0.95, 0.95, 1.0])
        crop = Image.fromarray(np.clip(np.asarray(crop, np.float32) * tone, 0, 255).astype(np.uint8))
    return crop, _shape(kind, size)


def _scene(rng: np.random.Generator, n: int) -> tuple[Image.Image, list[tuple[str, np.ndarray, int]]]:
    """A ground with ``n`` objects pasted in a cluster or two; each object's class, visible mask and the pixels it
    covered before later objects hid some of them."""
    w, h = SIZE
    image = _ground(rng, SIZE)
    owner = np.full((h, w), -1, np.int32)  # which object shows at each pixel
    classes = list(PIECES)
    # a few classes per image, several instances of some (people in a group, coins on a table)
    chosen = [str(c) for c in rng.choice(classes, size=min(len(classes), 2 + n // 3), replace=False)]
    centres = rng.uniform([0.25 * w, 0.3 * h], [0.75 * w, 0.7 * h], size=(1 + n // 6, 2))
    objects: list[tuple[str, int]] = []
    for _ in range(n):
        cls = chosen[int(rng.integers(len(chosen)))]
        small = cls in ("coin", "spoon", "clock")
        longest = float(rng.uniform(0.05, 0.14) if small else rng.uniform(0.16, 0.5)) * max(w, h)
        crop, mask = _piece(rng, cls, longest)
        cx, cy = centres[int(rng.integers(len(centres)))] + rng.normal(0, [0.2 * w, 0.15 * h])
        x0 = int(np.clip(cx - crop.width / 2, -crop.width // 4, w - 3 * crop.width // 4))
        y0 = int(np.clip(cy - crop.height / 2, -crop.height // 4, h - 3 * crop.height // 4))
        # the part of the piece inside the picture
        sx0, sy0 = max(0, -x0), max(0, -y0)
        sx1, sy1 = min(crop.width, w - x0), min(crop.height, h - y0)
        sub = mask[sy0:sy1, sx0:sx1]
        region = owner[y0 + sy0 : y0 + sy1, x0 + sx0 : x0 + sx1]
        region[sub] = len(objects)
        image.paste(
            crop.crop((sx0, sy0, sx1, sy1)), (x0 + sx0, y0 + sy0), Image.fromarray((sub * 255).astype(np.uint8))
        )
        objects.append((cls, int(sub.sum())))
    return image, [(cls, owner == i, full) for i, (cls, full) in enumerate(objects)]


def _polygon(mask: np.ndarray) -> list[list[float]] | None:
    """The outline of a mask as one COCO polygon (pixel corners), when the mask is one blob without holes that
    the polygon reproduces; None otherwise (the mask is then written as RLE)."""
    from pycocotools import mask as mask_utils
    from skimage.measure import find_contours, label

    if label(mask).max() != 1:
        return None
    contours = find_contours(np.pad(mask, 1).astype(np.uint8), 0.5)
    if len(contours) != 1:
        return None
    ys, xs = contours[0][:, 0] - 0.5, contours[0][:, 1] - 0.5  # back to pixel-edge coordinates of the mask
    poly = np.stack([np.clip(xs, 0, mask.shape[1]), np.clip(ys, 0, mask.shape[0])], 1).ravel().round(2).tolist()
    rle = mask_utils.merge(mask_utils.frPyObjects([poly], *mask.shape))
    drawn = mask_utils.decode(rle).astype(bool)
    return [poly] if (drawn != mask).sum() <= 0.05 * mask.sum() else None


def _rle(mask: np.ndarray) -> dict[str, Any]:
    from pycocotools import mask as mask_utils

    rle = mask_utils.encode(np.asfortranarray(mask.astype(np.uint8)))
    return {"size": [int(v) for v in rle["size"]], "counts": rle["counts"].decode("ascii")}


def _box(mask: np.ndarray) -> list[float]:
    ys, xs = np.nonzero(mask)
    return [float(xs.min()), float(ys.min()), float(xs.max() + 1 - xs.min()), float(ys.max() + 1 - ys.min())]


def write_photo_sources(
    out: str | Path, n_images: int = 10, seed: int = 0, rotated: int | None = ROTATED
) -> dict[str, Any]:
    """Write the real-style sources to ``out`` (see the module docstring): ``images/`` and ``instances.json``;
    image ``rotated`` (None: none) is stored on its side with an EXIF orientation tag. Returns what was written:
    per image its file, whether it is stored on its side, its instances."""
    out = Path(out)
    (out / "images").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    categories = [{"id": i + 1, "name": c, "supercategory": "object"} for i, c in enumerate(PIECES)]
    cat_id = {c["name"]: c["id"] for c in categories}
    coco: dict[str, Any] = {
        "info": {
            "description": "ava real-style sources: objects cut from the photographs "
            "scikit-image and matplotlib ship, pasted on real textures",
            "seed": seed,
        },
        "images": [],
        "annotations": [],
        "categories": categories,
    }
    written: dict[str, Any] = {"images": []}
    ann_id = 1
    for i in range(n_images):
        image, objects = _scene(rng, COUNTS[i % len(COUNTS)])
        name = f"photo_{i:04d}.jpg"
        _save(image, out / "images" / name, rotated=i == rotated)
        coco["images"].append({"id": i + 1, "file_name": name, "width": SIZE[0], "height": SIZE[1]})
        record = {"file": name, "exif_rotated": i == rotated, "instances": []}
        for cls, mask, full in objects:
            area = int(mask.sum())
            if area < 0.3 * full or area < 30:  # mostly hidden: not annotated, as COCO leaves such objects
                continue
            poly = _polygon(mask)
            coco["annotations"].append(
                {
                    "id": ann_id,
                    "image_id": i + 1,
                    "category_id": cat_id[cls],
                    "iscrowd": 0,
                    "bbox": _box(mask),
                    "area": area,
                    "segmentation": poly if poly is not None else _rle(mask),
                }
            )
            record["instances"].append({"id": ann_id, "class": cls})
            ann_id += 1
        written["images"].append(record)
    atomic_write_text(out / "instances.json", json.dumps(coco))
    return written


def _save(image: Image.Image, path: Path, rotated: bool) -> None:
    """A JPEG of quality 90; ``rotated``: stored turned 90 degrees counter-clockwise, with EXIF orientation 6 so
    that every viewer (and ``ImageOps.exif_transpose``) shows it upright."""
    if not rotated:
        image.save(path, quality=90)
        return
    exif = Image.Exif()
    exif[0x0112] = 6
    buf = io.BytesIO()
    image.transpose(Image.Transpose.ROTATE_90).save(buf, format="JPEG", quality=90, exif=exif.tobytes())
    path.write_bytes(buf.getvalue())
