"""Readers of the annotation formats users already have; each checks its input and names the file and record at fault.

- COCO-style instances (``instances_*.json``; LVIS and Objects365 share the layout): boxes, polygons or RLE masks,
  categories. Masks are decoded with pycocotools.
- Depth maps, one per image, found by the image's file stem: 16-bit PNG in millimetres or ``.npy`` in metres;
  0 (or a non-finite value) means no measurement.
- Class folders (torchvision ImageFolder layout ``ROOT/<class>/<image>``), one root per ability.
- Text annotations (COCO-Text / TextOCR layout: ``imgs`` and ``anns`` with ``bbox`` and ``utf8_string``).
- Per-instance attributes from people (JSON or CSV keyed by annotation id; several raters as several values).

A record that is malformed (a polygon outside its image, an undeclared category, a depth map of another size than
its image, a class with one image, an attribute for an annotation that does not exist) raises
:class:`SourceError`; a record that is well-formed but that a curation rule does not keep (a zero-area box) is
dropped and counted by the builder.
"""

from __future__ import annotations

import csv
import hashlib
import json
from collections import defaultdict
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from ava.errors import AvaError

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")
POLYGON_SLACK = 1.0  # px: COCO polygons may touch the far edge (x = width); beyond this they leave the image


class SourceError(AvaError, ValueError):
    """A source file or one of its records is not as its format requires; the message names both."""


def sha256_file(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SourceError(f"{path}: no such file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise SourceError(f"{path}: not valid JSON ({e})") from e


def load_rgb(path: Path) -> Image.Image:
    """An image file's pixels as RGB, as stored (EXIF orientation not applied: COCO-style annotations are drawn on
    the stored pixels); SourceError naming the file when it cannot be read."""
    try:
        with Image.open(path) as im:
            im.load()
            # convert() of an RGB image copies it, which took as long as decoding the JPEG did
            return im if im.mode == "RGB" else im.convert("RGB")
    except FileNotFoundError:
        raise SourceError(f"{path}: image file not found") from None
    except (OSError, Image.DecompressionBombError) as e:
        raise SourceError(f"{path}: cannot be read as an image ({e})") from e


# -- COCO instances -------------------------------------------------------------------------------------------------


@dataclass
class Instance:
    """One instance annotation: its box (x, y, w, h in pixels) and, lazily, its mask."""

    id: int
    image_id: int
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
            out[max(0, y1):y2, max(0, x1):x2] = True
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
    id: int | str
    file_name: str
    path: Path
    width: int
    height: int
    instances: list[Instance] = field(default_factory=list)


@dataclass
class CocoSource:
    """A COCO-style instances file: images, categories (id -> name) and instances per image."""

    path: Path
    images: dict[int, SourceImage]
    categories: dict[int, str]
    n_annotations: int
    synthetic: bool = False  # written by ``ava data synth-sources`` (its ``info`` says so)

    @property
    def class_names(self) -> list[str]:
        return sorted(set(self.categories.values()))

    def instance(self, ann_id: int) -> Instance | None:
        return self._by_id.get(ann_id)

    @cached_property
    def _by_id(self) -> dict[int, Instance]:
        return {a.id: a for im in self.images.values() for a in im.instances}


def _check_polygon(path: Path, ann: dict, seg: list, w: int, h: int) -> None:
    for poly in seg:
        if not isinstance(poly, list) or len(poly) < 6 or len(poly) % 2:
            raise SourceError(f"{path}: annotation {ann.get('id')}: a polygon needs an even number (>= 6) of "
                              f"coordinates, got {poly!r:.60}")  # fmt: skip
        xs, ys = np.asarray(poly[0::2], float), np.asarray(poly[1::2], float)
        if (xs.min() < -POLYGON_SLACK or ys.min() < -POLYGON_SLACK or xs.max() > w + POLYGON_SLACK
                or ys.max() > h + POLYGON_SLACK):  # fmt: skip
            raise SourceError(
                f"{path}: annotation {ann.get('id')} (image {ann.get('image_id')}): polygon reaches "
                f"x {xs.min():.1f}..{xs.max():.1f}, y {ys.min():.1f}..{ys.max():.1f}, outside its {w}x{h} image"
            )


def read_coco(path: Path, images_dir: Path) -> CocoSource:
    """Read and check a COCO-style instances file; images are looked up under ``images_dir`` by ``file_name``."""
    data = _load_json(path)
    if not isinstance(data, dict) or not all(isinstance(data.get(k), list) for k in ("images", "annotations")):
        raise SourceError(f"{path}: not a COCO instances file (needs lists 'images' and 'annotations')")
    categories: dict[int, str] = {}
    for c in data.get("categories") or []:
        if not isinstance(c, dict) or "id" not in c or not isinstance(c.get("name"), str):
            raise SourceError(f"{path}: category {c!r:.60} needs an 'id' and a 'name'")
        categories[c["id"]] = c["name"]
    images: dict[int, SourceImage] = {}
    for rec in data["images"]:
        try:
            im = SourceImage(rec["id"], rec["file_name"], images_dir / rec["file_name"], int(rec["width"]),
                             int(rec["height"]))  # fmt: skip
        except (KeyError, TypeError, ValueError) as e:
            raise SourceError(f"{path}: image record {rec!r:.80} needs id, file_name, width, height ({e})") from e
        if im.id in images:
            raise SourceError(f"{path}: image id {im.id} is declared twice")
        if not im.path.is_file():
            raise SourceError(f"{path}: image {im.id}: file {im.path} not found (under --images {images_dir})")
        _check_size(path, f"image {im.id}", im)
        images[im.id] = im
    seen: set[int] = set()
    for ann in data["annotations"]:
        images[_image_of(path, ann, images)].instances.append(_instance(path, ann, images, categories, seen))
    info = data.get("info") if isinstance(data.get("info"), dict) else {}
    return CocoSource(path, images, categories, len(data["annotations"]), bool(info.get("ava_synthetic")))


def _check_size(path: Path, record: str, im: SourceImage) -> None:
    """The file's pixel size must be the one the annotations were drawn for (only the header is read)."""
    try:
        with Image.open(im.path) as f:
            size = f.size
    except (OSError, Image.DecompressionBombError) as e:
        raise SourceError(f"{im.path}: cannot be read as an image ({e})") from e
    if size != (im.width, im.height):
        raise SourceError(f"{path}: {record}: {im.file_name} is {size[0]}x{size[1]} but the annotations say "
                          f"{im.width}x{im.height}")  # fmt: skip


def _image_of(path: Path, ann: dict, images: dict[int, SourceImage]) -> int:
    if not isinstance(ann, dict):
        raise SourceError(f"{path}: annotation {ann!r:.40} is not an object")
    if ann.get("image_id") not in images:
        raise SourceError(f"{path}: annotation {ann.get('id')}: image_id {ann.get('image_id')!r} is not among the "
                          "images")  # fmt: skip
    return ann["image_id"]


def _instance(path: Path, ann: dict, images: dict[int, SourceImage], categories: dict[int, str],
              seen: set[int]) -> Instance:  # fmt: skip
    aid, im = ann.get("id"), images[ann["image_id"]]
    if not isinstance(aid, int) or aid in seen:
        raise SourceError(f"{path}: annotation id {aid!r} is missing, not an integer or used twice")
    seen.add(aid)
    if ann.get("category_id") not in categories:
        raise SourceError(f"{path}: annotation {aid} (image {im.id}): category_id {ann.get('category_id')!r} is not "
                          f"declared in 'categories' ({len(categories)} declared)")  # fmt: skip
    bbox = ann.get("bbox")
    if not isinstance(bbox, list) or len(bbox) != 4 or not all(isinstance(v, int | float) for v in bbox):
        raise SourceError(f"{path}: annotation {aid} (image {im.id}): bbox {bbox!r:.60} is not [x, y, w, h]")
    seg = ann.get("segmentation")
    if isinstance(seg, list):
        _check_polygon(path, ann, seg, im.width, im.height)
    elif isinstance(seg, dict):
        size = seg.get("size")
        if size != [im.height, im.width]:
            raise SourceError(f"{path}: annotation {aid} (image {im.id}): RLE size {size} is not the image's "
                              f"[{im.height}, {im.width}]")  # fmt: skip
    elif seg is not None:
        raise SourceError(f"{path}: annotation {aid}: segmentation is neither polygons nor RLE")
    return Instance(aid, im.id, categories[ann["category_id"]], tuple(float(v) for v in bbox),  # type: ignore[arg-type]
                    bool(ann.get("iscrowd", 0)), seg, im.height, im.width)  # fmt: skip


# -- depth maps -----------------------------------------------------------------------------------------------------


@dataclass
class DepthSource:
    """Depth maps in metres, by image file stem; ``metric`` False for a relative-depth model's maps."""

    root: Path
    metric: bool = True

    def find(self, file_name: str) -> Path | None:
        stem = Path(file_name).with_suffix("")
        for ext in (".png", ".npy"):
            p = self.root / f"{stem}{ext}"
            if p.is_file():
                return p
        return None

    def load(self, image: SourceImage) -> np.ndarray | None:
        """The image's depth map in metres (NaN: no measurement), or None when there is none; SourceError when
        it is of another size than its image."""
        p = self.find(image.file_name)
        if p is None:
            return None
        if p.suffix == ".npy":
            depth = np.load(p, allow_pickle=False).astype(np.float32)
        else:
            with Image.open(p) as im:
                if im.mode not in ("I;16", "I;16B", "I", "I;16L"):
                    raise SourceError(f"{p}: depth PNG must be 16-bit (millimetres), got mode {im.mode}")
                depth = np.asarray(im, dtype=np.float32) / 1000.0
        if depth.ndim == 3 and depth.shape[-1] == 1:
            depth = depth[..., 0]
        if depth.shape != (image.height, image.width):
            raise SourceError(f"{p}: depth map is {depth.shape[1] if depth.ndim > 1 else '?'}x{depth.shape[0]} but "
                              f"its image {image.file_name} is {image.width}x{image.height}")  # fmt: skip
        depth[~np.isfinite(depth) | (depth <= 0)] = np.nan
        return depth


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
            raise SourceError(f"{d}: class {d.name!r} has {len(files)} image(s); a class needs at least 2 so that "
                              "both train and test hold it (80/20 per class)")  # fmt: skip
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
        try:
            im = SourceImage(str(key), rec["file_name"], images_dir / rec["file_name"], int(rec["width"]),
                             int(rec["height"]))  # fmt: skip
        except (KeyError, TypeError, ValueError) as e:
            raise SourceError(f"{path}: imgs[{key!r}] needs file_name, width, height ({e})") from e
        if not im.path.is_file():
            raise SourceError(f"{path}: imgs[{key!r}]: file {im.path} not found (under --images {images_dir})")
        _check_size(path, f"imgs[{key!r}]", im)
        images[str(key)] = im
    words = []
    for key, ann in data["anns"].items():
        im = images.get(str(ann.get("image_id")))
        if im is None:
            raise SourceError(f"{path}: anns[{key!r}]: image_id {ann.get('image_id')!r} is not in 'imgs'")
        bbox = ann.get("bbox")
        if not isinstance(bbox, list) or len(bbox) != 4:
            raise SourceError(f"{path}: anns[{key!r}]: bbox {bbox!r:.60} is not [x, y, w, h]")
        text = ann.get("utf8_string")
        legible = ann.get("legibility", "legible") == "legible" and text not in (None, "", ".")
        words.append(Word(str(key), im, tuple(float(v) for v in bbox), str(text or ""), legible))  # type: ignore[arg-type]
    return words


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
    rows = _attribute_rows(path)
    for where, row in rows:
        raw = row.get("annotation_id", row.get("id"))
        try:
            aid = int(raw)
        except (TypeError, ValueError):
            raise SourceError(f"{path}: {where}: annotation_id {raw!r} is not an integer") from None
        if known_ids is not None and aid not in known_ids:
            raise SourceError(f"{path}: {where}: annotation id {aid} is not in the COCO annotations")
        for col, value in row.items():
            if col in ("annotation_id", "id") or value in (None, ""):
                continue
            name = col.split("@")[0]
            values[aid][name].extend(str(v) for v in (value if isinstance(value, list) else [value]))
    return Attributes(path, {k: dict(v) for k, v in values.items()})


def _attribute_rows(path: Path) -> list[tuple[str, dict[str, Any]]]:
    if path.suffix.lower() == ".csv":
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            if not reader.fieldnames or "annotation_id" not in reader.fieldnames:
                raise SourceError(f"{path}: a CSV of attributes needs an 'annotation_id' column")
            return [(f"row {i}", dict(r)) for i, r in enumerate(reader, 2)]
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
