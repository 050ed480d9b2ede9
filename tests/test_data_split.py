"""`ava data split`: deterministic, stratified 80/20, refuses to re-split without --force."""

from __future__ import annotations

import json
import random
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ava.cli.main import app
from ava.data.format import Dataset, DatasetWriter, Sample
from ava.data.split import assign_splits, split_dataset, stratum
from ava.errors import AvaError

VIEWS = ["front", "back", "left", "right"]


def _sample(ava: str, sid: str, truth: dict, meta: dict | None = None) -> Sample:
    return Sample(
        id=sid, ava=ava, image="ab/ab.png", width=8, height=8, question="q", answer="a", truth=truth, meta=meta or {}
    )


def _samples() -> list[Sample]:
    out = [_sample("orientation", f"o{i}", {"index": i % 4, "text": VIEWS[i % 4]}) for i in range(40)]
    out += [_sample("counting", f"c{i}", {"value": 1 + i % 5}) for i in range(27)]
    out += [_sample("counting", "lonely", {"value": 39})]
    out += [
        _sample(
            "rel_depth",
            f"r{i}",
            {"index": i % 2, "text": ["red", "blue"][i % 2]},
            {"class": ["cup", "dog"][i // 2 % 2]},
        )
        for i in range(20)
    ]
    return out


def _assignment(samples: list[Sample]) -> dict[tuple[str, str], str | None]:
    return {s.key: s.split for s in samples}


def test_assign_splits_is_deterministic_and_order_independent() -> None:
    a = _samples()
    assign_splits(a, seed=3)
    b = _samples()
    random.Random(1).shuffle(b)
    assign_splits(b, seed=3)
    assert _assignment(a) == _assignment(b)
    c = _samples()
    assign_splits(c, seed=4)
    assert _assignment(a) != _assignment(c)


def test_assign_splits_is_stratified() -> None:
    samples = _samples()
    assign_splits(samples, test_frac=0.2, seed=0)
    per: dict[str, Counter[str]] = defaultdict(Counter)
    for s in samples:
        per[stratum(s)][s.split] += 1
    assert per["orientation:front"] == Counter({"train": 8, "test": 2})
    assert per["counting:39"] == Counter({"train": 1})  # a stratum of one goes to train
    assert per["counting:3"] == Counter({"train": 4, "test": 1})  # 5 -> 1 test
    assert per["counting:1"] == Counter({"train": 5, "test": 1})  # 6 -> round(1.2) = 1 test
    assert set(per) >= {"rel_depth:cup|red", "rel_depth:dog|blue"}
    for counts in per.values():
        assert counts["train"] >= 1


def test_stratum_labels_per_answer_kind() -> None:
    assert stratum(_sample("abs_depth", "d", {"index": 1, "bin": [2.0, 3.0]})) == "abs_depth:2-3"
    assert stratum(_sample("localization", "l", {"box": [0.0, 0.0, 0.5, 0.5]})) == "localization:area 0.2-0.3"
    assert stratum(_sample("localization", "l", {"box": [0.0, 0.0, 0.9, 0.9]})) == "localization:area >0.5"
    assert stratum(_sample("color", "c", {"rgb": [0, 128, 255]})) == "color:rgb 012"
    assert stratum(_sample("ocr", "t", {"text": "hello world"})) == "ocr:len 11-20"
    assert stratum(_sample("ocr", "t", {"text": "stop"})) == "ocr:len 1-5"


def _dataset(root: Path) -> Path:
    with DatasetWriter(root) as w:
        for s in _samples():
            w.add_sample(s)
    return root


def test_split_dataset_records_and_refuses_resplit(tmp_path: Path) -> None:
    root = _dataset(tmp_path / "ds")
    result = split_dataset(root, test_frac=0.2, seed=0)
    assert result["counts"]["orientation"] == {"train": 32, "test": 8}
    info = json.loads((root / "dataset.json").read_text())["split"]
    assert info["made_by"] == "ava" and info["seed"] == 0 and info["test_frac"] == 0.2
    assert info["stratified_by"]["orientation"] == "truth option text"
    first = _assignment(Dataset(root).samples())
    assert None not in first.values()
    with pytest.raises(AvaError, match="already split"):
        split_dataset(root, seed=1)
    split_dataset(root, seed=1, force=True)
    assert _assignment(Dataset(root).samples()) != first
    split_dataset(root, seed=0, force=True)
    assert _assignment(Dataset(root).samples()) == first


def test_split_cli(tmp_path: Path) -> None:
    root = _dataset(tmp_path / "ds")
    runner = CliRunner()
    result = runner.invoke(app, ["data", "split", str(root), "--test-frac", "0.25", "--seed", "2"])
    assert result.exit_code == 0, result.output
    assert Dataset(root).split_info["test_frac"] == 0.25
    again = runner.invoke(app, ["data", "split", str(root)])
    assert isinstance(again.exception, AvaError)
    with pytest.raises(AvaError, match="between 0 and 1"):
        split_dataset(root, test_frac=1.5, force=True)


def test_small_abilities_still_get_their_test_fraction() -> None:
    # 20 counts seen once each: no stratum can be split 80/20, but the ability still gets 4 test samples
    samples = [_sample("counting", f"c{i}", {"value": i + 1}) for i in range(20)]
    assign_splits(samples, test_frac=0.2, seed=0)
    assert sum(s.split == "test" for s in samples) == 4
    # a stratum that can keep a train sample is preferred over a singleton
    samples = [_sample("counting", f"a{i}", {"value": 1}) for i in range(3)] + [_sample("counting", "b", {"value": 2})]
    assign_splits(samples, test_frac=0.2, seed=0)
    assert [s.split for s in samples if s.truth["value"] == 2] == ["train"]
    assert sum(s.split == "test" for s in samples) == 1


@pytest.mark.parametrize(
    ("again", "said"),
    [
        ({"seed": 0, "test_frac": 0.2}, None),  # the same split again: kept, nothing rewritten
        ({"seed": 1, "test_frac": 0.2}, "--seed 0 there, 1 now"),
        ({"seed": 0, "test_frac": 0.25}, "--test-frac 0.2 there, 0.25 now"),
    ],
)
def test_a_second_split_keeps_the_same_split_or_names_the_setting_that_differs(tmp_path: Path, again, said) -> None:
    root = _dataset(tmp_path / "ds")
    first = split_dataset(root, test_frac=0.2, seed=0)
    stamp = (root / "dataset.json").stat().st_mtime_ns
    if said is None:
        second = split_dataset(root, **again)
        assert second["unchanged"] and second["counts"] == first["counts"]
    else:
        with pytest.raises(AvaError, match="already split by ava with other settings") as e:
            split_dataset(root, **again)
        assert said in str(e.value) and "--force" in str(e.value)
    assert (root / "dataset.json").stat().st_mtime_ns == stamp
