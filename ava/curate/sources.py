"""Readers of the annotation formats users already have; each checks every record once, where it is read, and
names the file, the record and the field at fault.

- COCO-style instances (``instances_*.json``; LVIS and Objects365 share the layout): boxes, polygons or RLE masks,
  categories. Masks are decoded with pycocotools.
- Depth maps, one per image, found by the image's file stem: 16-bit PNG in millimetres or ``.npy`` in metres;
  0 (or a non-finite value) means no measurement.
- Class folders (torchvision ImageFolder layout ``ROOT/<class>/<image>``), one root per ability.
- Text annotations (COCO-Text / TextOCR layout: ``imgs`` and ``anns`` with ``bbox`` and ``utf8_string``).
- Per-instance attributes from people (JSON or CSV keyed by annotation id; several raters as several values).

A record that is malformed raises :class:`SourceError`: a field of the wrong type (an id that is a list, a polygon
of strings, RLE counts that are a number), a number that is not finite or out of its range (a NaN box, a width of
1e999, RLE runs that do not cover the image exactly: pycocotools would decode them past the mask's end), a path
that leaves its root (a ``file_name`` of ``../x.png`` or ``/etc/x.png``), a category id declared twice, a polygon
outside its image, a depth map of another size than its image, a class with one image, an attribute for an
annotation that does not exist. A record that is well-formed but that a curation rule does not keep (a zero-area
box) is dropped and counted by the builder.

EXIF orientation: pixels are turned upright (as every viewer shows them, :func:`load_rgb`). Annotations whose
image size is the upright one were drawn on the upright picture and are read as they are; annotations whose size
is the stored (unturned) one were drawn on the stored pixels and are turned with them: boxes, polygons, RLE masks
and depth maps, so every question shows the upright picture with its marks where the objects are.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import os
from collections import defaultdict
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any, NoReturn

import numpy as np
from PIL import Image

from ava.errors import AvaError
from ava.jsonfile import read_json

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")
POLYGON_SLACK = 1.0  # px: COCO polygons and boxes may touch the far edge (x = width); beyond this they leave the image
EXIF_ORIENTATION = 0x0112
# The transpose that turns a stored picture upright, per EXIF orientation: the one ImageOps.exif_transpose applies
# (a test checks the two agree); kept here because the annotations drawn on stored pixels are turned with it too.
UPRIGHT = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}
_SWAPS = (Image.Transpose.TRANSPOSE, Image.Transpose.ROTATE_270, Image.Transpose.TRANSVERSE, Image.Transpose.ROTATE_90)


class SourceError(AvaError, ValueError):
    """A source file or one of its records is not as its format requires; the message names both."""


def sha256_file(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _load_json(path: Path) -> Any:
    try:
        return read_json(path, encoding="utf-8-sig")
    except FileNotFoundError:
        raise SourceError(f"{path}: no such file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise SourceError(f"{path}: not valid JSON ({e})") from e
    except OSError as e:
        raise SourceError(f"{path}: cannot be read ({e.strerror or e})") from None


def orientation(im: Image.Image) -> Image.Transpose | None:
    """The transpose that turns ``im`` upright by its EXIF orientation tag; None when it is upright as stored."""
    try:
        tag = im.getexif().get(EXIF_ORIENTATION, 1)
    except Exception:  # noqa: BLE001 - a damaged EXIF block: the picture as stored, as viewers show it then
        return None
    return UPRIGHT.get(tag) if isinstance(tag, int) else None


def load_rgb(path: Path) -> Image.Image:
    """An image file's pixels as RGB, turned upright by its EXIF orientation (as every viewer shows it); SourceError
    naming the file when it cannot be read."""
    try:
        with Image.open(path) as im:
            im.load()
            turn = orientation(im)
            # convert() of an RGB image copies it, which took as long as decoding the JPEG did
            rgb = im if im.mode == "RGB" else im.convert("RGB")
            return rgb if turn is None else rgb.transpose(turn)
    except FileNotFoundError:
        raise SourceError(f"{path}: image file not found") from None
    except (OSError, Image.DecompressionBombError) as e:
        raise SourceError(f"{path}: cannot be read as an image ({e})") from e


# -- checking one record ---------------------------------------------------------------------------------------------


def _fail(path: Path, where: str, message: str) -> NoReturn:
    raise SourceError(f"{path}: {where}: {message}")


def _show(value: Any, n: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= n else text[: n - 3] + "..."


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _key(path: Path, where: str, name: str, value: Any, *, text: bool = True) -> int | str:
    """An id: an integer (or, where ``text``, a non-empty string), never a list, an object, a bool or a float."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if text and isinstance(value, str) and value:
        return value
    _fail(path, where, f"{name} {_show(value)} is not an integer{' or a string' if text else ''}")


def _size(path: Path, where: str, name: str, value: Any) -> int:
    """A width or height in pixels: a positive integer (an integral float such as 640.0 is read as 640)."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        _fail(path, where, f"{name} {_show(value)} is not a positive integer")
    return value


def _text(path: Path, where: str, name: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        _fail(path, where, f"{name} {_show(value)} is not a non-empty string")
    return value


def inside(root: Path, name: str) -> Path | None:
    """``root / name`` when ``name`` is a relative path that stays inside ``root`` (no absolute path, no drive,
    no ``..`` climbing out; checked on the names, so symbolic links inside ``root`` keep working); else None."""
    if "\0" in name or PurePosixPath(name).is_absolute() or PureWindowsPath(name).drive or name.startswith("\\"):
        return None
    base = os.path.normpath(root)
    full = os.path.normpath(os.path.join(base, name))
    if full == base or os.path.commonpath([base, full]) != base:
        return None
    return Path(full)


def _file(path: Path, where: str, name: Any, root: Path, option: str) -> Path:
    """The image file ``name`` names under ``root``: refused when it leaves ``root`` or is not there."""
    name = _text(path, where, "file_name", name)
    full = inside(root, name)
    if full is None:
        _fail(
            path,
            where,
            f"file_name {name!r} is not inside {option} {root} (an absolute path, or '..' climbing out of it); refused",
        )
    if not full.is_file():
        _fail(path, where, f"file {full} not found (under {option} {root})")
    return full


def _box(path: Path, where: str, value: Any, w: int, h: int) -> tuple[float, float, float, float]:
    """A box ``[x, y, w, h]``: four finite numbers, a width and height >= 0, inside its image (within the slack)."""
    if not isinstance(value, list) or len(value) != 4 or not all(_is_number(v) for v in value):
        _fail(path, where, f"bbox {_show(value)} is not [x, y, w, h] (4 numbers)")
    x, y, bw, bh = (float(v) for v in value)
    if not all(math.isfinite(v) for v in (x, y, bw, bh)):
        _fail(path, where, f"bbox {_show(value)} holds a value that is not finite")
    if bw < 0 or bh < 0:
        _fail(path, where, f"bbox {_show(value)} has a negative width or height")
    s = POLYGON_SLACK
    if x < -s or y < -s or x + bw > w + s or y + bh > h + s:
        _fail(
            path,
            where,
            f"bbox {_show(value)} reaches x {x:.1f}..{x + bw:.1f}, y {y:.1f}..{y + bh:.1f}, outside its {w}x{h} image",
        )
    return (x, y, bw, bh)


def _polygons(path: Path, where: str, seg: list, w: int, h: int) -> None:
    for poly in seg:
        try:
            a = np.asarray(poly) if isinstance(poly, list) else None
        except ValueError:  # ragged nesting
            a = None
        if a is None or a.ndim != 1 or a.dtype.kind not in "iuf" or len(a) < 6 or len(a) % 2:
            _fail(path, where, f"a polygon needs an even number (>= 6) of coordinates, numbers, got {_show(poly)}")
        if not np.isfinite(a).all():
            _fail(path, where, f"polygon {_show(poly)} holds a coordinate that is not finite")
        xs, ys = a[0::2], a[1::2]
        s = POLYGON_SLACK
        if xs.min() < -s or ys.min() < -s or xs.max() > w + s or ys.max() > h + s:
            _fail(
                path,
                where,
                f"polygon reaches x {xs.min():.1f}..{xs.max():.1f}, y {ys.min():.1f}..{ys.max():.1f}, "
                f"outside its {w}x{h} image",
            )


def rle_runs(counts: str) -> np.ndarray:
    """The runs of a compressed COCO RLE string, decoded as pycocotools' ``rleFrString`` does (characters from 48,
    5 bits each, a continuation bit, a sign bit on a number's last character; each run after the second relative
    to the run two before), vectorized. pycocotools trusts them: runs that are negative or do not add up to the
    mask's size make it write past the mask or leave pixels unset, so they are checked here first."""
    c = np.frombuffer(counts.encode("latin-1", "replace"), np.uint8).astype(np.int64) - 48
    if c.size == 0:
        return np.zeros(0, np.int64)
    bad = np.flatnonzero((c < 0) | (c >= 64) | (np.frombuffer(counts.encode("utf-32-le"), np.uint32) > 255))
    if bad.size:
        raise ValueError(f"character {counts[int(bad[0])]!r} is not part of the encoding")
    ends = np.flatnonzero((c & 0x20) == 0)  # a number's last character has no continuation bit
    if ends.size == 0 or ends[-1] != c.size - 1:
        raise ValueError("it ends inside a number")
    starts = np.concatenate([[0], ends[:-1] + 1])
    if (ends - starts).max() >= 12:  # 12 characters are 60 bits: no run of an image is that long
        raise ValueError("a number is too long")
    k = np.arange(c.size) - np.repeat(starts, ends - starts + 1)  # each character's place in its number
    x = np.add.reduceat((c & 0x1F) << (5 * k), starts)
    negative = (c[ends] & 0x10) != 0
    x[negative] |= -1 << (5 * (ends[negative] - starts[negative] + 1))
    runs = x.copy()
    runs[2::2] = np.cumsum(x[2::2])  # run m > 2 adds run m - 2: the even ones from run 2 on, the odd ones all
    runs[1::2] = np.cumsum(x[1::2])
    return runs


def _rle(path: Path, where: str, seg: dict, h: int, w: int) -> None:
    size = seg.get("size")
    if size != [h, w]:
        _fail(path, where, f"RLE size {_show(size)} is not the image's [{h}, {w}]")
    counts = seg.get("counts")
    if isinstance(counts, str):
        try:
            runs = rle_runs(counts)
        except ValueError as e:
            _fail(path, where, f"RLE counts {_show(counts, 40)} cannot be decoded ({e})")
    elif isinstance(counts, list) and all(isinstance(c, int) and not isinstance(c, bool) for c in counts):
        runs = counts
    else:
        _fail(path, where, f"RLE counts {_show(counts, 40)} are neither a string nor a list of integers")
    if any(r < 0 for r in runs):
        _fail(path, where, "RLE counts hold a negative run")
    total = sum(int(r) for r in runs)
    if total != h * w:
        _fail(path, where, f"RLE runs cover {total} pixels, not the {h}x{w} = {h * w} of its image")


def _crowd(path: Path, where: str, value: Any) -> bool:
    if value is False or value is True or (_is_number(value) and value in (0, 1)):
        return bool(value)
    _fail(path, where, f"iscrowd {_show(value)} is not 0 or 1")


# -- turning annotations drawn on stored pixels upright ----------------------------------------------------------------


def _turn_xy(xs: np.ndarray, ys: np.ndarray, turn: Image.Transpose, w: int, h: int) -> tuple[np.ndarray, np.ndarray]:
    """Points of a ``w`` x ``h`` stored picture (pixel-edge coordinates) where ``turn`` puts them."""
    T = Image.Transpose
    return {
        T.FLIP_LEFT_RIGHT: (w - xs, ys),
        T.FLIP_TOP_BOTTOM: (xs, h - ys),
        T.ROTATE_180: (w - xs, h - ys),
        T.ROTATE_90: (ys, w - xs),
        T.ROTATE_270: (h - ys, xs),
        T.TRANSPOSE: (ys, xs),
        T.TRANSVERSE: (h - ys, w - xs),
    }[turn]


def turn_box(box: tuple[float, float, float, float], turn: Image.Transpose, w: int, h: int) -> tuple[float, ...]:
    x, y, bw, bh = box
    xs, ys = _turn_xy(np.array([x, x + bw]), np.array([y, y + bh]), turn, w, h)
    return (float(xs.min()), float(ys.min()), float(abs(xs[1] - xs[0])), float(abs(ys[1] - ys[0])))


def turn_segmentation(seg: Any, turn: Image.Transpose, w: int, h: int) -> Any:
    """Polygons or an RLE drawn on a ``w`` x ``h`` stored picture, turned upright with it."""
    if isinstance(seg, list):
        out = []
        for poly in seg:
            a = np.asarray(poly, float)
            xs, ys = _turn_xy(a[0::2], a[1::2], turn, w, h)
            out.append(np.stack([xs, ys], 1).ravel().tolist())
        return out
    from pycocotools import mask as mask_utils

    rle = mask_utils.frPyObjects(seg, h, w) if isinstance(seg.get("counts"), list) else seg
    mask = Image.fromarray(mask_utils.decode(rle) * 255).transpose(turn)
    turned = mask_utils.encode(np.asfortranarray((np.asarray(mask) > 0).astype(np.uint8)))
    return {"size": [int(v) for v in turned["size"]], "counts": turned["counts"].decode("ascii")}


def turn_map(depth: np.ndarray, turn: Image.Transpose) -> np.ndarray:
    """A map (H x W) drawn on stored pixels, turned upright (numpy's rotations are the same transposes)."""
    T = Image.Transpose
    return np.ascontiguousarray(
        {
            T.FLIP_LEFT_RIGHT: depth[:, ::-1],
            T.FLIP_TOP_BOTTOM: depth[::-1],
            T.ROTATE_180: depth[::-1, ::-1],
            T.ROTATE_90: np.rot90(depth, 1),
            T.ROTATE_270: np.rot90(depth, -1),
            T.TRANSPOSE: depth.T,
            T.TRANSVERSE: depth[::-1, ::-1].T,
        }[turn]
    )


# -- COCO instances -------------------------------------------------------------------------------------------------


@dataclass
class Instance:
    """One instance annotation: its box (x, y, w, h in pixels of the upright picture) and, lazily, its mask."""

    id: int
    image_id: int | str
    category: str
    bbox: tuple[float, float, float, float]
    iscrowd: bool
    segmentation: Any
    height: int
    width: int

    @cached_property  # read by every rule about positions, for every pair an instance is in
    def xyxy(self) -> tuple[float, float, float, float]:
        x, y, w, h = self.bbox
        return (x, y, x + w, y + h)

    @cached_property
    def rle(self) -> dict | None:
        """The mask as one compressed RLE (small, so kept): polygons merged, uncompressed RLE compressed; None
        where the annotation has no segmentation."""
        from pycocotools import mask as mask_utils

        seg = self.segmentation
        if not seg:
            return None
        if isinstance(seg, list):
            return mask_utils.merge(mask_utils.frPyObjects(seg, self.height, self.width))
        if isinstance(seg.get("counts"), list):  # uncompressed RLE
            return mask_utils.frPyObjects(seg, self.height, self.width)
        return seg

    @property
    def mask(self) -> np.ndarray:
        """The instance mask (bool, H x W): polygons or RLE through pycocotools; the box where there is none.
        Decoded on each use, not kept: a build over thousands of images cannot hold every mask."""
        from pycocotools import mask as mask_utils

        rle = self.rle
        if rle is None:
            out = np.zeros((self.height, self.width), dtype=bool)
            x1, y1, x2, y2 = (round(v) for v in self.xyxy)
            out[max(0, y1) : y2, max(0, x1) : x2] = True
            return out
        return mask_utils.decode(rle).astype(bool)

    @property
    def mask_area(self) -> int:
        """Pixels in the mask (counted on the RLE, nothing decoded)."""
        from pycocotools import mask as mask_utils

        return int(self.mask.sum()) if self.rle is None else int(mask_utils.area(self.rle))

    @cached_property
    def mask_extent(self) -> tuple[int, int, int, int] | None:
        """The first and last column and row the mask reaches (x0, y0, x1, y1, inclusive; from the RLE, nothing
        decoded); None for an empty mask."""
        from pycocotools import mask as mask_utils

        if self.rle is None:
            ys, xs = np.nonzero(self.mask)
            return (int(xs.min()), int(ys.min()), int(xs.max()), int(ys.max())) if xs.size else None
        x, y, w, h = (int(v) for v in mask_utils.toBbox(self.rle))
        return (x, y, x + w - 1, y + h - 1) if w > 0 and h > 0 else None

    @property
    def mask_touches_frame(self) -> bool:
        """Whether the mask reaches the image's first or last row or column."""
        e = self.mask_extent
        return e is not None and (e[0] == 0 or e[1] == 0 or e[2] == self.width - 1 or e[3] == self.height - 1)


@dataclass
class SourceImage:
    """A source image: its size is the upright picture's; ``turn`` is set where the annotations (and depth map)
    were drawn on the stored pixels of an EXIF-rotated file and are turned upright as they are read."""

    id: int | str
    file_name: str
    path: Path
    width: int
    height: int
    instances: list[Instance] = field(default_factory=list)
    turn: Image.Transpose | None = None
    exif_turned: bool = False  # the file carries an EXIF orientation: its pixels are turned upright when read


@dataclass
class CocoSource:
    """A COCO-style instances file: images, categories (id -> name) and instances per image."""

    path: Path
    images: dict[int | str, SourceImage]
    categories: dict[int | str, str]
    n_annotations: int
    synthetic: bool = False  # written by ``ava data synth-sources`` (its ``info`` says so)
    exif: dict[str, int] = field(default_factory=dict)  # EXIF-rotated images, by the frame their annotations use

    @property
    def class_names(self) -> list[str]:
        return sorted(set(self.categories.values()))

    def instance(self, ann_id: int) -> Instance | None:
        return self._by_id.get(ann_id)

    @cached_property
    def _by_id(self) -> dict[int, Instance]:
        return {a.id: a for im in self.images.values() for a in im.instances}


def read_coco(path: Path, images_dir: Path) -> CocoSource:
    """Read and check a COCO-style instances file; images are looked up under ``images_dir`` by ``file_name``."""
    data = _load_json(path)
    if not isinstance(data, dict) or not all(isinstance(data.get(k), list) for k in ("images", "annotations")):
        raise SourceError(f"{path}: not a COCO instances file (needs lists 'images' and 'annotations')")
    cats = data.get("categories") or []
    if not isinstance(cats, list):
        raise SourceError(f"{path}: 'categories' is not a list")
    categories: dict[int | str, str] = {}
    for i, c in enumerate(cats):
        where = f"categories[{i}]"
        if not isinstance(c, dict):
            _fail(path, where, f"{_show(c)} is not an object with an 'id' and a 'name'")
        cid = _key(path, where, "id", c.get("id"))
        name = _text(path, where, "name", c.get("name"))
        if cid in categories:
            _fail(path, where, f"category id {cid!r} is declared twice ({categories[cid]!r}, then {name!r})")
        categories[cid] = name
    images: dict[int | str, SourceImage] = {}
    exif: dict[str, int] = defaultdict(int)
    for i, rec in enumerate(data["images"]):
        im = _coco_image(path, i, rec, images_dir, images)
        images[im.id] = im
        if im.exif_turned:
            exif["annotations on the stored pixels" if im.turn is not None else "annotations upright"] += 1
    seen: set[int] = set()
    for i, ann in enumerate(data["annotations"]):
        inst = _instance(path, i, ann, images, categories, seen)
        images[inst.image_id].instances.append(inst)
    info = data.get("info") if isinstance(data.get("info"), dict) else {}
    return CocoSource(path, images, categories, len(data["annotations"]), bool(info.get("ava_synthetic")), dict(exif))


def _coco_image(path: Path, i: int, rec: Any, images_dir: Path, images: dict) -> SourceImage:
    if not isinstance(rec, dict):
        _fail(path, f"images[{i}]", f"{_show(rec)} is not an object (id, file_name, width, height)")
    iid = _key(path, f"images[{i}]", "id", rec.get("id"))
    where = f"image {iid}"
    if iid in images:
        _fail(path, where, "image id declared twice")
    width, height = (_size(path, where, k, rec.get(k)) for k in ("width", "height"))
    file = _file(path, where, rec.get("file_name"), images_dir, "--images")
    im = SourceImage(iid, rec["file_name"], file, width, height)
    im.turn = _frame(path, where, im)
    return im


def _frame(path: Path, where: str, im: SourceImage) -> Image.Transpose | None:
    """The file's pixel size must be the size the annotations were drawn for: the upright picture's, or, for an
    EXIF-rotated file, the stored pixels' (then the annotations are turned upright with the pixels: returned).
    Only the header is read."""
    try:
        with Image.open(im.path) as f:
            stored, turn = f.size, orientation(f)
    except (OSError, Image.DecompressionBombError) as e:
        raise SourceError(f"{im.path}: cannot be read as an image ({e})") from e
    upright = stored[::-1] if turn in _SWAPS else stored
    declared = (im.width, im.height)
    im.exif_turned = turn is not None
    if declared == upright:
        return None
    if turn is not None and declared == stored:
        im.width, im.height = upright
        return turn
    turned = f" (upright by its EXIF orientation: {upright[0]}x{upright[1]})" if turn is not None else ""
    _fail(
        path,
        where,
        f"{im.file_name} is {stored[0]}x{stored[1]}{turned} but the annotations say {declared[0]}x{declared[1]}",
    )


def _instance(
    path: Path, i: int, ann: Any, images: dict[int | str, SourceImage], categories: dict[int | str, str], seen: set[int]
) -> Instance:
    if not isinstance(ann, dict):
        _fail(path, f"annotations[{i}]", f"{_show(ann)} is not an object")
    aid = _key(path, f"annotations[{i}]", "id", ann.get("id"), text=False)
    if aid in seen:
        _fail(path, f"annotation {aid}", "annotation id used twice")
    seen.add(aid)  # type: ignore[arg-type]
    image_id = _key(path, f"annotation {aid}", "image_id", ann.get("image_id"))
    if image_id not in images:
        _fail(path, f"annotation {aid}", f"image_id {image_id!r} is not among the images")
    im = images[image_id]
    where = f"annotation {aid} (image {im.id})"
    cid = ann.get("category_id")
    if isinstance(cid, bool) or not isinstance(cid, int | str) or cid not in categories:
        _fail(path, where, f"category_id {_show(cid)} is not declared in 'categories' ({len(categories)} declared)")
    # annotations on the stored pixels of an EXIF-rotated file are checked against the stored size
    w, h = (im.height, im.width) if im.turn in _SWAPS else (im.width, im.height)
    bbox = _box(path, where, ann.get("bbox"), w, h)
    crowd = _crowd(path, where, ann.get("iscrowd", 0))
    seg = ann.get("segmentation")
    if isinstance(seg, list):
        _polygons(path, where, seg, w, h)
    elif isinstance(seg, dict):
        _rle(path, where, seg, h, w)
    elif seg is not None:
        _fail(path, where, f"segmentation {_show(seg, 40)} is neither polygons nor RLE")
    if im.turn is not None:
        bbox = turn_box(bbox, im.turn, w, h)  # type: ignore[assignment]
        seg = turn_segmentation(seg, im.turn, w, h) if seg else seg
    return Instance(aid, im.id, categories[cid], bbox, crowd, seg, im.height, im.width)  # type: ignore[arg-type]


# -- depth maps -----------------------------------------------------------------------------------------------------


@dataclass
class DepthSource:
    """Depth maps in metres, by image file stem; ``metric`` False for a relative-depth model's maps; ``upright``
    True for maps made from the upright pictures (a depth model's), which are never turned."""

    root: Path
    metric: bool = True
    upright: bool = False

    def find(self, file_name: str) -> Path | None:
        stem = Path(file_name).with_suffix("")
        for ext in (".png", ".npy"):
            p = self.root / f"{stem}{ext}"
            if p.is_file():
                return p
        return None

    def load(self, image: SourceImage) -> np.ndarray | None:
        """The image's depth map in metres (NaN: no measurement), or None when there is none; SourceError when
        it is not one channel of numbers of its image's size."""
        p = self.find(image.file_name)
        if p is None:
            return None
        depth = _read_npy(p) if p.suffix == ".npy" else _read_depth_png(p)
        if depth.ndim == 3 and depth.shape[-1] == 1:
            depth = depth[..., 0]
        if depth.ndim != 2:
            raise SourceError(
                f"{p}: a depth map is one channel (height x width); this one is {'x'.join(str(v) for v in depth.shape)}"
            )
        turn = None if self.upright else image.turn
        if turn is not None:
            depth = turn_map(depth, turn)
        if depth.shape != (image.height, image.width):
            raise SourceError(
                f"{p}: depth map is {depth.shape[1]}x{depth.shape[0]} but its image {image.file_name} "
                f"is {image.width}x{image.height}"
            )
        depth = np.array(depth, dtype=np.float32)
        depth[~np.isfinite(depth) | (depth <= 0)] = np.nan
        return depth


def _read_npy(p: Path) -> np.ndarray:
    try:
        with p.open("rb") as f:
            np.lib.format.read_magic(f)
    except ValueError:
        raise SourceError(f"{p}: not a .npy array file (no NUMPY header)") from None
    except OSError as e:
        raise SourceError(f"{p}: cannot be read ({e.strerror or e})") from None
    try:
        depth = np.load(p, allow_pickle=False)
    except ValueError as e:
        if "pickled" in str(e) or "allow_pickle" in str(e):
            raise SourceError(f"{p}: holds Python objects (pickled), not a numeric array; refused") from None
        raise SourceError(f"{p}: not a readable .npy array ({e})") from None
    except (OSError, EOFError) as e:
        raise SourceError(f"{p}: not a readable .npy array ({e})") from None
    if depth.dtype.kind not in "iuf":
        raise SourceError(f"{p}: holds {depth.dtype} values, not numbers")
    return depth


def _read_depth_png(p: Path) -> np.ndarray:
    try:
        with Image.open(p) as im:
            if im.mode not in ("I;16", "I;16B", "I", "I;16L"):
                raise SourceError(
                    f"{p}: a depth PNG is one channel of 16-bit millimetres; this one is mode "
                    f"{im.mode} ({len(im.getbands())} channel(s))"
                )
            return np.asarray(im, dtype=np.float32) / 1000.0
    except (OSError, Image.DecompressionBombError) as e:
        raise SourceError(f"{p}: cannot be read as an image ({e})") from None


def check_depth_root(root: Path, images: list[SourceImage]) -> None:
    """``--depth DIR`` must be a directory holding a map for at least one image (else the depth questions would
    all be dropped as "no map" and the build would say nothing was wrong)."""
    if not root.is_dir():
        raise SourceError(f"--depth {root}: no such directory")
    source = DepthSource(root)
    if images and not any(source.find(im.file_name) for im in images):
        stem = Path(images[0].file_name).with_suffix("")
        raise SourceError(
            f"--depth {root}: no depth map for any of the {len(images)} images (looked for each "
            f"image's stem with .png or .npy, e.g. {stem}.png)"
        )


# -- class folders --------------------------------------------------------------------------------------------------


@dataclass
class ClassFolders:
    """An ImageFolder root: class -> image files (sorted)."""

    root: Path
    classes: dict[str, list[Path]]


def read_class_folders(root: Path) -> ClassFolders:
    if not root.is_dir():
        raise SourceError(f"{root}: class-folder root not found")
    classes: dict[str, list[Path]] = {}
    for d in sorted(p for p in root.iterdir() if p.is_dir()):
        files = sorted(p for p in d.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        if len(files) < 2:
            raise SourceError(
                f"{d}: class {d.name!r} has {len(files)} image(s); a class needs at least 2 so that "
                "both train and test hold it (80/20 per class)"
            )
        classes[d.name.replace("_", " ")] = files
    if len(classes) < 2:
        raise SourceError(f"{root}: {len(classes)} class folder(s); a choice question needs at least 2 classes")
    return ClassFolders(root, classes)


# -- text (COCO-Text / TextOCR) -------------------------------------------------------------------------------------


@dataclass
class Word:
    id: str
    image: SourceImage
    bbox: tuple[float, float, float, float]
    text: str
    legible: bool


def read_text(path: Path, images_dir: Path) -> list[Word]:
    data = _load_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("imgs"), dict) or not isinstance(data.get("anns"), dict):
        raise SourceError(f"{path}: not a COCO-Text/TextOCR file (needs objects 'imgs' and 'anns')")
    images: dict[str, SourceImage] = {}
    for key, rec in data["imgs"].items():
        where = f"imgs[{key!r}]"
        if not isinstance(rec, dict):
            _fail(path, where, f"{_show(rec)} is not an object (file_name, width, height)")
        width, height = (_size(path, where, k, rec.get(k)) for k in ("width", "height"))
        file = _file(path, where, rec.get("file_name"), images_dir, "--images")
        im = SourceImage(str(key), rec["file_name"], file, width, height)
        im.turn = _frame(path, where, im)
        images[str(key)] = im
    return [_word(path, key, ann, images) for key, ann in data["anns"].items()]


def _word(path: Path, key: str, ann: Any, images: dict[str, SourceImage]) -> Word:
    where = f"anns[{key!r}]"
    if not isinstance(ann, dict):
        _fail(path, where, f"{_show(ann)} is not an object (image_id, bbox, utf8_string)")
    image_id = _key(path, where, "image_id", ann.get("image_id"))
    im = images.get(str(image_id))
    if im is None:
        _fail(path, where, f"image_id {image_id!r} is not in 'imgs'")
    w, h = (im.height, im.width) if im.turn in _SWAPS else (im.width, im.height)
    bbox = _box(path, where, ann.get("bbox"), w, h)
    if im.turn is not None:
        bbox = turn_box(bbox, im.turn, w, h)  # type: ignore[assignment]
    text = ann.get("utf8_string")
    if text is not None and not isinstance(text, str):
        _fail(path, where, f"utf8_string {_show(text)} is not a string")
    legibility = ann.get("legibility", "legible")
    if not isinstance(legibility, str):
        _fail(path, where, f"legibility {_show(legibility)} is not a string ('legible' or 'illegible')")
    legible = legibility == "legible" and text not in (None, "", ".")
    return Word(str(key), im, bbox, str(text or ""), legible)


# -- attributes from people -----------------------------------------------------------------------------------------


@dataclass
class Attributes:
    """Per annotation id, per attribute: the raters' values (one per rater)."""

    path: Path
    values: dict[int, dict[str, list[str]]]

    @property
    def names(self) -> list[str]:
        return sorted({a for v in self.values.values() for a in v})


def read_attributes(path: Path, known_ids: set[int] | None) -> Attributes:
    """JSON (a list of ``{"annotation_id": id, "<attr>": value or [values]}``) or CSV (``annotation_id`` and one
    column per attribute, or ``<attr>@<rater>`` per rater). Unknown annotation ids are an error naming the row."""
    values: dict[int, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for where, row in _attribute_rows(path):
        raw = row.get("annotation_id", row.get("id"))
        aid = _attribute_id(path, where, raw)
        if known_ids is not None and aid not in known_ids:
            raise SourceError(f"{path}: {where}: annotation id {aid} is not in the COCO annotations")
        for col, value in row.items():
            if col in ("annotation_id", "id") or value in (None, ""):
                continue
            name = col.split("@")[0]
            for v in value if isinstance(value, list) else [value]:
                if isinstance(v, dict | list) or (isinstance(v, float) and not math.isfinite(v)):
                    _fail(path, where, f"{col}: value {_show(v)} is not a string or a number")
                values[aid][name].append(str(v))
    return Attributes(path, {k: dict(v) for k, v in values.items()})


def _attribute_id(path: Path, where: str, raw: Any) -> int:
    if isinstance(raw, str) and raw.strip().lstrip("-").isdigit():
        return int(raw)
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    _fail(path, where, f"annotation_id {_show(raw)} is not an integer")


def _attribute_rows(path: Path) -> list[tuple[str, dict[str, Any]]]:
    if path.suffix.lower() == ".csv":
        try:
            with path.open(newline="", encoding="utf-8-sig") as f:  # -sig: a spreadsheet's byte-order mark
                reader = csv.DictReader(f)
                if not reader.fieldnames or "annotation_id" not in reader.fieldnames:
                    raise SourceError(
                        f"{path}: a CSV of attributes needs an 'annotation_id' column (header: "
                        f"{_show(reader.fieldnames)})"
                    )
                rows = []
                for i, r in enumerate(reader, 2):
                    if None in r:  # DictReader's key for the fields beyond the header's
                        raise SourceError(
                            f"{path}: row {i}: {len(reader.fieldnames) + len(r[None])} fields, but "
                            f"the header names {len(reader.fieldnames)}"
                        )
                    rows.append((f"row {i}", dict(r)))
                return rows
        except FileNotFoundError:
            raise SourceError(f"{path}: no such file") from None
        except UnicodeDecodeError as e:
            raise SourceError(f"{path}: not UTF-8 text ({e})") from None
        except csv.Error as e:
            raise SourceError(f"{path}: not a readable CSV ({e})") from None
    data = _load_json(path)
    records = data.get("annotations") if isinstance(data, dict) else data
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise SourceError(f"{path}: attributes JSON must be a list of objects (or {{'annotations': [...]}})")
    return [(f"record {i}", r) for i, r in enumerate(records)]


def majority(votes: list[str]) -> tuple[str | None, float]:
    """The majority value and the ambiguity (share of raters who disagree with it); None when tied."""
    counts: dict[str, int] = defaultdict(int)
    for v in votes:
        counts[v] += 1
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    if not ranked or (len(ranked) > 1 and ranked[0][1] == ranked[1][1]):
        return None, 1.0
    return ranked[0][0], round(1 - ranked[0][1] / len(votes), 4)
