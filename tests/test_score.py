"""Scoring: per sample, per ability, subgroups, the results schema, and `ava score` end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ava.abilities import ABILITY_KEYS, get_ability
from ava.abilities.parsers import format_reply, truth_value
from ava.cli.main import app
from ava.data.format import Dataset
from ava.errors import AvaError
from ava.metrics import METRICS
from ava.metrics.scoring import read_predictions, score_predictions, score_sample, write_results
from tests.helpers import make_sample, make_sample_dataset

runner = CliRunner()


def _truth_reply(sample) -> str:  # noqa: ANN001
    ability = get_ability(sample.ava)
    return format_reply(ability, truth_value(ability, sample), options=sample.options)


@pytest.mark.parametrize("key", ABILITY_KEYS)
def test_scoring_the_truth_gives_the_best_value(key: str) -> None:
    ability = get_ability(key)
    metric = METRICS.get(ability.metric)
    for variant in (0, 1):
        sample = make_sample(key, variant)
        result = score_sample(ability, sample, _truth_reply(sample))
        assert result.ok
        assert result.value == pytest.approx(metric.best, abs=1e-6)


@pytest.mark.parametrize("key", ABILITY_KEYS)
def test_unparsed_and_missing_replies_score_the_worst_value(key: str) -> None:
    ability = get_ability(key)
    metric = METRICS.get(ability.metric)
    sample = make_sample(key)
    worst = metric.worst(truth_value(ability, sample), ability, sample)
    for reply in (None, "" if key != "ocr" else "   "):
        result = score_sample(ability, sample, reply)
        assert not result.ok and result.parsed is None and result.value == pytest.approx(worst)


@pytest.fixture()
def data_dir(tmp_path: Path) -> Path:
    return make_sample_dataset(tmp_path / "data", list(ABILITY_KEYS))


def _write_preds(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _truth_rows(data_dir: Path, split: str | None = "test") -> list[dict]:
    ds = Dataset(data_dir)
    return [{"id": s.id, "prediction": _truth_reply(s)} for s in ds.samples(split=split)]


def test_cli_scores_truth_replies_at_best(data_dir: Path, tmp_path: Path) -> None:
    pred = _write_preds(tmp_path / "pred.jsonl", _truth_rows(data_dir))
    out = tmp_path / "results_test.json"
    result = runner.invoke(app, ["score", "--data", str(data_dir), "--pred", str(pred)])
    assert result.exit_code == 0, result.output
    assert "warning" not in result.output
    res = json.loads(out.read_text())
    assert res["schema_version"] == 1 and res["split"]["name"] == "test" and res["split"]["made_by"] == "ava"
    assert res["synthetic"] is False and "provenance" in res and res["config"]["split"] == "test"
    assert set(res["abilities"]) == set(ABILITY_KEYS)
    for key, block in res["abilities"].items():
        metric = METRICS.get(get_ability(key).metric)
        assert block["n"] == 2 and block["n_unparsed"] == 0, key
        assert block["value"] == pytest.approx(metric.best, abs=1e-6), key
        assert block["higher_is_better"] == metric.higher_is_better
    assert res["abilities"]["counting"]["subgroups"]["count_range"] == {
        "6-10": {"value": 0.0, "n": 1},
        ">20": {"value": 0.0, "n": 1},
    }
    assert set(res["abilities"]["counting"]["subgroups"]["source"]) == {"src0", "src1"}
    assert "counting" in result.output and "mae_gt" in result.output


def test_cli_free_form_replies_and_unparsed(data_dir: Path, tmp_path: Path) -> None:
    rows = [
        {"id": "counting-0", "prediction": "There are seven birds."},  # truth 7 -> 0
        {"id": "counting-1", "prediction": "I cannot tell"},  # truth 25 -> unparsed, worst = 24/25
        {"id": "spatial-0", "prediction": "A. Left above"},  # truth Left below -> wrong
        {"id": "spatial-1", "prediction": "the answer is (c)"},  # truth Right above -> right
        {"id": "abs_depth-0", "prediction": "about 3.5 m"},  # truth 3-4 -> 0
        {"id": "abs_depth-1", "prediction": "B"},  # truth 1-2 (1.5), B = 2-3 (2.5) -> 2/3
        {"id": "localization-0", "prediction": "[2, 2, 11, 8]"},  # pixels of a 20x10 image = the truth box
        {"id": "color-0", "prediction": "#0cc803"},
    ]
    pred = _write_preds(tmp_path / "pred.jsonl", rows)
    per_sample = tmp_path / "scored" / "predictions_test.jsonl"
    args = [
        "score",
        "--data",
        str(data_dir),
        "--pred",
        str(pred),
        "-o",
        str(tmp_path / "scored"),
        "--ava",
        "counting,Spatial",
        "--ava",
        "abs_depth",
        "--ava",
        "localization",
        "--ava",
        "color",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    res = json.loads((tmp_path / "scored" / "results_test.json").read_text())["abilities"]
    assert set(res) == {"counting", "spatial", "abs_depth", "localization", "color"}
    assert res["counting"]["value"] == pytest.approx((0 + 24 / 25) / 2)
    assert res["counting"]["n_unparsed"] == 1 and res["counting"]["n_missing"] == 0
    assert res["spatial"]["value"] == pytest.approx(0.5) and res["spatial"]["n_unparsed"] == 0
    assert res["abs_depth"]["value"] == pytest.approx((0 + 1 / 1.5) / 2)
    # localization-1 and color-1 have no prediction: missing, scored at the worst value
    assert res["localization"]["value"] == pytest.approx((1.0 - 1.0) / 2)
    assert res["localization"]["n_unparsed"] == 1 and res["localization"]["n_missing"] == 1
    assert res["color"]["n_unparsed"] == 1 and res["color"]["value"] > 10
    assert "2 samples have no prediction" in result.output and "localization/localization-1" in result.output
    records = [json.loads(line) for line in per_sample.read_text().splitlines()]
    assert len(records) == 10
    rec = next(r for r in records if r["id"] == "localization-0")
    assert rec["ok"] and rec["parsed"] == pytest.approx([0.1, 0.2, 0.55, 0.8]) and rec["score"] == pytest.approx(1)


def test_unknown_ids_and_split_all(data_dir: Path, tmp_path: Path) -> None:
    rows = _truth_rows(data_dir, split=None) + [{"id": "nope", "prediction": "3"}]
    pred = _write_preds(tmp_path / "pred.jsonl", rows)
    result = runner.invoke(app, ["score", "--data", str(data_dir), "--pred", str(pred), "--ava", "counting"])
    assert result.exit_code == 0, result.output
    # the train prediction and the unknown id match no scored sample
    assert "2 predictions match no scored sample" in result.output and "nope" in result.output
    result = runner.invoke(
        app,
        [
            "score",
            "--data",
            str(data_dir),
            "--pred",
            str(pred),
            "--split",
            "all",
            "--json",
            "--out",
            str(tmp_path / "all"),
        ],
    )
    assert result.exit_code == 0, result.output
    res = json.loads(result.stdout)
    assert res == json.loads((tmp_path / "all" / "results_all.json").read_text())
    assert res["split"]["name"] == "all" and res["abilities"]["ocr"]["n"] == 3 and res["n_unknown"] == 1


def test_malformed_line_names_file_and_line(data_dir: Path, tmp_path: Path) -> None:
    pred = tmp_path / "pred.jsonl"
    pred.write_text('{"id": "counting-0", "prediction": "3"}\n{"id": "counting-1", "prediction": \n')
    result = runner.invoke(app, ["score", "--data", str(data_dir), "--pred", str(pred)])
    assert result.exit_code != 0 and isinstance(result.exception, AvaError)
    assert f"{pred}:2" in str(result.exception)
    pred.write_text('{"id": "counting-0"}\n')
    with pytest.raises(AvaError, match=r"pred.jsonl:1: expected an object"):
        read_predictions(pred, Dataset(data_dir))
    pred.write_text('{"id": "counting-0", "prediction": "3"}\n{"id": "counting-0", "prediction": "4"}\n')
    with pytest.raises(AvaError, match="duplicate prediction for counting/counting-0"):
        read_predictions(pred, Dataset(data_dir))


def test_id_in_several_abilities_needs_ava(tmp_path: Path) -> None:
    root = make_sample_dataset(tmp_path / "d", ["counting", "ocr"])
    ds = Dataset(root)
    for path in (root / "samples").glob("*.jsonl"):  # give both abilities the same ids
        path.write_text(path.read_text().replace('"counting-', '"x-').replace('"ocr-', '"x-'))
    ds = Dataset(root)
    pred = _write_preds(tmp_path / "p.jsonl", [{"id": "x-0", "prediction": "7"}])
    with pytest.raises(AvaError, match=r"p.jsonl:1: id 'x-0' exists in several abilities \(counting, ocr\)"):
        read_predictions(pred, ds)
    assert read_predictions(pred, ds, abilities=["counting"]) == {("counting", "x-0"): "7"}
    pred = _write_preds(tmp_path / "p.jsonl", [{"id": "x-0", "ava": "OCR", "prediction": "EXIT 12"}])
    assert read_predictions(pred, ds) == {("ocr", "x-0"): "EXIT 12"}


def test_library_score_and_write_results(data_dir: Path, tmp_path: Path) -> None:
    ds = Dataset(data_dir)
    preds = {s.key: _truth_reply(s) for s in ds.samples("ocr", split="test")}
    preds[("ocr", "ocr-1")] = "welcome to the grand hotle"  # 2 edits in 26 characters
    run = {"head": "probe", "vfm": "pixels", "abilities": ["ocr"], "random_weights": False}
    report = score_predictions(ds, preds, abilities=["ocr"], run=run, config={"seed": 0})
    assert report.results["abilities"]["ocr"]["value"] == pytest.approx((1 + (1 - 2 / 26)) / 2)
    assert report.results["run"] == run and report.missing == [] and report.unknown == []
    assert set(report.results["abilities"]["ocr"]["subgroups"]["text_length"]) == {"6-10", ">20"}
    write_results(report, tmp_path / "run", "test")
    saved = json.loads((tmp_path / "run" / "results_test.json").read_text())
    assert saved["abilities"]["ocr"]["n"] == 2
    lines = (tmp_path / "run" / "predictions_test.jsonl").read_text().splitlines()
    assert {json.loads(line)["id"] for line in lines} == {"ocr-0", "ocr-1"}


def test_errors_for_bad_split_and_absent_ability(data_dir: Path, tmp_path: Path) -> None:
    pred = _write_preds(tmp_path / "p.jsonl", [])
    result = runner.invoke(app, ["score", "--data", str(data_dir), "--pred", str(pred), "--split", "val"])
    assert isinstance(result.exception, AvaError) and "unknown split 'val'" in str(result.exception)
    root = make_sample_dataset(tmp_path / "small", ["counting"])
    with pytest.raises(AvaError, match="no samples for ocr"):
        score_predictions(Dataset(root), {}, abilities=["ocr"])
    with pytest.raises(AvaError, match="Did you mean .counting."):
        score_predictions(Dataset(root), {}, abilities=["countin"])


def test_unsplit_dataset_and_null_predictions(tmp_path: Path) -> None:
    from PIL import Image

    from ava.data.format import DatasetWriter

    with DatasetWriter(tmp_path / "raw") as writer:
        rel = writer.add_image(Image.new("RGB", (4, 4)))
        writer.add_sample(make_sample("emotion", 0, image=rel, split=None))
        writer.add_sample(make_sample("emotion", 1, image=rel, split=None))
    ds = Dataset(tmp_path / "raw")
    with pytest.raises(AvaError, match="ava data split"):
        score_predictions(ds, {})
    report = score_predictions(ds, {("emotion", "emotion-0"): None, ("emotion", "emotion-1"): "happy"}, split="all")
    block = report.results["abilities"]["emotion"]
    assert block["n_unparsed"] == 1 and block["n_missing"] == 0 and block["value"] == pytest.approx(0.5)
    assert report.results["split"] == {"made_by": None, "name": "all"}


def test_box_format_1000_reads_qwen_vl_boxes_and_results_count_the_rules(tmp_path: Path) -> None:
    data = make_sample_dataset(tmp_path / "data", ["localization"])  # images 20 x 10 px
    # localization-0's truth is [0.1, 0.2, 0.55, 0.8]: on Qwen-VL's 0..1000 grid, 100,200,550,800;
    # localization-1's is [0.5, 0.5, 0.9, 0.7]: in pixels of the 20 x 10 image, 10,5,18,7
    rows = [
        {"id": "localization-0", "prediction": "<box>[100,200,550,800]</box>"},
        {"id": "localization-1", "prediction": "[10, 5, 18, 7]"},
    ]
    pred = _write_preds(tmp_path / "p.jsonl", rows)
    auto = tmp_path / "auto" / "results_test.json"
    res = runner.invoke(app, ["score", "--data", str(data), "--pred", str(pred), "-o", str(auto.parent)])
    assert res.exit_code == 0, res.output
    loc = json.loads(auto.read_text())["abilities"]["localization"]
    assert loc["box_format"] == "auto" and loc["box_rules"] == {"normalized": 0, "pixels": 1, "1000": 0}
    assert loc["n_unparsed"] == 1  # the 0..1000 box read as pixels lies 80 image heights away: no box
    out = tmp_path / "k" / "results_test.json"
    res = runner.invoke(
        app, ["score", "--data", str(data), "--pred", str(pred), "-o", str(out.parent), "--box-format", "1000"]
    )
    assert res.exit_code == 0, res.output
    loc = json.loads(out.read_text())["abilities"]["localization"]
    assert loc["box_rules"] == {"normalized": 0, "pixels": 0, "1000": 2} and loc["n_unparsed"] == 0
    record = json.loads(out.read_text())["config"]
    assert record["box_format"] == "1000"
    res = runner.invoke(app, ["score", "--data", str(data), "--pred", str(pred), "--box-format", "percent"])
    assert isinstance(res.exception, AvaError) and "--box-format 'percent'" in str(res.exception)


def test_auto_box_rule_mix_is_noted(tmp_path: Path) -> None:
    data = make_sample_dataset(tmp_path / "data", ["localization"])
    rows = [
        {"id": "localization-0", "prediction": "[0.1, 0.2, 0.55, 0.8]"},
        {"id": "localization-1", "prediction": "[10, 5, 18, 7]"},
    ]
    pred = _write_preds(tmp_path / "p.jsonl", rows)
    res = runner.invoke(app, ["score", "--data", str(data), "--pred", str(pred)])
    assert res.exit_code == 0, res.output
    assert "1 as normalized, 1 as pixels" in " ".join(res.output.split())


def test_new_subgroups_and_the_unknown_bin(tmp_path: Path) -> None:
    from dataclasses import replace

    from ava.abilities.subgroups import UNKNOWN, depth_range, text_domain

    depth = make_sample("abs_depth")
    assert depth_range(replace(depth, truth={"index": 0, "bin": [4.0, 5.0]})) == "<=5 m"
    assert depth_range(replace(depth, truth={"index": 0, "bin": [9.0, 10.0]})) == "5-10 m"
    assert depth_range(replace(depth, truth={"index": 0, "bin": [19.0, 20.0]})) == "10-20 m"
    assert depth_range(replace(depth, truth={"index": 0, "bin": [20.0, 21.0]})) == ">20 m"
    ocr = make_sample("ocr")
    assert text_domain(replace(ocr, meta={"source": "TextOCR"})) == "scene text"
    assert text_domain(replace(ocr, meta={"source": "IAM"})) == "handwriting"
    assert text_domain(replace(ocr, meta={"text_domain": "signs"})) == "signs"
    assert text_domain(replace(ocr, meta={"source": "mystery"})) is None
    # scored: a sample whose bin cannot be read lands in "unknown", counted, not dropped
    data = make_sample_dataset(tmp_path / "data", ["ocr", "abs_depth"])
    dataset = Dataset(data)
    report = score_predictions(dataset, {s.key: "x" for k in ("ocr", "abs_depth") for s in dataset.samples(k)})
    groups = report.results["abilities"]["ocr"]["subgroups"]
    assert groups["text_domain"] == {UNKNOWN: {"value": 0.0, "n": 2}}  # sources src0/src1 name no domain
    assert sum(b["n"] for b in groups["source"].values()) == 2
    assert list(report.results["abilities"]["abs_depth"]["subgroups"]["depth_range"]) == ["<=5 m"]


def test_questions_without_a_readable_class_are_counted(tmp_path: Path) -> None:
    from dataclasses import replace

    from ava.abilities.subgroups import UNKNOWN

    data = make_sample_dataset(tmp_path / "data", ["counting", "color"])
    dataset = Dataset(data)
    samples = dataset.samples("counting")
    samples = [replace(s, meta={**s.meta, "class": UNKNOWN if s.id == "counting-0" else "dogs"}) for s in samples]
    dataset._samples["counting"] = samples
    report = score_predictions(dataset, {s.key: "3" for s in samples})
    assert report.results["abilities"]["counting"]["n_class_unknown"] == 1
    assert "n_class_unknown" not in report.results["abilities"]["color"]
    pred = _write_preds(tmp_path / "p.jsonl", [{"id": "counting-0", "prediction": "3"}])
    res = runner.invoke(app, ["score", "--data", str(data), "--pred", str(pred), "--ava", "counting"])
    assert res.exit_code == 0 and "class 'unknown'" in " ".join(res.output.split())  # no class in the fixture
