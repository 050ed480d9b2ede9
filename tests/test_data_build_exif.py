"""EXIF orientation in `ava data build`: pixels are turned upright as every viewer shows them, and annotations drawn
on the stored pixels are turned with them (boxes, polygons, RLE masks, depth maps); a build from a copy stored on
its side with the tag asks the same questions, with the same answers, as the build from the upright file."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageOps

from ava.curate import BuildConfig, build_dataset
from ava.curate.sources import UPRIGHT, DepthSource, load_rgb, read_coco
from ava.data.format import Dataset

W, H = 60, 40  # the upright picture: wider than high, so a quarter turn changes the size

# the transpose that undoes each one (turning an upright picture into what a file with that tag stores)
INVERSE = {Image.Transpose.ROTATE_90: Image.Transpose.ROTATE_270, Image.Transpose.ROTATE_270: Image.Transpose.ROTATE_90}


def _stored(upright: Image.Image, orientation: int) -> Image.Image:
    turn = UPRIGHT[orientation]
    return upright.transpose(INVERSE.get(turn, turn))


def _save_tagged(image: Image.Image, path: Path, orientation: int) -> None:
    exif = Image.Exif()
    exif[0x0112] = orientation
    image.save(path, exif=exif.tobytes())


@pytest.mark.parametrize("orientation", range(2, 9))
def test_pixels_are_turned_as_exif_transpose_turns_them(orientation: int, tmp_path: Path) -> None:
    rng = np.random.default_rng(orientation)
    upright = Image.fromarray(rng.integers(0, 256, (H, W, 3), dtype=np.uint8))
    path = tmp_path / "a.png"
    _save_tagged(_stored(upright, orientation), path, orientation)
    with Image.open(path) as im:
        expected = np.asarray(ImageOps.exif_transpose(im).convert("RGB"))
    got = np.asarray(load_rgb(path))
    assert np.array_equal(got, expected) and np.array_equal(got, np.asarray(upright))


def _rect_mask(box: tuple[int, int, int, int], size: tuple[int, int]) -> Image.Image:
    mask = Image.new("L", size, 0)
    mask.paste(255, box)
    return mask


def _annotation(aid: int, mask: Image.Image, polygon: bool) -> dict:
    """A COCO annotation of ``mask`` (a rectangle): as a polygon of its corners, or as compressed RLE."""
    from pycocotools import mask as mask_utils

    a = np.asarray(mask) > 0
    ys, xs = np.nonzero(a)
    x0, y0, x1, y1 = int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1
    if polygon:
        seg: object = [[x0, y0, x1, y0, x1, y1, x0, y1]]
    else:
        rle = mask_utils.encode(np.asfortranarray(a.astype(np.uint8)))
        seg = {"size": [int(v) for v in rle["size"]], "counts": rle["counts"].decode()}
    return {
        "id": aid,
        "image_id": 1,
        "category_id": 1,
        "iscrowd": 0,
        "bbox": [x0, y0, x1 - x0, y1 - y0],
        "segmentation": seg,
    }


BOXES = [((5, 3, 20, 15), True), ((30, 10, 55, 38), False), ((0, 20, 12, 40), True)]  # upright (x0, y0, x1, y1)


# orientations 5-8 turn a quarter: only then do the two frames differ in size (without, annotations are upright)
FRAMES = [(o, "upright") for o in range(2, 9)] + [(o, "stored") for o in range(5, 9)]


@pytest.mark.parametrize(("orientation", "frame"), FRAMES)
def test_annotations_are_read_in_the_upright_picture(orientation: int, frame: str, tmp_path: Path) -> None:
    """Annotations given in the upright frame are read as they are; annotations given on the stored pixels (the
    file's own size, which differs from the upright one after a quarter turn) are turned with them. Either way
    each mask and box is the one drawn on the upright picture."""
    (tmp_path / "images").mkdir()
    _save_tagged(
        _stored(Image.new("RGB", (W, H), (90, 90, 90)), orientation), tmp_path / "images" / "a.png", orientation
    )
    masks = [_rect_mask(box, (W, H)) for box, _ in BOXES]
    if frame == "stored":
        masks_given = [_stored(m, orientation) for m in masks]
        size = masks_given[0].size
    else:
        masks_given, size = masks, (W, H)
    anns = [_annotation(i + 1, m, poly) for i, (m, (_, poly)) in enumerate(zip(masks_given, BOXES, strict=True))]
    coco = {
        "images": [{"id": 1, "file_name": "a.png", "width": size[0], "height": size[1]}],
        "categories": [{"id": 1, "name": "thing"}],
        "annotations": anns,
    }
    (tmp_path / "ann.json").write_text(json.dumps(coco))
    source = read_coco(tmp_path / "ann.json", tmp_path / "images")
    im = source.images[1]
    assert (im.width, im.height) == (W, H)
    for inst, mask, (box, _) in zip(im.instances, masks, BOXES, strict=True):
        assert np.array_equal(inst.mask, np.asarray(mask) > 0), (orientation, frame, inst.id)
        assert inst.xyxy == pytest.approx(box), (orientation, frame, inst.id)
    assert source.exif == {f"annotations {'on the stored pixels' if frame == 'stored' else 'upright'}": 1}
    # a depth map drawn on the stored pixels turns with them; a depth model's (made from the upright picture) not
    depth = np.arange(W * H, dtype=np.float32).reshape(H, W) + 1
    given = np.asarray(_stored(Image.fromarray(depth), orientation)) if frame == "stored" else depth
    (tmp_path / "depth").mkdir()
    np.save(tmp_path / "depth" / "a.npy", given)
    assert np.array_equal(DepthSource(tmp_path / "depth").load(im), depth)
    if frame == "stored":
        with pytest.raises(Exception, match="depth map is"):
            DepthSource(tmp_path / "depth", upright=True).load(im)


def test_a_size_neither_frame_has_is_named_with_the_upright_size(tmp_path: Path) -> None:
    (tmp_path / "images").mkdir()
    _save_tagged(Image.new("RGB", (H, W)), tmp_path / "images" / "a.png", 6)
    coco = {"images": [{"id": 1, "file_name": "a.png", "width": 50, "height": 50}], "annotations": [], "categories": []}
    (tmp_path / "ann.json").write_text(json.dumps(coco))
    with pytest.raises(
        Exception,
        match=r"a.png is 40x60 \(upright by its EXIF orientation: 60x40\) but the "
        r"annotations say 50x50",
    ):
        read_coco(tmp_path / "ann.json", tmp_path / "images")


def _stored_frame(path: Path, file_name: str) -> None:
    """Rewrite the annotations of ``file_name`` into its stored pixels' frame (orientation 6: the file holds the
    upright picture turned a quarter counter-clockwise), declared with the stored size."""
    from ava.curate.sources import turn_box, turn_segmentation

    coco = json.loads(path.read_text())
    image = next(im for im in coco["images"] if im["file_name"] == file_name)
    w, h = image["width"], image["height"]
    back = Image.Transpose.ROTATE_90  # undoes orientation 6's ROTATE_270
    for a in coco["annotations"]:
        if a["image_id"] == image["id"]:
            a["bbox"] = list(turn_box(tuple(a["bbox"]), back, w, h))
            a["segmentation"] = turn_segmentation(a["segmentation"], back, w, h)
    image["width"], image["height"] = h, w
    path.write_text(json.dumps(coco))


@pytest.mark.slow
def test_a_photo_stored_on_its_side_builds_the_upright_answers(tmp_path: Path) -> None:
    """Real-style photos (ava.curate.photos): the same scenes written upright, and with one photo stored on its
    side carrying EXIF orientation 6, its annotations given upright or on the stored pixels. Every question about
    that photo is asked in the three builds, with the same answer, and its marks land on the same pixels."""
    from ava.curate.photos import ROTATED, write_photo_sources

    n = ROTATED + 1
    write_photo_sources(tmp_path / "upright", n_images=n, rotated=None)
    write_photo_sources(tmp_path / "side", n_images=n)
    write_photo_sources(tmp_path / "side_stored", n_images=n)
    name = f"photo_{ROTATED:04d}.jpg"
    with Image.open(tmp_path / "side" / "images" / name) as im:
        assert im.getexif().get(0x0112) == 6 and im.size == (480, 640)  # stored on its side
    _stored_frame(tmp_path / "side_stored" / "instances.json", name)
    abilities = ["localization", "recognition", "counting", "spatial"]
    tasks = ["ta_larger", "ta_further_left", "ta_further_down", "ta_touching", "ta_truncated", "ta_another_left"]
    built = {}
    for which in ("upright", "side", "side_stored"):
        src = tmp_path / which
        build_dataset(
            BuildConfig(
                out=tmp_path / f"out_{which}",
                coco=src / "instances.json",
                images=src / "images",
                ava=abilities,
                tasks=tasks,
                max_pairs=100,
            )
        )
        ds = Dataset(tmp_path / f"out_{which}")
        built[which] = (ds, {(s.ava, s.id): s for s in ds.samples() if s.meta["origin"]["file"] == name})
    ref_ds, ref = built["upright"]
    assert len({ava for ava, _ in ref}) >= 6, sorted(ref)
    for which in ("side", "side_stored"):
        ds, got = built[which]
        assert set(got) == set(ref), which
        for key, s in ref.items():
            assert (got[key].answer, got[key].truth, got[key].width, got[key].height) == (
                s.answer,
                s.truth,
                s.width,
                s.height,
            ), (which, key)
            a = np.asarray(ref_ds.load_image(s), np.float32)
            b = np.asarray(ds.load_image(got[key]), np.float32)
            assert np.abs(a - b).mean() < 3, (which, key)  # the same picture and marks (two JPEG encodings apart)


def test_the_real_style_photos_are_real_pixels_with_exact_masks(tmp_path: Path) -> None:
    """What the docs' "Real photos" section builds from: several objects per JPEG, every class of the file used,
    masks as polygons or RLE that pycocotools reads back to the pixels the objects show."""
    from ava.curate.photos import PIECES, write_photo_sources

    written = write_photo_sources(tmp_path, n_images=3, seed=1, rotated=1)
    coco = json.loads((tmp_path / "instances.json").read_text())
    assert [c["name"] for c in coco["categories"]] == list(PIECES)
    assert all(len(r["instances"]) >= 2 for r in written["images"][1:])
    source = read_coco(tmp_path / "instances.json", tmp_path / "images")
    assert source.exif == {"annotations upright": 1}
    with Image.open(tmp_path / "images" / "photo_0001.jpg") as im:
        assert im.format == "JPEG" and im.getexif().get(0x0112) == 6
    buf = io.BytesIO()
    load_rgb(tmp_path / "images" / "photo_0001.jpg").save(buf, format="PNG")
    assert Image.open(buf).size == (640, 480)
    for im in source.images.values():
        for a in im.instances:
            assert a.mask.sum() == pytest.approx(a.mask_area) and a.mask_area >= 30
