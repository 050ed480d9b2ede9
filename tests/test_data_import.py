"""`ava data import`: the release's parquet layout, LLaVA JSON and the eval question format."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from PIL import Image
from typer.testing import CliRunner

from ava.cli.main import app
from ava.data.format import Dataset
from ava.data.importers import import_dataset
from ava.errors import AvaError
from tests.helpers import conv, image_kinds, write_release

runner = CliRunner()


@pytest.fixture(scope="module")
def imported(release: tuple[Path, dict], tmp_path_factory: pytest.TempPathFactory):
    root, _ = release
    out = tmp_path_factory.mktemp("ds") / "ds"
    result = runner.invoke(app, ["data", "import", str(root), "--out", str(out), "--quiet"])
    return out, result


def test_cli_import_counts_and_exit_code(imported) -> None:
    out, result = imported
    assert result.exit_code == 1, result.output
    ds = Dataset(out)
    counts = {ava: len(ds.samples(ava)) for ava in ds.abilities()}
    # counting: 12 image kinds + shared - corrupt - malformed = 12
    assert counts == {"localization": 2, "counting": 12, "abs_depth": 4, "ocr": 1, "orientation": 6, "color": 1}
    assert ds.info["source"]["format"] == "hf"
    assert ds.split_info is None  # no split column: unsplit until `ava data split`


def test_skipped_rows_reported_with_id_and_file(imported) -> None:
    out, result = imported
    errors = [json.loads(line) for line in (out / "import_errors.jsonl").read_text().splitlines()]
    by_id = {e["id"]: e for e in errors}
    assert set(by_id) == {"cnt/corrupt", "cnt/malformed", "b0", "col_bad"}
    assert "cannot decode image" in by_id["cnt/corrupt"]["reason"]
    assert "malformed conversations" in by_id["cnt/malformed"]["reason"]
    assert "unknown config" in by_id["b0"]["reason"]
    assert "cannot parse the rgb answer 'reddish'" in by_id["col_bad"]["reason"]
    assert by_id["cnt/corrupt"]["file"].endswith("Counting/train-00000-of-00001.parquet")
    assert "cnt/corrupt" in result.output  # printed too (stderr is mixed into output)


def test_meta_truth_and_dedup(imported) -> None:
    out, _ = imported
    ds = Dataset(out)
    cnt = {s.id: s for s in ds.samples("counting")}
    assert cnt["cnt/jpeg"].meta["source"] == "src-counting"
    assert cnt["cnt/jpeg"].meta["difficulty"] == 0
    assert cnt["cnt/jpeg"].meta["class"] == "apples"
    assert cnt["cnt/shared"].truth == {"value": 7}
    assert cnt["cnt/shared"].image == cnt["cnt/jpeg"].image  # identical bytes stored once
    files = {str(p.relative_to(out / "images")) for p in (out / "images").rglob("*.*")}
    assert files == {s.image for s in ds.samples()}  # no orphans: skipped rows store no image
    assert len(files) < len(ds.samples())


def test_images_normalized_to_rgb(imported) -> None:
    out, _ = imported
    ds = Dataset(out)
    kinds = image_kinds()
    cnt = {s.id: s for s in ds.samples("counting")}
    for s in ds.samples():
        with Image.open(ds.image_path(s)) as im:
            assert im.mode == "RGB", s.id
            assert im.size == (s.width, s.height), s.id
    jpeg = cnt["cnt/jpeg"]
    assert jpeg.image.endswith(".jpg") and jpeg.image_sha256 == hashlib.sha256(kinds["jpeg"]).hexdigest()
    assert (cnt["cnt/exif_rotated"].width, cnt["cnt/exif_rotated"].height) == (20, 40)  # stored 40x20, EXIF 6
    assert ds.load_image(cnt["cnt/rgba"]).getpixel((0, 0)) == (255, 255, 255)  # transparent -> white
    assert ds.load_image(cnt["cnt/rgba"]).getpixel((1, 1)) == (200, 10, 10)
    assert ds.load_image(cnt["cnt/la"]).getpixel((0, 0)) == (255, 255, 255)
    assert ds.load_image(cnt["cnt/palette_alpha"]).getpixel((0, 0)) == (255, 255, 255)
    assert ds.load_image(cnt["cnt/palette_alpha"]).getpixel((1, 1)) == (0, 128, 255)
    assert ds.load_image(cnt["cnt/gray16"]).getpixel((0, 0)) == (128, 128, 128)  # scaled, not clipped
    assert ds.load_image(cnt["cnt/gray"]).getpixel((0, 0)) == (90, 90, 90)
    r, g, b = ds.load_image(cnt["cnt/cmyk"]).getpixel((0, 0))
    assert r > 240 and g < 15 and b < 15
    mpo = ds.load_image(cnt["cnt/mpo"])
    assert mpo.size == (12, 9) and mpo.getpixel((0, 0))[0] > 240  # first frame (red), not the green one


def test_truth_per_answer_kind(imported) -> None:
    ds = Dataset(imported[0])
    ori = {s.id: s for s in ds.samples("orientation")}
    assert ori["ori1"].truth == {"index": 1, "text": "front right"} and ori["ori1"].meta["class"] == "front right"
    assert ori["ori0"].truth == {"index": 0, "text": "front"} and len(ori["ori0"].options) == 9
    dep = {s.id: s for s in ds.samples("abs_depth")}
    assert all(s.truth == {"index": 1, "bin": [2.0, 3.0]} for s in dep.values())
    assert dep["dep0"].meta["scene_type"] == "indoor" and dep["dep0"].options[0] == "1-2"
    loc = {s.id: s for s in ds.samples("localization")}
    assert loc["loc_px"].truth["box"] == pytest.approx([0.1, 0.1, 0.5, 0.5])  # pixels / (100, 50)
    assert loc["loc_norm"].truth["box"] == pytest.approx([0.1, 0.2, 0.6, 0.7])  # corners reordered
    assert ds.samples("color")[0].truth == {"rgb": [12, 200, 3]}
    assert ds.samples("ocr")[0].truth == {"text": "STOP here"}


def test_workers_give_the_same_dataset(release: tuple[Path, dict], imported, tmp_path: Path) -> None:
    report = import_dataset(release[0], tmp_path / "ds", workers=2, progress=False)
    assert report.n_imported == 26 and report.n_skipped == 4
    one, two = Dataset(imported[0]), Dataset(tmp_path / "ds")
    assert [s.to_json() for s in one.samples()] == [s.to_json() for s in two.samples()]
    assert sorted(p.name for p in (tmp_path / "ds" / "images").rglob("*.*")) == sorted(
        p.name for p in (imported[0] / "images").rglob("*.*")
    )


def test_import_a_single_config_dir_with_split_column(tmp_path: Path) -> None:
    write_release(tmp_path / "rel", split_column=True)
    report = import_dataset(tmp_path / "rel" / "train" / "Orientation", tmp_path / "ds", progress=False)
    assert report.imported == {"orientation": 6} and not report.errors
    ds = Dataset(tmp_path / "ds")
    assert ds.split_info == {"made_by": "official", "column": "split"}
    assert {s.id: s.split for s in ds.samples()}["ori0"] == "test"
    assert not (tmp_path / "ds" / "import_errors.jsonl").exists()


def _write_llava(root: Path) -> Path:
    kinds = image_kinds()
    (root / "Counting" / "images").mkdir(parents=True)
    (root / "Color" / "images").mkdir(parents=True)
    (root / "Counting" / "images" / "a_1.png").write_bytes(kinds["palette"])
    (root / "Color" / "images" / "c1.jpg").write_bytes(kinds["jpeg"])
    records = [
        {
            "id": "a/1",
            "image": "Counting/images/a_1.png",
            "conversations": conv("How many cats are there?", "3"),
            "source": "coco",
        },
        {"id": "c1", "image": "Color/images/c1.jpg", "conversations": conv("What color is it?", "[1, 2, 3]")},
        {"id": "missing", "image": "Color/images/nope.jpg", "conversations": conv("What color is it?", "(1, 2, 3)")},
        {"id": "badans", "image": "Color/images/c1.jpg", "conversations": conv("What color is it?", "reddish")},
    ]
    path = root / "ava.json"
    path.write_text(json.dumps(records))
    return path


def test_llava_json_import(tmp_path: Path) -> None:
    src = _write_llava(tmp_path / "llava")
    report = import_dataset(src, tmp_path / "ds", progress=False)
    assert report.fmt == "llava"
    assert report.imported == {"counting": 1, "color": 1}
    assert report.skipped == {"color": 2}
    reasons = {e.id: e.reason for e in report.errors}
    assert "cannot be read" in reasons["missing"] and "reddish" in reasons["badans"]
    ds = Dataset(tmp_path / "ds")
    (cnt,) = ds.samples("counting")
    assert (cnt.id, cnt.truth, cnt.meta["source"]) == ("a/1", {"value": 3}, "coco")


def test_llava_forced_ability_via_cli(tmp_path: Path) -> None:
    src = _write_llava(tmp_path / "llava")
    result = runner.invoke(
        app,
        [
            "data",
            "import",
            str(src),
            "--out",
            str(tmp_path / "ds"),
            "--ava",
            "ocr",
            "--image-root",
            str(tmp_path / "llava"),
            "-q",
        ],
    )
    assert result.exit_code == 1  # "missing" has no image file
    ds = Dataset(tmp_path / "ds")
    assert ds.abilities() == ["ocr"] and len(ds.samples()) == 3


def test_eval_format_with_answers_file(tmp_path: Path) -> None:
    kinds = image_kinds()
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "x.png").write_bytes(kinds["png_rgb"])
    q = "What is the orientation of the bus in the image? Choose one from below: 1. front, 2. back, 3. left."
    questions = [
        {"question_id": 1, "image": "x.png", "text": q, "category": "orientation"},
        {"question_id": 2, "image": "x.png", "text": q, "category": "orientation"},
        {"question_id": 3, "image": "x.png", "text": q, "category": "orientation", "answer": "C"},
        {"question_id": 4, "image": "x.png", "text": q, "category": "orientation"},
    ]
    (tmp_path / "q.jsonl").write_text("".join(json.dumps(r) + "\n" for r in questions))
    answers = [{"question_id": 1, "text": "back"}, {"question_id": 2, "answer": "1"}]
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in answers))
    args = ["data", "import", str(tmp_path / "q.jsonl"), "--out", str(tmp_path / "ds"), "--answers"]
    result = runner.invoke(app, [*args, str(tmp_path / "a.jsonl"), "--image-root", str(tmp_path / "img"), "-q"])
    assert result.exit_code == 1  # question 4 has no answer
    ds = Dataset(tmp_path / "ds")
    truth = {s.id: s.truth["text"] for s in ds.samples("orientation")}
    assert truth == {"1": "back", "2": "front", "3": "left"}
    assert ds.info["source"]["format"] == "eval"
    err = json.loads((tmp_path / "ds" / "import_errors.jsonl").read_text())
    assert err["id"] == "4" and "no answer" in err["reason"]


def test_bad_source_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(AvaError, match="does not exist"):
        import_dataset(tmp_path / "nothing", tmp_path / "ds")
    (tmp_path / "x.json").write_text(json.dumps([{"foo": 1}]))
    with pytest.raises(AvaError, match="cannot tell the format"):
        import_dataset(tmp_path / "x.json", tmp_path / "ds")
    with pytest.raises(AvaError, match="Did you mean"):
        import_dataset(tmp_path / "x.json", tmp_path / "ds", ava="countng")
