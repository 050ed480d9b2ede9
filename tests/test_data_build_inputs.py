"""`ava data build` on bad input: one line naming the file and the record, exit code 2, nothing at --out; or a
counted drop where a curation rule says drop."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from ava.cli.main import main
from ava.curate.synthetic import write_sources
from ava.data.format import Dataset


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sources")
    write_sources(root, n_images=8, seed=1)
    return root


@pytest.fixture
def src(pristine: Path, tmp_path: Path) -> Path:
    shutil.copytree(pristine, tmp_path / "src")
    return tmp_path / "src"


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(["data", "build", *args])
    captured = capsys.readouterr()
    return int(exc.value.code or 0), " ".join(captured.err.split()), captured.out


def _coco_args(src: Path, out: Path) -> list[str]:
    return ["--coco", str(src / "instances.json"), "--images", str(src / "images"), "--out", str(out)]


def _edit_coco(src: Path, edit) -> None:
    path = src / "instances.json"
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def _no_output(out: Path) -> None:
    assert not out.exists()
    assert not list(out.parent.glob(f".{out.name}.*"))  # no temporary directory left behind


def test_polygon_outside_its_image(src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def edit(data: dict) -> None:
        data["annotations"][3]["segmentation"][0][0] = 500.0

    _edit_coco(src, edit)
    code, err, _ = _run(_coco_args(src, tmp_path / "out"), capsys)
    ann = json.loads((src / "instances.json").read_text())["annotations"][3]
    assert code == 2 and "Traceback" not in err
    assert f"{src / 'instances.json'}: annotation {ann['id']} (image {ann['image_id']}): polygon reaches x" in err
    assert "outside its" in err
    _no_output(tmp_path / "out")


def test_undeclared_category(src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _edit_coco(src, lambda d: d["annotations"][0].update(category_id=77))
    code, err, _ = _run(_coco_args(src, tmp_path / "out"), capsys)
    aid = json.loads((src / "instances.json").read_text())["annotations"][0]["id"]
    assert code == 2 and f"annotation {aid} (image 1): category_id 77 is not declared in 'categories'" in err
    _no_output(tmp_path / "out")


def test_zero_area_box_is_a_counted_drop(src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def edit(data: dict) -> None:
        data["annotations"][0]["bbox"][2] = 0

    _edit_coco(src, edit)
    code, _, out = _run(
        [*_coco_args(src, tmp_path / "out"), "--ava", "localization", "--tasks", "none", "--json"], capsys
    )
    assert code == 0
    rows = {r["ability"]: r for r in json.loads(out)["summary"]}
    reasons = {r["reason"]: r for r in rows["localization"]["reasons"]}
    aid = json.loads((src / "instances.json").read_text())["annotations"][0]["id"]
    assert reasons["box of zero area"]["n"] == 1 and reasons["box of zero area"]["example"] == f"annotation {aid}"
    assert all(aid not in s.meta["origin"]["annotations"] for s in Dataset(tmp_path / "out").samples())


def test_depth_map_of_another_size(src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = src / "depth" / "scene_0002.png"
    Image.fromarray(np.full((10, 12), 1500, np.uint16)).save(bad)
    code, err, _ = _run(
        [*_coco_args(src, tmp_path / "out"), "--depth", str(src / "depth"), "--ava", "abs_depth", "--tasks", "none"],
        capsys,
    )
    assert code == 2 and f"{bad}: depth map is 12x10 but its image scene_0002.png is" in err
    _no_output(tmp_path / "out")


def test_class_folder_with_one_image(src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lonely = src / "classes" / "scene" / "beach"
    for p in sorted(lonely.iterdir())[1:]:
        p.unlink()
    code, err, _ = _run(["--classes", str(src / "classes"), "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and f"{lonely}: class 'beach' has 1 image(s); a class needs at least 2" in err
    _no_output(tmp_path / "out")


def test_attributes_naming_unknown_annotation_ids(src: Path, tmp_path: Path, capsys) -> None:
    raters = src / "raters.csv"
    lines = raters.read_text().splitlines()
    lines.insert(3, "99999," + ",".join(["no"] * (lines[0].count(","))))
    raters.write_text("\n".join(lines) + "\n")
    code, err, _ = _run([*_coco_args(src, tmp_path / "out"), "--attributes", str(raters)], capsys)
    assert code == 2 and f"{raters}: row 4: annotation id 99999 is not in the COCO annotations" in err
    _no_output(tmp_path / "out")


def test_a_failure_while_writing_leaves_the_old_dataset(src: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    code, _, _ = _run([*_coco_args(src, out), "--ava", "counting", "--tasks", "none"], capsys)
    assert code == 0
    before = sorted(p.name for p in (out / "samples").iterdir())
    (src / "images" / "scene_0003.png").write_bytes(b"not a png")  # read only when its questions are drawn
    code, err, _ = _run([*_coco_args(src, out), "--ava", "counting,recognition", "--tasks", "none", "--force"], capsys)
    assert code == 2 and "scene_0003.png: cannot be read as an image" in err
    assert sorted(p.name for p in (out / "samples").iterdir()) == before  # the earlier dataset, untouched
    assert not list(tmp_path.glob(".out.*"))


def test_refuses_an_existing_out_without_force_and_a_foreign_one_with_it(src: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    code, err, _ = _run(_coco_args(src, out), capsys)
    assert code == 2 and "exists and is not empty; pass --force" in err
    code, err, _ = _run([*_coco_args(src, out), "--force"], capsys)
    assert code == 2 and "is not an ava dataset" in err
    assert (out / "notes.txt").read_text() == "mine"


def test_an_ability_without_its_source_is_named(src: Path, tmp_path: Path, capsys) -> None:
    code, err, _ = _run([*_coco_args(src, tmp_path / "out"), "--ava", "rel_depth"], capsys)
    assert code == 2 and "rel_depth needs --depth" in err
    code, err, _ = _run([*_coco_args(src, tmp_path / "out"), "--ava", "scene"], capsys)
    assert code == 2 and "scene needs --classes scene=DIR" in err
    code, err, _ = _run([*_coco_args(src, tmp_path / "out"), "--tasks", "ta_occluded"], capsys)
    assert code == 2 and "ta_occluded needs --attributes" in err


def test_invalid_json_names_the_file(src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (src / "text.json").write_text("{ nope")
    code, err, _ = _run(
        ["--text", str(src / "text.json"), "--images", str(src / "images"), "--out", str(tmp_path / "out")], capsys
    )
    assert code == 2 and f"{src / 'text.json'}: not valid JSON" in err


def test_cli_build_prints_the_summary_and_synth_sources_writes_them(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["data", "synth-sources", "--out", str(tmp_path / "s"), "--images", "8"])
    assert exc.value.code in (0, None)
    assert "wrote 8 scenes" in capsys.readouterr().out
    code, err, out = _run(
        [
            *_coco_args(tmp_path / "s", tmp_path / "out"),
            "--depth",
            str(tmp_path / "s" / "depth"),
            "--ava",
            "localization,rel_depth",
            "--tasks",
            "ta_presence",
        ],
        capsys,
    )
    assert code == 0, err
    text = " ".join(out.split())
    assert "localization" in text and "class not unique in its image" in text and "ta_presence" in text
    assert Dataset(tmp_path / "out").abilities() == ["localization", "rel_depth", "ta_presence"]


def test_masks_from_polygons_compressed_and_uncompressed_rle_and_none() -> None:
    from pycocotools import mask as mask_utils

    from ava.curate.sources import Instance

    want = np.zeros((4, 5), dtype=bool)
    want[2:4, 0] = want[0, 1] = True
    uncompressed = {"size": [4, 5], "counts": [2, 3, 15]}  # column-major runs, as COCO's crowd regions are stored
    compressed = mask_utils.encode(np.asfortranarray(want.astype(np.uint8)))
    for seg in (uncompressed, {"size": [4, 5], "counts": compressed["counts"].decode()}):
        assert np.array_equal(Instance(1, 1, "x", (0, 0, 2, 4), True, seg, 4, 5).mask, want)
    square = [[1.0, 1.0, 3.0, 1.0, 3.0, 3.0, 1.0, 3.0]]
    assert Instance(2, 1, "x", (1, 1, 2, 2), False, square, 4, 5).mask[1:3, 1:3].all()
    assert Instance(3, 1, "x", (1, 1, 2, 2), False, [], 4, 5).mask.sum() == 4  # no mask: the box


def test_an_image_the_pixel_workers_cannot_decode_is_named(tmp_path: Path, capsys) -> None:
    """Its header reads (so the sources check passes) but its pixels are cut short: the error is raised in a
    worker of the pixel pass, while the builders that need no pixels run, and still names the file."""
    src = tmp_path / "src"
    write_sources(src, n_images=40, seed=2)
    victim = sorted((src / "images").iterdir())[36]  # beyond the first chunk: its error comes from the background
    data = victim.read_bytes()
    victim.write_bytes(data[: len(data) // 2])
    out = tmp_path / "out"
    code, err, _ = _run([*_coco_args(src, out), "--workers", "2"], capsys)
    assert code == 2 and f"{victim.name}: cannot be read as an image" in err
    _no_output(out)


def test_source_pixels_are_read_as_rgb_whatever_the_file_mode(tmp_path: Path) -> None:
    """An RGB JPEG is handed on as decoded (no copy); greyscale, palette, RGBA and CMYK files are converted to RGB
    as Pillow converts them; either way the pixels are the file's."""
    from ava.curate.sources import load_rgb

    rng = np.random.default_rng(0)
    rgb = Image.fromarray(rng.integers(0, 256, (30, 40, 3), dtype=np.uint8))
    files = {
        "rgb.jpg": rgb,
        "grey.png": rgb.convert("L"),
        "palette.png": rgb.convert("P"),
        "alpha.png": rgb.convert("RGBA"),
        "cmyk.jpg": rgb.convert("CMYK"),
    }
    for name, image in files.items():
        image.save(tmp_path / name)
        got = load_rgb(tmp_path / name)
        with Image.open(tmp_path / name) as im:
            expected = im.convert("RGB")
        assert got.mode == "RGB" and got.size == (40, 30), name
        assert np.array_equal(np.asarray(got), np.asarray(expected)), name


# -- classes of bad input in the readers: one table per class; each a one-line error naming the file, the record and
# the field, exit code 2, no traceback and nothing written at --out ---------------------------------------------------


def _rle_ann(data: dict) -> dict:
    return next(a for a in data["annotations"] if isinstance(a["segmentation"], dict))


def _edit_text(path: Path, old: str, new: str) -> None:
    """A raw edit of a JSON file (for values json.dumps cannot write: 1e999, NaN as the file has them)."""
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))


def _refused(src: Path, tmp_path: Path, capsys, args: list[str], fragments: list[str]) -> str:
    out = tmp_path / "out"
    code, err, _ = _run([*_coco_args(src, out), *args], capsys)
    assert code == 2, (code, err)
    assert "Traceback" not in err and len(err.splitlines()) <= 1, err
    for fragment in fragments:
        assert fragment in err, (fragment, err)
    _no_output(out)
    return err


TYPES = [  # a field of another type than its format says: each was a traceback
    ("annotation id a list", lambda d: d["annotations"][0].update(id=[1]), "annotations[0]: id [1] is not an integer"),
    (
        "annotation id an object",
        lambda d: d["annotations"][2].update(id={"n": 3}),
        "annotations[2]: id {'n': 3} is not an integer",
    ),
    ("image id a list", lambda d: d["images"][1].update(id=[2]), "images[1]: id [2] is not an integer or a string"),
    (
        "image_id an object",
        lambda d: d["annotations"][0].update(image_id={"id": 1}),
        "annotation 1: image_id {'id': 1} is not an integer or a string",
    ),
    ("category id a list", lambda d: d["categories"][0].update(id=[1]), "categories[0]: id [1] is not an integer"),
    (
        "category name a number",
        lambda d: d["categories"][1].update(name=7),
        "categories[1]: name 7 is not a non-empty string",
    ),
    (
        "category_id a list",
        lambda d: d["annotations"][0].update(category_id=[1]),
        "annotation 1 (image 1): category_id [1] is not declared",
    ),
    ("width a string", lambda d: d["images"][0].update(width="160"), "image 1: width '160' is not a positive integer"),
    ("file_name a number", lambda d: d["images"][0].update(file_name=5), "image 1: file_name 5 is not a non-empty"),
    (
        "bbox of strings",
        lambda d: d["annotations"][0].update(bbox=["1", "2", "3", "4"]),
        "annotation 1 (image 1): bbox ['1', '2', '3', '4'] is not [x, y, w, h] (4 numbers)",
    ),
    ("bbox of bools", lambda d: d["annotations"][0].update(bbox=[True, 1, 2, 3]), "is not [x, y, w, h]"),
    (
        "polygon of strings",
        lambda d: d["annotations"][0].update(segmentation=[["1", "2", "3", "4", "5", "6"]]),
        "annotation 1 (image 1): a polygon needs an even number (>= 6) of coordinates, numbers, got ['1', '2'",
    ),
    (
        "polygon nested",
        lambda d: d["annotations"][0].update(segmentation=[[[1, 2], [3, 4], [5, 6]]]),
        "a polygon needs an even number",
    ),
    (
        "segmentation a string",
        lambda d: d["annotations"][0].update(segmentation="mask"),
        "segmentation 'mask' is neither polygons nor RLE",
    ),
    (
        "RLE counts a number",
        lambda d: _rle_ann(d)["segmentation"].update(counts=5),
        "RLE counts 5 are neither a string nor a list of integers",
    ),
    (
        "RLE counts of floats",
        lambda d: _rle_ann(d)["segmentation"].update(counts=[1.5, 2.0]),
        "are neither a string nor a list of integers",
    ),
    (
        "RLE size of strings",
        lambda d: _rle_ann(d)["segmentation"].update(size=["120", "160"]),
        "RLE size ['120', '160'] is not the image's",
    ),
    ("annotation a string", lambda d: d["annotations"].insert(3, "oops"), "annotations[3]: 'oops' is not an object"),
    ("image a number", lambda d: d["images"].insert(0, 7), "images[0]: 7 is not an object"),
]


@pytest.mark.parametrize(("name", "edit", "fragment"), TYPES, ids=[t[0] for t in TYPES])
def test_types_in_a_coco_file_are_checked(name, edit, fragment, src: Path, tmp_path: Path, capsys) -> None:
    _edit_coco(src, edit)
    _refused(src, tmp_path, capsys, [], [f"{src / 'instances.json'}: ", fragment])


def _text_edit(src: Path, edit) -> Path:
    path = src / "text.json"
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    return path


def _raters_extra_column(src: Path) -> Path:
    raters = src / "raters.csv"
    lines = raters.read_text().splitlines()
    lines[2] += ",surplus,more"
    raters.write_text("\n".join(lines) + "\n")
    return raters


OTHER_TYPES = [  # the text and raters readers
    (
        "text annotation a string",
        lambda s: ["--text", str(_text_edit(s, lambda d: d["anns"].update({"10": "STOP"})))],
        "text.json: anns['10']: 'STOP' is not an object",
    ),
    (
        "text bbox of strings",
        lambda s: ["--text", str(_text_edit(s, lambda d: d["anns"]["10"].update(bbox=["a", 1, 2, 3])))],
        "text.json: anns['10']: bbox ['a', 1, 2, 3] is not [x, y, w, h]",
    ),
    (
        "text utf8_string a list",
        lambda s: ["--text", str(_text_edit(s, lambda d: d["anns"]["10"].update(utf8_string=["S"])))],
        "anns['10']: utf8_string ['S'] is not a string",
    ),
    (
        "text image record a list",
        lambda s: ["--text", str(_text_edit(s, lambda d: d["imgs"].update({"1": [1]})))],
        "text.json: imgs['1']: [1] is not an object",
    ),
    (
        "raters row with extra columns",
        lambda s: ["--attributes", str(_raters_extra_column(s))],
        "raters.csv: row 3: 9 fields, but the header names 7",
    ),
    (
        "raters JSON id a bool",
        lambda s: ["--attributes", str(_json_raters(s, [{"annotation_id": True, "x": "a"}]))],
        "raters.json: record 0: annotation_id True is not an integer",
    ),
    (
        "raters JSON id a fraction",
        lambda s: ["--attributes", str(_json_raters(s, [{"annotation_id": 2.5, "occluded": "no"}]))],
        "annotation_id 2.5 is not an integer",
    ),
    (
        "raters JSON value an object",
        lambda s: ["--attributes", str(_json_raters(s, [{"annotation_id": 2, "occluded": {"r1": "no"}}]))],
        "raters.json: record 0: occluded: value {'r1': 'no'} is not a string or a number",
    ),
]


def _json_raters(src: Path, records: list) -> Path:
    path = src / "raters.json"
    path.write_text(json.dumps(records))
    return path


@pytest.mark.parametrize(("name", "args", "fragment"), OTHER_TYPES, ids=[t[0] for t in OTHER_TYPES])
def test_types_in_text_and_raters_files_are_checked(name, args, fragment, src: Path, tmp_path: Path, capsys) -> None:
    _refused(src, tmp_path, capsys, args(src), [fragment])


NUMBERS = [  # numbers not finite or out of range: each was kept, counted or decoded past a mask's end
    (
        "bbox NaN",
        ("edit", lambda d: d["annotations"][0]["bbox"].__setitem__(0, float("nan"))),
        "annotation 1 (image 1): bbox [nan, ",
    ),
    (
        "bbox infinite width",
        ("edit", lambda d: d["annotations"][0]["bbox"].__setitem__(2, float("inf"))),
        "annotation 1 (image 1): bbox [",
    ),
    ("width 1e999", ("raw", '"width": 160', '"width": 1e999'), "image 1: width inf is not a positive integer"),
    ("height 0", ("edit", lambda d: d["images"][0].update(height=0)), "image 1: height 0 is not a positive integer"),
    (
        "bbox negative width",
        ("edit", lambda d: d["annotations"][0]["bbox"].__setitem__(2, -5)),
        "has a negative width or height",
    ),
    (
        "bbox outside the image",
        ("edit", lambda d: d["annotations"][0].update(bbox=[500, 10, 5, 5])),
        "bbox [500, 10, 5, 5] reaches x 500.0..505.0",
    ),
    (
        "polygon NaN",
        ("edit", lambda d: d["annotations"][0]["segmentation"][0].__setitem__(1, float("nan"))),
        "annotation 1 (image 1): polygon [",
    ),
    (
        "RLE runs short of the image",
        (
            "edit",
            lambda d: _rle_ann(d)["segmentation"].update(counts="0:"),
        ),
        "RLE runs cover 10 pixels, not the",
    ),
    (
        "RLE garbage characters",
        ("edit", lambda d: _rle_ann(d)["segmentation"].update(counts="\x7f\x7f~~")),
        "cannot be decoded (character",
    ),
    (
        "RLE negative run in a string",
        ("edit", lambda d: _rle_ann(d)["segmentation"].update(counts="0@")),
        "RLE counts hold a negative run",
    ),
    (
        "RLE negative run in a list",
        ("edit", lambda d: _rle_ann(d)["segmentation"].update(counts=[-3, 5])),
        "RLE counts hold a negative run",
    ),
    (
        "RLE list too long",
        ("edit", lambda d: _rle_ann(d)["segmentation"].update(counts=[0, 10**9])),
        "RLE runs cover 1000000000 pixels",
    ),
    ("--max-pairs -1", ("args", ["--max-pairs", "-1"]), "--max-pairs must be an integer >= 1, not -1"),
    ("--max-pairs 0", ("args", ["--max-pairs", "0"]), "--max-pairs must be an integer >= 1, not 0"),
    ("--max-per-task -3", ("args", ["--max-per-task", "-3"]), "--max-per-task must be an integer >= 1, not -3"),
    ("--options 1", ("args", ["--options", "1"]), "--options must be an integer >= 2, not 1"),
]


@pytest.mark.parametrize(("name", "change", "fragment"), NUMBERS, ids=[t[0] for t in NUMBERS])
def test_numbers_must_be_finite_and_in_range(name, change, fragment, src: Path, tmp_path: Path, capsys) -> None:
    kind, *rest = change
    args: list[str] = []
    if kind == "raw":
        _edit_text(src / "instances.json", *rest)
    elif kind == "edit":
        _edit_coco(src, rest[0])
    else:
        args = rest[0]
    _refused(src, tmp_path, capsys, args, [fragment])


def test_inf_and_nan_are_named_as_such(src: Path, tmp_path: Path, capsys) -> None:
    _edit_coco(src, lambda d: d["annotations"][0]["bbox"].__setitem__(2, float("inf")))
    _refused(src, tmp_path, capsys, [], ["annotation 1 (image 1): bbox [", "inf", "holds a value that is not finite"])


def _outside_file(src: Path) -> Path:
    secret = src.parent / "outside" / "secret.png"
    secret.parent.mkdir(exist_ok=True)
    shutil.copy(src / "images" / "scene_0000.png", secret)
    return secret


PATHS = [  # a path in an annotation file that leaves its root is refused, whether or not the file is there
    ("climbs out", lambda s: "../outside/secret.png"),
    ("climbs out through a folder", lambda s: "sub/../../outside/secret.png"),
    ("absolute", lambda s: str(_outside_file(s))),
]


@pytest.mark.parametrize(("name", "file_name"), PATHS, ids=[p[0] for p in PATHS])
def test_paths_outside_images_are_refused(name, file_name, src: Path, tmp_path: Path, capsys) -> None:
    _outside_file(src)
    bad = file_name(src)
    _edit_coco(src, lambda d: d["images"][0].update(file_name=bad))
    _refused(src, tmp_path, capsys, [], [f"image 1: file_name {bad!r} is not inside --images", "refused"])
    text = _text_edit(src, lambda d: d["imgs"]["1"].update(file_name=bad))
    code, err, _ = _run(["--text", str(text), "--images", str(src / "images"), "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and f"text.json: imgs['1']: file_name {bad!r} is not inside --images" in err, err
    _no_output(tmp_path / "out")


def test_a_path_that_stays_inside_is_read(src: Path, tmp_path: Path, capsys) -> None:
    (src / "images" / "sub").mkdir()
    _edit_coco(src, lambda d: d["images"][0].update(file_name="sub/../scene_0000.png"))
    code, err, _ = _run([*_coco_args(src, tmp_path / "out"), "--ava", "counting", "--tasks", "none"], capsys)
    assert code == 0, err


def test_a_category_id_declared_twice_is_refused(src: Path, tmp_path: Path, capsys) -> None:
    _edit_coco(src, lambda d: d["categories"].append({"id": 1, "name": "wheel"}))
    _refused(
        src,
        tmp_path,
        capsys,
        [],
        ["instances.json: categories[5]: category id 1 is declared twice ('disk', then 'wheel')"],
    )


CROWD = [
    ("no", False),
    ("yes", False),
    (2, False),
    (None, False),
    ([1], False),
    (0, True),
    (1, True),
    (True, True),
    (False, True),
]


@pytest.mark.parametrize(("value", "ok"), CROWD, ids=[repr(c[0]) for c in CROWD])
def test_iscrowd_is_0_or_1(value, ok: bool, src: Path, tmp_path: Path, capsys) -> None:
    _edit_coco(src, lambda d: d["annotations"][0].update(iscrowd=value))
    if ok:
        code, err, _ = _run([*_coco_args(src, tmp_path / "out"), "--ava", "counting", "--tasks", "none"], capsys)
        assert code == 0, err
    else:
        _refused(src, tmp_path, capsys, [], [f"annotation 1 (image 1): iscrowd {value!r} is not 0 or 1"])


def _npy(src: Path, array: np.ndarray, **kw) -> None:
    (src / "depth" / "scene_0002.png").unlink()
    np.save(src / "depth" / "scene_0002.npy", array, **kw)


def _garbage_npy(src: Path) -> None:
    (src / "depth" / "scene_0002.png").unlink()
    (src / "depth" / "scene_0002.npy").write_bytes(b"this is no array\n" * 4)


def _rgb_png(src: Path) -> None:
    Image.new("RGB", (160, 120), (1, 2, 3)).save(src / "depth" / "scene_0002.png")


MISLEADING = [  # each said something untrue, or nothing, before
    (
        "3-channel .npy",
        lambda s: _npy(s, np.ones((144, 144, 3), np.float32)),
        "scene_0002.npy: a depth map is one channel (height x width); this one is 144x144x3",
    ),
    (
        "RGB depth PNG",
        _rgb_png,
        "scene_0002.png: a depth PNG is one channel of 16-bit millimetres; this one is mode RGB (3 channel(s))",
    ),
    ("garbage .npy", _garbage_npy, "scene_0002.npy: not a .npy array file (no NUMPY header)"),
    (
        "pickled .npy",
        lambda s: _npy(s, np.array([{"depth": 1}], dtype=object), allow_pickle=True),
        "scene_0002.npy: holds Python objects (pickled), not a numeric array; refused",
    ),
    ("text .npy", lambda s: _npy(s, np.array(["far", "near"])), "scene_0002.npy: holds <U4 values, not numbers"),
]


@pytest.mark.parametrize(("name", "make", "fragment"), MISLEADING, ids=[m[0] for m in MISLEADING])
def test_bad_depth_maps_are_named_for_what_they_are(name, make, fragment, src: Path, tmp_path: Path, capsys) -> None:
    make(src)
    _refused(
        src, tmp_path, capsys, ["--depth", str(src / "depth"), "--ava", "abs_depth", "--tasks", "none"], [fragment]
    )


def test_a_depth_directory_that_is_missing_or_holds_no_map_is_refused(src: Path, tmp_path: Path, capsys) -> None:
    nowhere = src / "nowhere"
    _refused(src, tmp_path, capsys, ["--depth", str(nowhere)], [f"--depth {nowhere}: no such directory"])
    (src / "empty").mkdir()
    (src / "empty" / "other.png").write_bytes(b"")
    _refused(
        src,
        tmp_path,
        capsys,
        ["--depth", str(src / "empty")],
        [f"--depth {src / 'empty'}: no depth map for any of the 8 images", "e.g. scene_0000.png"],
    )


def test_a_raters_csv_with_a_spreadsheets_byte_order_mark_is_read(src: Path, tmp_path: Path, capsys) -> None:
    raters = src / "raters.csv"
    raters.write_bytes(b"\xef\xbb\xbf" + raters.read_bytes())
    code, err, out = _run(
        [
            *_coco_args(src, tmp_path / "out"),
            "--attributes",
            str(raters),
            "--ava",
            "counting",
            "--tasks",
            "ta_occluded",
            "--json",
        ],
        capsys,
    )
    assert code == 0, err
    assert Dataset(tmp_path / "out").samples("ta_occluded")


def test_images_that_is_not_a_directory_is_named(src: Path, tmp_path: Path, capsys) -> None:
    code, err, _ = _run(
        ["--coco", str(src / "instances.json"), "--images", str(src / "nope"), "--out", str(tmp_path / "out")], capsys
    )
    assert code == 2 and f"--images {src / 'nope'}: no such directory" in err


def test_rle_runs_decode_as_pycocotools_encodes() -> None:
    """The check of a compressed RLE reads its runs as pycocotools does: for random masks (empty ones too), the runs
    of the string pycocotools writes are the mask's column-major runs, starting with the zeros."""
    from pycocotools import mask as mask_utils

    from ava.curate.sources import rle_runs

    rng = np.random.default_rng(0)
    for trial in range(60):
        h, w = (int(v) for v in rng.integers(1, 50, 2))
        m = (rng.random((h, w)) < rng.random()).astype(np.uint8) * (trial % 4 != 0)
        counts = mask_utils.encode(np.asfortranarray(m))["counts"].decode()
        flat = m.ravel(order="F")
        change = np.flatnonzero(np.diff(flat)) + 1
        edges = np.concatenate([[0], change, [flat.size]])
        runs = np.diff(edges).tolist()
        if flat[0] == 1:
            runs = [0, *runs]
        assert rle_runs(counts).tolist() == runs, trial
