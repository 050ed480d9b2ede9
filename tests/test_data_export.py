"""`ava data export` (LLaVA JSON round trip) and `ava data info`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ava.cli.main import app
from ava.data.format import Dataset
from ava.data.importers import import_dataset
from ava.data.info import dataset_info
from ava.data.split import split_dataset

runner = CliRunner()


@pytest.fixture(scope="module")
def split_ds(tmp_path_factory: pytest.TempPathFactory, release: tuple[Path, dict]) -> Path:
    tmp = tmp_path_factory.mktemp("exp")
    import_dataset(release[0], tmp / "ds", progress=False)
    split_dataset(tmp / "ds", test_frac=0.3, seed=0)
    return tmp / "ds"


def _fields(ds: Dataset) -> dict:
    return {
        s.key: (s.question, s.answer, s.truth, s.options, s.meta, s.split, s.width, s.height, s.image)
        for s in ds.samples()
    }


def test_export_import_round_trip(split_ds: Path, tmp_path: Path) -> None:
    out = tmp_path / "llava"
    result = runner.invoke(app, ["data", "export", str(split_ds), "--format", "llava", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert {p.name for p in out.glob("*.json")} == {"train.json", "test.json", "ava_export.json"}
    records = json.loads((out / "train.json").read_text())
    rec = next(r for r in records if r["id"] == "cnt/jpeg")
    assert rec["image"] == "Counting/images/cnt_jpeg.jpg" and (out / rec["image"]).is_file()
    assert rec["conversations"][0]["value"].startswith("<image>\n")
    back = tmp_path / "back"
    report = import_dataset(out, back, progress=False)
    assert not report.errors and report.fmt == "llava"
    original, again = Dataset(split_ds), Dataset(back)
    assert _fields(again) == _fields(original)  # same text, truth, meta, split and image bytes (sha256)
    assert again.split_info == original.split_info and not again.is_synthetic


def test_export_one_split(split_ds: Path, tmp_path: Path) -> None:
    from ava.data.export import export_dataset

    export_dataset(split_ds, tmp_path / "t", split="test")
    records = json.loads((tmp_path / "t" / "test.json").read_text())
    assert records and {r["split"] for r in records} == {"test"}
    assert not (tmp_path / "t" / "train.json").exists()


def test_info_counts(split_ds: Path) -> None:
    info = dataset_info(split_ds)
    ds = Dataset(split_ds)
    assert info["n_samples"] == len(ds.samples()) == 26
    assert info["n_images"] == 25
    ori = info["abilities"]["orientation"]
    assert ori["total"] == 6 and ori["train"] + ori["test"] == 6 and ori["unsplit"] == 0
    assert ori["sources"] == {"src-orientation": 6}
    assert set(ori["classes"]) == {"front", "front right", "right"}
    assert info["abilities"]["abs_depth"]["classes"]["2-3"]["test"] == 1  # 4 samples x 0.3 -> 1
    assert ori["test"] == 2  # round(6 x 0.3): the ability keeps its test fraction across three classes of two
    assert all(c["train"] >= 1 for c in ori["classes"].values())
    result = runner.invoke(app, ["data", "info", str(split_ds), "--json"])
    assert result.exit_code == 0 and json.loads(result.output) == json.loads(json.dumps(info))
    table = runner.invoke(app, ["data", "info", str(split_ds)])
    assert table.exit_code == 0 and "orientation" in table.output
