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
    code, _, out = _run([*_coco_args(src, tmp_path / "out"), "--ava", "localization", "--tasks", "none", "--json"],
                        capsys)  # fmt: skip
    assert code == 0
    rows = {r["ability"]: r for r in json.loads(out)["summary"]}
    reasons = {r["reason"]: r for r in rows["localization"]["reasons"]}
    aid = json.loads((src / "instances.json").read_text())["annotations"][0]["id"]
    assert reasons["box of zero area"]["n"] == 1 and reasons["box of zero area"]["example"] == f"annotation {aid}"
    assert all(aid not in s.meta["origin"]["annotations"] for s in Dataset(tmp_path / "out").samples())


def test_depth_map_of_another_size(src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = src / "depth" / "scene_0002.png"
    Image.fromarray(np.full((10, 12), 1500, np.uint16)).save(bad)
    code, err, _ = _run([*_coco_args(src, tmp_path / "out"), "--depth", str(src / "depth"), "--ava", "abs_depth",
                         "--tasks", "none"], capsys)  # fmt: skip
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
    code, err, _ = _run(["--text", str(src / "text.json"), "--images", str(src / "images"), "--out",
                         str(tmp_path / "out")], capsys)  # fmt: skip
    assert code == 2 and f"{src / 'text.json'}: not valid JSON" in err


def test_cli_build_prints_the_summary_and_synth_sources_writes_them(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["data", "synth-sources", "--out", str(tmp_path / "s"), "--images", "8"])
    assert exc.value.code in (0, None)
    assert "wrote 8 scenes" in capsys.readouterr().out
    code, err, out = _run([*_coco_args(tmp_path / "s", tmp_path / "out"), "--depth", str(tmp_path / "s" / "depth"),
                           "--ava", "localization,rel_depth", "--tasks", "ta_presence"], capsys)  # fmt: skip
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
    files = {"rgb.jpg": rgb, "grey.png": rgb.convert("L"), "palette.png": rgb.convert("P"),
             "alpha.png": rgb.convert("RGBA"), "cmyk.jpg": rgb.convert("CMYK")}  # fmt: skip
    for name, image in files.items():
        image.save(tmp_path / name)
        got = load_rgb(tmp_path / name)
        with Image.open(tmp_path / name) as im:
            expected = im.convert("RGB")
        assert got.mode == "RGB" and got.size == (40, 30), name
        assert np.array_equal(np.asarray(got), np.asarray(expected)), name
