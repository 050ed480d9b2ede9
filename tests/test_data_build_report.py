"""The task-augmentation metric: golden values of Accuracy%(t) and the ambiguity bins, and a built dataset going
through cache extract, fingerprint and report unchanged, with the metric in the report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ava.cli.main import main
from ava.curate import BuildConfig, build_dataset
from ava.curate.synthetic import write_sources
from ava.report.augment import curve, image_scores


def test_accuracy_at_t_is_the_share_of_images_at_or_above_t() -> None:
    points = dict(curve([1.0, 0.5, 0.75, 0.0], thresholds=(0.0, 0.5, 0.75, 1.0)))
    assert points == {0.0: 100.0, 0.5: 75.0, 0.75: 50.0, 1.0: 25.0}
    assert dict(curve([], thresholds=(0.5,))) == {0.5: 0.0}


def test_image_scores_group_questions_by_source_image_and_ambiguity() -> None:
    records = {
        "ta_presence": [{"id": "a", "score": 1.0}, {"id": "b", "score": 0.0}],
        "ta_count": [{"id": "c", "score": 0.0}, {"id": "d", "score": 0.5}],  # MAE/GT: 0 is right
        "ta_occluded": [{"id": "e", "score": 1.0}, {"id": "f", "score": 0.0}],
        "counting": [{"id": "z", "score": 0.0}],  # not a task-augmentation question: ignored
    }
    meta = {
        ("ta_presence", "a"): {"origin": {"file": "x.png"}},
        ("ta_presence", "b"): {"origin": {"file": "y.png"}},
        ("ta_count", "c"): {"origin": {"file": "x.png"}},
        ("ta_count", "d"): {"origin": {"file": "y.png"}},
        ("ta_occluded", "e"): {"origin": {"file": "x.png"}, "ambiguity": 0.0},
        ("ta_occluded", "f"): {"origin": {"file": "y.png"}, "ambiguity": 0.3333},
    }
    fractions, ambiguity = image_scores(records, meta)
    assert fractions == {"x.png": 1.0, "y.png": 0.0}
    assert dict(ambiguity) == {"0 (raters agree)": [True], "(0.2, 0.34]": [False]}


@pytest.mark.slow
def test_a_built_dataset_goes_through_extract_fingerprint_and_report(tmp_path: Path) -> None:
    write_sources(tmp_path / "src", n_images=12, seed=2)
    src = tmp_path / "src"
    build_dataset(
        BuildConfig(
            out=tmp_path / "data",
            coco=src / "instances.json",
            images=src / "images",
            attributes=src / "raters.csv",
            ava=["recognition"],
            tasks=["ta_presence", "ta_occluded", "ta_further_left"],
        )
    )
    for args in (
        [
            "cache",
            "extract",
            "--vfm",
            "pixels",
            "--data",
            str(tmp_path / "data"),
            "--cache",
            str(tmp_path / "c"),
            "--device",
            "cpu",
            "--threads",
            "1",
            "-q",
        ],
        [
            "fingerprint",
            "--vfm",
            "pixels",
            "--data",
            str(tmp_path / "data"),
            "--cache",
            str(tmp_path / "c"),
            "--out",
            str(tmp_path / "runs"),
            "--head",
            "knn",
            "--device",
            "cpu",
            "--threads",
            "1",
            "-q",
        ],
        ["report", str(tmp_path / "runs" / "knn-pixels"), "--out", str(tmp_path / "report")],
    ):
        with pytest.raises(SystemExit) as exc:
            main(args)
        assert exc.value.code in (0, None), args
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    section = report["task_augmentation"]
    (row,) = section["runs"]
    assert row["n_images"] > 0 and row["n_questions"] > 0
    values = [p for _, p in row["curve"]]
    assert values[0] == 100.0 and values == sorted(values, reverse=True)  # t = 0: every image; then non-increasing
    assert {a["bin"] for a in row["ambiguity"]} <= {"0 (raters agree)", "(0, 0.2]", "(0.2, 0.34]", "> 0.34"}
    md = (tmp_path / "report" / "report.md").read_text()
    assert "## Task augmentation" in md and (tmp_path / "report" / "plots" / "task_augmentation.png").is_file()
    results = json.loads((tmp_path / "runs" / "knn-pixels" / "results_test.json").read_text())
    assert {"recognition", "ta_presence", "ta_occluded", "ta_further_left"} <= set(results["abilities"])
