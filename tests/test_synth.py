"""The synthetic suite: determinism, balance, ranges, boxes in the pixels, and agreement with the scorer."""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from ava.abilities import ABILITY_KEYS, INDOOR_DEPTH_BINS, OUTDOOR_DEPTH_BINS, get_ability
from ava.data.format import Dataset
from ava.errors import AvaError
from ava.synth import SynthConfig, generate

RED_BOX = ("abs_depth", "rel_depth", "ocr", "recognition", "spatial", "emotion", "color")
BLUE_BOX = ("rel_depth", "spatial")
# Minimum number of distinct answers per choice ability.
MIN_CLASSES = {
    "texture": 12,
    "emotion": 5,
    "action": 8,
    "fine_grained": 20,
    "recognition": 20,
    "scene": 30,
    "orientation": 9,
    "spatial": 4,
    "rel_depth": 2,
    "abs_depth": 29,
}


def _tree_digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*") if p.is_file()
    }


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    """All 14 abilities, enough samples for every class/bin to have a test sample, at a tiny size."""
    out = tmp_path_factory.mktemp("synth") / "big"
    generate(SynthConfig(out=str(out), per_ava=150, size=64, seed=3, workers=2), progress=False)
    return Dataset(out)


def _pixels(ds: Dataset, sample) -> np.ndarray:
    return np.asarray(ds.load_image(sample))


def _color_bbox(arr: np.ndarray, rgb: tuple[int, int, int]) -> tuple[int, int, int, int] | None:
    ys, xs = np.nonzero(np.all(arr == rgb, axis=-1))
    if len(xs) == 0:
        return None
    return int(xs.min()), int(ys.min()), int(xs.max()), int(ys.max())


# -- determinism --------------------------------------------------------------------------------------
def test_same_seed_same_bytes_any_worker_count(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    generate(SynthConfig(out=str(a), per_ava=3, size=64, seed=1, workers=1), progress=False)
    generate(SynthConfig(out=str(b), per_ava=3, size=64, seed=1, workers=2), progress=False)
    generate(SynthConfig(out=str(c), per_ava=3, size=64, seed=2, workers=1), progress=False)
    da, db, dc = _tree_digest(a), _tree_digest(b), _tree_digest(c)
    assert da == db
    images_a = {k for k in da if k.startswith("images/")}
    images_c = {k for k in dc if k.startswith("images/")}
    assert len(images_a) == 14 * 3 and images_a.isdisjoint(images_c)


@pytest.mark.slow  # uses the module's 2100-sample dataset
def test_dataset_info_and_splits(big: Dataset) -> None:
    assert big.is_synthetic
    assert big.split_info == {"made_by": "synthetic", "test_frac": 0.2, "seed": 3}
    assert big.abilities() == list(ABILITY_KEYS)
    for ava in ABILITY_KEYS:
        samples = big.samples(ava)
        assert len(samples) == 150
        assert {s.split for s in samples} == {"train", "test"}
        n_test = sum(s.split == "test" for s in samples)
        assert 0.12 <= n_test / 150 <= 0.3, ava
        for s in samples:
            assert s.meta["source"] == "synthetic" and s.meta["difficulty"] == "easy"


# -- balance and ranges -------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("ava", [k for k in ABILITY_KEYS if get_ability(k).is_choice])
def test_majority_baseline_is_chance(big: Dataset, ava: str) -> None:
    answers = {s.answer for s in big.samples(ava)}
    k = len(answers)
    assert k >= MIN_CLASSES[ava]
    test = big.samples(ava, split="test")
    top = Counter(s.answer for s in test).most_common(1)[0][1]
    assert top / len(test) <= 1 / k + 0.05
    # Answers are always one of the sample's options, at the truth index.
    for s in big.samples(ava):
        assert s.options[s.truth["index"]] == s.answer


@pytest.mark.slow  # uses the module's 2100-sample dataset
def test_counts_depths_colours_spread(big: Dataset) -> None:
    counts = Counter(s.truth["value"] for s in big.samples("counting"))
    assert set(counts) == set(range(1, 41)) and max(counts.values()) - min(counts.values()) <= 1
    bins = Counter(s.answer for s in big.samples("abs_depth"))
    assert set(bins) == set(INDOOR_DEPTH_BINS) | set(OUTDOOR_DEPTH_BINS)
    for s in big.samples("abs_depth"):
        lo, hi = s.truth["bin"]
        assert lo <= s.meta["depth_m"] <= hi and s.meta["scene_type"] == ("indoor" if hi <= 7 else "outdoor")
    rgb = np.array([s.truth["rgb"] for s in big.samples("color")])
    assert (rgb.min(axis=0) < 30).all() and (rgb.max(axis=0) > 225).all() and (rgb.std(axis=0) > 55).all()
    areas = [s.meta["box_area"] for s in big.samples("localization")]
    assert min(areas) > 0.002 and max(areas) < 0.5 and sum(a > 0.2 for a in areas) > 30
    lengths = [len(s.truth["text"]) for s in big.samples("ocr")]
    assert min(lengths) <= 5 and max(lengths) > 20
    diffs = [s.meta["depth_diff_m"] for s in big.samples("rel_depth")]
    assert min(diffs) >= 0.5
    per_class = Counter((s.meta["class"], s.answer) for s in big.samples("rel_depth"))
    for cls in {c for c, _ in per_class}:
        assert abs(per_class[(cls, "red")] - per_class[(cls, "blue")]) <= 2


@pytest.mark.slow  # uses the module's 2100-sample dataset
def test_easy_makes_the_asked_object_stand_out(big: Dataset) -> None:
    """The easy settings the calibration table chose (bench_synth_signal.py): the cheap heads pool the whole image,
    so the object a question asks about is alone (localization, OCR) or dominant (recognition, emotion), and the
    two objects of relative depth are of one class at depths at least 2x apart."""
    from ava.synth.abilities.ocr import WORDS

    assert {s.meta["distractors"] for s in big.samples("localization")} == {0}
    assert {s.meta["distractors"] for s in big.samples("ocr")} == {0}
    assert {w for s in big.samples("ocr") for w in s.truth["text"].split()} <= set(WORDS)
    assert min(s.meta["object_px"] for s in big.samples("recognition")) >= 0.45 * 64 - 0.01
    assert min(s.meta["face_px"] for s in big.samples("emotion")) >= 0.6 * 64 - 0.1
    for s in big.samples("rel_depth"):
        near, far = sorted((s.meta["depth_red_m"], s.meta["depth_blue_m"]))
        assert far >= 2 * near - 0.01, s.id
        assert s.question.count(f"the {s.meta['class']} (") == 2, s.question


# -- pixels ---------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_images_open_with_size_and_boxes(big: Dataset) -> None:
    for ava in ABILITY_KEYS:
        for s in big.samples(ava)[:40]:
            with Image.open(big.image_path(s)) as im:
                assert im.size == (64, 64) and im.mode == "RGB" and (s.width, s.height) == (64, 64)
            arr = _pixels(big, s)
            red = int(np.all(arr == (255, 0, 0), axis=-1).sum())
            blue = int(np.all(arr == (0, 0, 255), axis=-1).sum())
            if ava in RED_BOX:
                assert red >= 24, (ava, s.id, red)
            if ava in BLUE_BOX:
                assert blue >= 24, (ava, s.id, blue)
            if ava == "localization":
                assert red == 0 and blue == 0


@pytest.mark.slow  # uses the module's 2100-sample dataset
def test_localization_padding_and_box(big: Dataset) -> None:
    padded = 0
    for s in big.samples("localization")[:40]:
        arr = _pixels(big, s)
        padded += bool(np.all(arr == (124, 120, 111), axis=-1).any())
        x0, y0, x1, y1 = s.truth["box"]
        assert 0 <= x0 < x1 <= 1 and 0 <= y0 < y1 <= 1
        assert s.answer == "[" + ", ".join(f"{v:.3f}" for v in s.truth["box"]) + "]"
    assert padded >= 30


@pytest.mark.slow  # uses the module's 2100-sample dataset
def test_spatial_answer_matches_box_pixels(big: Dataset) -> None:
    for s in big.samples("spatial")[:40]:
        arr = _pixels(big, s)
        r, b = _color_bbox(arr, (255, 0, 0)), _color_bbox(arr, (0, 0, 255))
        assert r[2] < b[0] or b[2] < r[0]  # no overlap in x
        assert r[3] < b[1] or b[3] < r[1]  # nor in y
        horiz = "Left" if r[2] < b[0] else "Right"
        vert = "above" if r[3] < b[1] else "below"
        assert s.answer == f"{horiz} {vert}"


@pytest.mark.slow  # uses the module's 2100-sample dataset
def test_depth_follows_pinhole_camera(big: Dataset) -> None:
    from ava.synth.abilities.depth import camera_for
    from ava.synth.shapes import box_width

    margin = box_width(64) + 1
    for s in big.samples("rel_depth")[:40]:
        arr = _pixels(big, s)
        r, b = _color_bbox(arr, (255, 0, 0)), _color_bbox(arr, (0, 0, 255))
        nearer = "red" if s.meta["depth_red_m"] < s.meta["depth_blue_m"] else "blue"
        assert s.answer == nearer
        if r[3] < 63 and b[3] < 63:  # both ground contacts inside the image: nearer stands lower
            assert (r[3] > b[3]) == (nearer == "red"), s.id
    for s in big.samples("abs_depth")[:40]:
        cam = camera_for(s.meta["scene_type"], 64)
        bottom = _color_bbox(_pixels(big, s), (255, 0, 0))[3]
        expected = cam.cy + cam.f * cam.height_m / s.meta["depth_m"] + margin
        if expected < 63:
            assert abs(bottom - expected) <= 1.5, s.id


def test_orientation_front_points_the_named_way() -> None:
    from ava.synth.abilities.orientation import OBJECTS, project_faces

    def mean_x(faces, key: str) -> float:
        return float(np.mean([x for _, poly, k, _ in faces if k == key for x, _ in poly]))

    right = project_faces(OBJECTS["car"](), 90, 20, False)
    left = project_faces(OBJECTS["car"](), 270, 20, False)
    assert mean_x(right, "eye") > mean_x(right, "tail")
    assert mean_x(left, "eye") < mean_x(left, "tail")

    def depth(faces, key: str) -> float:
        return float(np.mean([d for d, _, k, _ in faces if k == key]))

    front, back = (project_faces(OBJECTS["car"](), yaw, 20, False) for yaw in (0, 180))
    assert depth(front, "eye") < depth(front, "tail") and depth(back, "eye") > depth(back, "tail")


# -- agreement with the scorer ------------------------------------------------------------------------------
@pytest.mark.slow  # uses the module's 2100-sample dataset
def test_truth_scores_best_value(big: Dataset) -> None:
    from ava.metrics.scoring import score_predictions

    predictions = {s.key: s.answer for s in big.samples()}
    report = score_predictions(big, predictions, split="test")
    best = {"accuracy": 1.0, "giou": 1.0, "anls": 1.0, "mae_gt": 0.0, "ciede2000": 0.0}
    assert set(report.results["abilities"]) == set(ABILITY_KEYS)
    for ava, res in report.results["abilities"].items():
        assert res["n_unparsed"] == 0, ava
        assert math.isclose(res["value"], best[res["metric"]], abs_tol=1e-6), (ava, res["value"])


@pytest.mark.slow  # uses the module's 2100-sample dataset
def test_answers_are_canonical_replies(big: Dataset) -> None:
    """Every answer is exactly what ``format_reply`` writes for the truth, so real and synthetic data read alike."""
    from ava.abilities.parsers import format_reply, truth_value

    for ava in ABILITY_KEYS:
        ability = get_ability(ava)
        for s in big.samples(ava)[:30]:
            assert format_reply(ability, truth_value(ability, s), options=s.options) == s.answer, (ava, s.id)


# -- options, CLI, preview --------------------------------------------------------------------------------
def test_difficulty_changes_knobs(tmp_path: Path) -> None:
    easy, hard = tmp_path / "easy", tmp_path / "hard"
    generate(SynthConfig(out=str(easy), per_ava=4, size=64, ava=["texture"], workers=1), progress=False)
    generate(
        SynthConfig(out=str(hard), per_ava=4, size=64, ava=["texture"], difficulty="hard", workers=1), progress=False
    )
    e, h = Dataset(easy).samples("texture"), Dataset(hard).samples("texture")
    assert [s.answer for s in e] == [s.answer for s in h]  # same classes, harder rendering
    assert h[0].meta["noise"] > 0 and h[0].meta["scale"] < 1 and e[0].meta["noise"] == 0
    assert Dataset(hard).info["synth_config"]["difficulty"] == "hard"


def test_bad_options_and_existing_out(tmp_path: Path) -> None:
    with pytest.raises(AvaError, match="difficulty"):
        generate(SynthConfig(out=str(tmp_path / "x"), difficulty="extreme"), progress=False)
    with pytest.raises(AvaError, match="did you mean|Did you mean"):
        generate(SynthConfig(out=str(tmp_path / "x"), ava=["colour_x"]), progress=False)
    out = tmp_path / "keep"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(AvaError, match="pass --force"):
        generate(SynthConfig(out=str(out), per_ava=1, size=64), progress=False)
    assert (out / "notes.txt").read_text() == "mine"
    with pytest.raises(AvaError, match="not an ava dataset"):  # --overwrite deletes only ava datasets
        generate(SynthConfig(out=str(out), per_ava=1, size=64, overwrite=True, workers=1), progress=False)
    assert (out / "notes.txt").read_text() == "mine"
    (out / "notes.txt").unlink()
    generate(SynthConfig(out=str(out), per_ava=1, size=64, ava=["color"], workers=1), progress=False)
    generate(SynthConfig(out=str(out), per_ava=1, size=64, ava=["texture"], overwrite=True, workers=1), progress=False)
    assert Dataset(out).abilities() == ["texture"]


def test_cli_synth_and_preview(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from ava.cli.main import app

    runner = CliRunner()
    out = tmp_path / "cli"
    res = runner.invoke(
        app,
        [
            "data",
            "synth",
            "--out",
            str(out),
            "--per-ava",
            "6",
            "--ava",
            "localization",
            "--ava",
            "emotion",
            "--size",
            "96",
            "--workers",
            "1",
        ],
    )
    assert res.exit_code == 0, res.output
    assert Dataset(out).abilities() == ["localization", "emotion"]
    sheet = tmp_path / "sheet.png"
    res = runner.invoke(app, ["data", "preview", str(out), "--ava", "emotion", "--n", "4", "--out", str(sheet)])
    assert res.exit_code == 0, res.output
    arr = np.asarray(Image.open(sheet).convert("RGB"), dtype=np.float32)
    assert arr.shape[0] > 256 and arr.shape[1] > 256 and arr.std() > 20
    res = runner.invoke(app, ["data", "preview", str(out), "--ava", "ocr", "--out", str(sheet)])
    assert isinstance(res.exception, AvaError)
    toml = tmp_path / "synth.toml"
    toml.write_text('per_ava = 2\nava = ["color"]\nsize = 64\nseed = 5\n')
    res = runner.invoke(app, ["data", "synth", "--config", str(toml), "--out", str(tmp_path / "t"), "--seed", "6"])
    assert res.exit_code == 0, res.output
    info = Dataset(tmp_path / "t").info
    assert info["synth_config"]["seed"] == 6 and info["synth_config"]["per_ava"] == 2  # CLI beats the file


@pytest.mark.parametrize(
    ("again", "said"),
    [
        ({}, None),  # the same settings: kept as it is, nothing rewritten
        ({"per_ava": 3}, "--per-ava 2 there, 3 now"),
        ({"size": 96}, "--size 64 there, 96 now"),
        ({"ava": ["ocr"]}, "--ava color there, ocr now"),
    ],
)
def test_a_second_synth_into_its_folder_keeps_it_or_names_the_setting_that_differs(tmp_path, again, said):
    from ava.api import synthesize
    from ava.errors import AvaError

    settings = {"per_ava": 2, "ava": ["color"], "size": 64, "workers": 1}
    first = synthesize(tmp_path / "d", **settings)
    stamp = (tmp_path / "d" / "dataset.json").stat().st_mtime_ns
    assert not first.reused
    if said is None:
        assert synthesize(tmp_path / "d", **{**settings, **again}).reused
    else:
        with pytest.raises(AvaError, match="holds a synthetic set made with other settings") as e:
            synthesize(tmp_path / "d", **{**settings, **again})
        assert said in str(e.value) and "--force" in str(e.value)
    assert (tmp_path / "d" / "dataset.json").stat().st_mtime_ns == stamp
