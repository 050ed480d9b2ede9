"""docs/performance.md is rendered from the committed results files (benchmarks/results/*.json), which follow the
schema benchmarks/results.py writes; the benchmark scripts' ``--json`` records through that one writer."""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT / "benchmarks"))

import results  # noqa: E402  (benchmarks/results.py)


def _make_performance():
    spec = importlib.util.spec_from_file_location("make_performance", ROOT / "docs" / "make_performance.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_page_is_the_scripts_output() -> None:
    page = (ROOT / "docs" / "performance.md").read_text()
    assert page == _make_performance().render(), "docs/performance.md is stale: run python docs/make_performance.py"


@pytest.mark.parametrize("path", sorted(RESULTS_DIR.glob("*.json")), ids=lambda p: p.name)
def test_every_results_file_follows_the_schema(path: Path) -> None:
    data = json.loads(path.read_text())
    assert results.schema_errors(data) == []
    assert path == results.results_path(data["device"], data["date"], data["torch"], RESULTS_DIR)
    assert data["figures"], "a results file holds figures"
    for f in data["figures"].values():
        assert f["unit"] is not None and f["command"].strip()
        assert f["target"] is None or re.match(r"(<=|>=|<|>|\d|all|0)", f["target"]), f["target"]


def test_each_device_has_results_and_the_gpu_targets_are_held() -> None:
    """The committed record covers the GPUs and the CPUs, and holds each GPU figure the project has a target for."""
    latest = _make_performance().latest(_make_performance().load())
    assert {"nvidia-h100", "nvidia-h200", "cpu-2c-amd-epyc", "cpu-2c-intel-xeon"} <= latest.keys()
    h200 = {f["figure"]: f["target"] for f in latest["nvidia-h200"]["figures"].values()}
    assert h200["extraction / forward, siglip:random"] == ">= 0.8"
    assert h200["LLM head MFU (measured matmul), cached, steady"] == ">= 40%"
    assert h200["compile warm-up, cached"] == "<= 20 s"
    assert h200["14-ability fingerprint at real size, every read at its measured rate"] == "<= 300 s"


def _write(root: Path, slug: str, date: str, value: float, figure: str = "f") -> None:
    device = {"slug": slug, "kind": "cpu", "name": slug.upper()}
    f = results.figure(figure, value, "s", "<= 1 s")
    results.record(
        "bench_x",
        [{**f, "command": "python benchmarks/bench_x.py"}],
        [],
        device=device,
        date=date,
        root=root,
        environment={"torch": "2.13.0+cpu"},
    )


def test_the_page_shows_each_devices_latest_value_of_each_figure(tmp_path: Path) -> None:
    mp = _make_performance()
    _write(tmp_path, "cpu-a", "2026-01-02", 2.0)
    _write(tmp_path, "cpu-a", "2026-01-01", 1.0)  # older, written later: the date decides
    _write(tmp_path, "cpu-a", "2026-01-01", 5.0, figure="g")  # only measured then: still shown
    _write(tmp_path, "cpu-b", "2026-01-03", 3.0)
    page = mp.render(tmp_path)
    a, b = page.split("## CPU-A")[1].split("## CPU-B")
    assert "| f | 2.0 s | <= 1 s | - | 2026-01-02 |" in a and "| 1.0 s" not in a
    assert "| g | 5.0 s | <= 1 s | - | 2026-01-01 |" in a
    assert "measured 2026-01-01 to 2026-01-02" in a
    assert "| f | 3.0 s |" in b


def test_a_results_file_off_the_schema_is_refused_by_name(tmp_path: Path) -> None:
    _write(tmp_path, "cpu-a", "2026-01-02", 2.0)
    bad = tmp_path / "cpu-b-2026-01-02-torch2.13.0.cpu.json"
    bad.write_text(json.dumps({"schema": 1, "device": {"slug": "cpu-b"}, "date": "2 Jan", "figures": {}}))
    with pytest.raises(SystemExit, match=re.escape(str(bad))) as e:
        _make_performance().render(tmp_path)
    assert "no 'torch'" in str(e.value) and "date '2 Jan'" in str(e.value)


def test_check_fails_on_a_stale_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mp = _make_performance()
    monkeypatch.setattr(mp, "PAGE", tmp_path / "performance.md")
    monkeypatch.setattr(sys, "argv", ["make_performance.py", "--check"])
    assert mp.main() == 1  # no page yet
    monkeypatch.setattr(sys, "argv", ["make_performance.py"])
    assert mp.main() == 0
    monkeypatch.setattr(sys, "argv", ["make_performance.py", "--check"])
    assert mp.main() == 0
    mp.PAGE.write_text(mp.PAGE.read_text() + "edited by hand\n")
    assert mp.main() == 1


def test_json_records_alone_and_writes_a_named_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(results, "RESULTS", tmp_path / "results")
    p = argparse.ArgumentParser()
    results.json_option(p)
    assert p.parse_args([]).json is None
    alone, named = p.parse_args(["--json"]).json, p.parse_args(["--json", str(tmp_path / "out.json")]).json
    figures = [results.figure("speed", 1.5, "s", "<= 2 s")]
    assert results.write(None, "bench_x", figures, [{"a": 1}], {"whole": True}) is None
    path = results.write(named, "bench_x", figures, [{"a": 1}], {"whole": True, "at": tmp_path})
    assert path == tmp_path / "out.json" and json.loads(path.read_text()) == {"whole": True, "at": str(tmp_path)}
    path = results.write(alone, "bench_x", figures, [{"a": 1}], {"whole": True}, device="cpu")
    data = json.loads(path.read_text())
    assert path.parent == tmp_path / "results" and results.schema_errors(data) == []
    assert data["figures"]["bench_x/speed"]["value"] == 1.5 and data["rows"] == {"bench_x": [{"a": 1}]}
    # a second run replaces the figures it measures again, and keeps the others (another mode of the script)
    results.write(alone, "bench_x", [results.figure("other", 3, "ms")], [{"b": 2}], None, device="cpu")
    data = json.loads(path.read_text())
    assert set(data["figures"]) == {"bench_x/speed", "bench_x/other"} and data["rows"] == {"bench_x": [{"b": 2}]}


@pytest.mark.parametrize(("given", "said"), [("{tmp}", "is a folder"), ("{tmp}/no/x.json", "no folder")])
def test_a_json_file_that_cannot_be_written_is_refused_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], given: str, said: str
) -> None:
    p = argparse.ArgumentParser()
    results.json_option(p)
    with pytest.raises(SystemExit):
        p.parse_args(["--json", given.format(tmp=tmp_path)])
    assert said in capsys.readouterr().err


def test_no_benchmark_script_writes_its_own_json() -> None:
    """Every ``--json`` is results.json_option: alone it records through results.py; with FILE it writes FILE."""
    own = [
        p.name
        for p in sorted((ROOT / "benchmarks").glob("*.py"))
        if p.name != "results.py" and re.search(r"add_argument\(\s*\"--json\"", p.read_text())
    ]
    assert own == []
    users = [p.name for p in (ROOT / "benchmarks").glob("*.py") if "results.json_option(" in p.read_text()]
    assert len(users) >= 20, users


def test_the_page_shows_the_latest_scale_run_per_device_with_its_causes(tmp_path: Path) -> None:
    """bench_scale's rows become a table per device: a cell per stage and size (seconds, MB), the growth between
    sizes against its limit, and the cause of each stage over it; a later run replaces an earlier one."""
    mp = _make_performance()
    device = {"slug": "cpu-a", "kind": "cpu", "name": "CPU-A"}

    def run(date: str, knn_s: float) -> None:
        rows = [
            {"stage": "info", "samples": 2100, "wall_s": 0.4, "peak_rss_mb": 100.0},
            {"stage": "info", "samples": 21000, "wall_s": 0.6, "peak_rss_mb": 150.4},
            {"stage": "knn", "samples": 2100, "wall_s": 4.0, "peak_rss_mb": 300.0},
            {"stage": "knn", "samples": 21000, "wall_s": knn_s, "peak_rss_mb": 310.0, "time_x": knn_s / 4,
             "memory_x": 1.03, "limit_x": 12.5, "over": ["time"], "cause": "quadratic | search"},
        ]  # fmt: skip
        rows[1].update(time_x=1.5, memory_x=1.5, limit_x=12.5)
        figure = results.figure("growth of `knn`", knn_s / 4, "x", "<= 12.5x")
        results.record("bench_scale", [{**figure, "command": "python benchmarks/bench_scale.py --sizes 2100,21000"}],
                       rows, device=device, date=date, root=tmp_path, environment={"torch": "2.13.0+cpu"})  # fmt: skip

    run("2026-01-02", 80.0)
    run("2026-01-01", 60.0)  # older: the later date's run is shown
    page = mp.render(tmp_path)
    scale = page.split("## How each stage grows with the samples")[1]
    assert "`cpu-a`, measured 2026-01-02: `python benchmarks/bench_scale.py --sizes 2100,21000`." in scale
    assert "| stage | 2,100 samples | 21,000 samples | 2,100 -> 21,000: time / memory |" in scale
    assert "| `info` | 0.4 s, 100 MB | 0.6 s, 150 MB | 1.5x / 1.5x (limit 12.5x) |" in scale
    assert "| `knn` | 4.0 s, 300 MB | 80.0 s, 310 MB | 20.0x / 1.03x (limit 12.5x) **over** |" in scale
    assert "- `knn`, 21,000 samples: quadratic \\| search" in scale
    _write(tmp_path / "other", "cpu-b", "2026-01-02", 2.0)  # results without a scale run: no such section
    assert "## How each stage grows" not in mp.render(tmp_path / "other")
