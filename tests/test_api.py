"""The public Python API (ava/api.py): typed results, the CLI's one-line errors, and the same numbers as the CLI.

The in-memory paths (``ava.heads.memory``, ``extract(config, vfm=obj)``) have their own tests
(``tests/test_fingerprint_memory.py``); here a stand-in checks only that ``ava.fingerprint`` routes to them with
the right arguments.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

import ava
from ava.api import Fingerprint, HeadRun
from ava.cli.main import app
from ava.errors import AvaError

ABILITIES = ["color", "counting"]


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(data, cache): a small synthetic suite extracted with pixels, through the API."""
    base = tmp_path_factory.mktemp("api")
    data = ava.synthesize(base / "data", per_ava=30, ava=ABILITIES, size=64, seed=1, workers=1)
    assert isinstance(data, ava.DatasetResult) and (data.path / "dataset.json").is_file()
    result = ava.extract("pixels#size=64", data.path, base / "cache", device="cpu", num_workers=0, threads=1)
    assert isinstance(result, ava.ExtractResult)
    assert result.extracted == 60 and result.already_done == 0 and not result.failed
    again = ava.extract("pixels#size=64", data.path, base / "cache", device="cpu", num_workers=0)
    assert again.extracted == 0 and again.already_done == 60 and again.key == result.key
    return data.path, base / "cache"


def test_import_ava_is_light() -> None:
    code = "import sys, ava; ava.fingerprint; ava.Fingerprint; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_every_public_name_resolves() -> None:
    for name in ava.__all__:
        if name == "vfm_from_module":
            continue  # lives in ava.vfm.module (the in-memory VFM routes)
        assert getattr(ava, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        ava.nope  # noqa: B018


@pytest.mark.parametrize("bad", [3, None, 2.5, b"pixels", Path("pixels"), ["pixels"]])
def test_fingerprint_refuses_what_is_not_a_vfm(bad: Any) -> None:
    with pytest.raises(AvaError) as info:
        ava.fingerprint(vfm=bad, data="data")
    message = str(info.value)
    assert message.startswith(f"vfm={bad!r} ({type(bad).__name__}): give a VFM name as a str")
    assert "ava.vfm_from_module(module, ...)" in message and "\n" not in message


def test_fingerprint_of_a_name_needs_a_cache() -> None:
    with pytest.raises(AvaError, match=r"vfm='pixels' is a name: give the cache .* \(cache=DIR"):
        ava.fingerprint(vfm="pixels", data="data")
    with pytest.raises(AvaError, match="no dataset given"):
        ava.fingerprint(vfm="pixels")


@pytest.mark.slow
def test_fingerprint_matches_the_cli(suite: tuple[Path, Path], tmp_path: Path) -> None:
    data, cache = suite
    result = ava.fingerprint(
        "pixels#size=64", data, cache, tmp_path / "api", heads=["probe-linear", "knn"], device="cpu", threads=1
    )
    assert isinstance(result, Fingerprint)
    assert set(result.scores) == {"probe-linear", "knn"}
    assert set(result.scores["knn"]) == set(ABILITIES)
    assert result.directions == {"color": False, "counting": False}  # CIEDE2000 and MAE: lower is better
    assert result.metrics["color"] == "ciede2000" and result.n["knn"]["color"] == 6
    assert all(p.is_dir() for p in result.run_dirs.values())
    cli = CliRunner().invoke(
        app,
        [
            "fingerprint",
            "--vfm",
            "pixels#size=64",
            "--data",
            str(data),
            "--cache",
            str(cache),
            "--out",
            str(tmp_path / "cli"),
            "--head",
            "probe-linear,knn",
            "--device",
            "cpu",
            "--quiet",
            "--threads",
            "1",
        ],
    )
    assert cli.exit_code == 0, cli.output
    for head, scores in result.scores.items():
        saved = json.loads((tmp_path / "cli" / f"{head}-pixels_size_64" / "results_test.json").read_text())
        assert {a: r["value"] for a, r in saved["abilities"].items()} == scores


def test_train_evaluate_score_report(suite: tuple[Path, Path], tmp_path: Path) -> None:
    data, cache = suite
    run = ava.train_head(
        "knn", vfm="pixels#size=64", data=data, cache=cache, out=tmp_path / "knn", ava="color", device="cpu", k=[1, 5]
    )
    assert isinstance(run, HeadRun) and set(run.scores) == {"color"}
    again = ava.evaluate_head(run.run_dir, device="cpu")
    assert again.scores == run.scores
    # replies that are the reference answers score perfectly
    samples = ava.load_dataset(data).samples("color", "test")
    pred = tmp_path / "pred.jsonl"
    pred.write_text("".join(json.dumps({"id": s.id, "ava": s.ava, "prediction": s.answer}) + "\n" for s in samples))
    scored = ava.score(data, pred, ava="color", out=tmp_path / "scored")
    assert scored.scores == {"color": 0.0} and not scored.missing and not scored.unknown
    assert (tmp_path / "scored" / "results_test.json").is_file()
    report = ava.make_report([run.run_dir], tmp_path / "report", n_boot=100)
    assert report.markdown.is_file() and report.refused == []


def test_api_errors_are_the_cli_lines(suite: tuple[Path, Path], tmp_path: Path) -> None:
    data, cache = suite
    with pytest.raises(AvaError) as info:
        ava.train_head("knn", vfm="pixels", data=data, cache=cache, out=tmp_path / "r", epochs=3)
    line = "head 'knn' does not use --epochs (it trains nothing); leave them out"
    assert str(info.value) == line
    cli = CliRunner().invoke(
        app,
        [
            "head",
            "train",
            "--head",
            "knn",
            "--vfm",
            "pixels",
            "--data",
            str(data),
            "--cache",
            str(cache),
            "--out",
            str(tmp_path / "r"),
            "--epochs",
            "3",
        ],
    )
    assert cli.exit_code == 1 and str(cli.exception) == line  # CliRunner: main()'s one-line printing is not in it
    with pytest.raises(AvaError, match="missing required option"):
        ava.train_head("knn", data=data)
    with pytest.raises(AvaError, match=r"^test_frac: must be a number between 0 and 1 \(exclusive\), not 2$"):
        ava.split_data(data, test_frac=2)
    with pytest.raises(AvaError, match="max_train"):
        ava.fingerprint("pixels#size=64", data, cache, tmp_path / "f", max_train=0)
    with pytest.raises(AvaError, match="--pred .* would be overwritten"):
        ava.score(data, tmp_path / "results_test.json", out=tmp_path)


# -- routing of in-memory VFMs (the real functions are tested in their own modules) -------------------------------
calls: list[tuple[Any, ...]] = []


def stand_in_memory(vfm: Any, data: Any, **kw: Any) -> Any:
    calls.append((vfm, data, kw))
    return SimpleNamespace(scores={h: {"color": 1.5} for h in kw["heads"]}, n={"probe-linear": {"color": 6}})


def test_in_memory_vfm_without_cache_goes_to_the_in_memory_fingerprint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("ava.api.IN_MEMORY_FINGERPRINT", f"{__name__}:stand_in_memory")
    calls.clear()
    model = SimpleNamespace(spec=SimpleNamespace(key="my-vit-step-100"))
    result = ava.fingerprint(model, "data-dir", ava="color", device="cpu", max_train=50, seed=3)
    expected = {
        "abilities": ["color"],
        "heads": ("probe-linear", "knn"),
        "device": "cpu",
        "split": "test",
        "seed": 3,
        "max_train": 50,
        "progress": False,
    }
    assert calls == [(model, "data-dir", expected)]
    assert result.scores == {"probe-linear": {"color": 1.5}, "knn": {"color": 1.5}}
    assert result.vfm == "my-vit-step-100" and result.n == {"probe-linear": {"color": 6}} and not result.run_dirs
    with pytest.raises(AvaError, match="out: only with cache=DIR"):
        ava.fingerprint(model, "data-dir", out="runs")


def test_in_memory_vfm_with_cache_is_extracted_then_fingerprinted(
    suite: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ava.cache

    data, _ = suite
    real_extract = ava.cache.extract
    seen: list[Any] = []

    def extract_with_object(config: Any, vfm: Any = None) -> dict[str, Any]:
        seen.append((config.vfm, vfm))  # stand-in: extracts what the object would, the pixels floor
        return real_extract(replace(config, vfm="pixels#size=64", num_workers=0))

    monkeypatch.setattr(ava.cache, "extract", extract_with_object)
    model = SimpleNamespace(spec=SimpleNamespace(key="pixels"))
    result = ava.fingerprint(
        model, data, tmp_path / "cache", tmp_path / "runs", heads="knn", device="cpu", batch_size=8
    )
    assert seen == [("pixels", model)]
    assert set(result.scores) == {"knn"} and set(result.scores["knn"]) == set(ABILITIES)
    # fingerprinted from the cache, under the name the extraction stored (the stand-in's: pixels at 64 px)
    assert result.run_dirs["knn"].parent == tmp_path / "runs" and result.vfm.startswith("pixels")
    assert (result.run_dirs["knn"] / "results_test.json").is_file()
