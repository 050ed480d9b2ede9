"""A sweep's cost before it runs: the speed table (figures with their provenance), the estimate of each job from
its shapes, the simulated schedule over the jobs' graph on the slots given, ``--dry-run`` (nothing written), the
estimate beside the time taken in ``ava sweep status``, and ``--calibrate`` (this machine timed first)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

import ava
from ava.cache.plan import group_bytes
from ava.cost import data_shape, extract_estimate, head_estimate, speeds_for, vfm_shape
from ava.cost.speeds import FIGURES, CostError, save_calibration, table
from ava.sweep.estimate import simulate
from ava.sweep.jobs import DONE, Job
from ava.sweep.slots import Slots
from tests.helpers import recorder, run_cli


@pytest.fixture
def data(cache_data: Path) -> Path:
    return cache_data


def test_every_figure_of_the_table_says_when_and_where_it_was_measured() -> None:
    devices = table()["devices"]
    assert {"nvidia-h100", "nvidia-h200", "cpu"} <= set(devices)
    for kind, entry in devices.items():
        assert set(entry["figures"]) == set(FIGURES), kind
        for name, f in entry["figures"].items():
            assert isinstance(f["value"], (int, float)) and f["value"] >= 0, (kind, name)
            assert f["date"] and f["source"] and f["from"] and "unit" in f, (kind, name)
    # the H200's forward rate is its recorded 530 SigLIP-so400m images a second at 2 x 428.2M x 729 FLOP each
    h200 = devices["nvidia-h200"]["figures"]["forward_flops_per_s"]
    assert math.isclose(h200["value"], 530 * 2 * 428_225_600 * 729, rel_tol=1e-3)
    recorded = Path(__file__).resolve().parent.parent / h200["source"]
    figures = json.loads(recorded.read_text())["figures"]
    assert figures["bench_cache/forward only, siglip:random"]["value"] == 530
    assert "borrowed" in devices["nvidia-h100"]["figures"]["extract_efficiency"]["from"]


def test_an_unknown_device_kind_is_refused_naming_the_kinds() -> None:
    with pytest.raises(CostError, match=r"no speed figures for device kind 'tpu-v5' \(the table has cpu, nvidia-h100"):
        speeds_for("tpu-v5")


def test_an_extraction_costs_its_images_forward_and_writes_its_group(data: Path) -> None:
    shape, vit = data_shape(data), vfm_shape("siglip2")
    h100, h200 = speeds_for("nvidia-h100", calibrated=False), speeds_for("nvidia-h200", calibrated=False)
    est = extract_estimate(vit, shape, h200)
    assert est.bytes == group_bytes("fp16", shape.images, 729, 1152, 1, ["mean", "grid2", "grid4"])["total"]
    per_image = max(vit.forward_flops / h200.forward_flops_per_s, h200.prep_s_per_mpix * (shape.mpix + 0.147456))
    assert math.isclose(est.parts["images"], shape.images * per_image / h200.extract_efficiency, rel_tol=1e-6)
    assert extract_estimate(vit, shape, h100).seconds > est.seconds  # the H100's forward is slower
    two = extract_estimate(vit, shape, h200, gpus=2)
    assert two.parts["images"] < est.parts["images"] and two.bytes == est.bytes  # torchrun splits the images


def test_a_head_job_costs_its_abilities_samples_reads_and_fit(data: Path) -> None:
    shape, vit = data_shape(data), vfm_shape("siglip2")
    h200 = speeds_for("nvidia-h200", calibrated=False)
    knn = head_estimate("knn", vit, shape, [], h200)
    assert math.isclose(knn.parts["abilities"], 2 * h200.ability_s)  # color and counting
    n = sum(c.train + c.test for c in shape.abilities.values())
    assert math.isclose(knn.parts["samples"], n * h200.sample_s)
    one = head_estimate("knn", vit, shape, ["color"], h200)
    assert one.seconds < knn.seconds
    probe = head_estimate("probe-linear", vit, shape, [], h200)
    assert probe.parts["fit"] >= h200.probe_linear_step_s * 5 * 2  # at least 5 epochs of one step, per ability
    llm = head_estimate("llm", vit, shape, [], h200)
    assert llm.parts["warmup"] == h200.llm_warmup_s and llm.bytes > probe.bytes  # LoRA adapters per ability
    with pytest.raises(CostError, match=r"no LLM-head figures for cpu"):
        head_estimate("llm", vit, shape, [], speeds_for("cpu", calibrated=False))


def test_the_simulated_schedule_is_the_executors(data: Path) -> None:
    """Two slots; A (10 s) waits for nothing and B (5 s) waits for A; C (3 s) and D (1 s) are free: A and C start at
    once (the most work waits on A), D takes C's slot at 3 s, B starts when A ends."""
    from ava.cost import Estimate

    jobs = [
        Job("C", "train", "v", []),
        Job("A", "extract", "v", []),
        Job("B", "train", "v", [], after=["A"]),
        Job("D", "train", "v", []),
    ]
    seconds = {"A": 10.0, "B": 5.0, "C": 3.0, "D": 1.0}
    rows = {r["job"]: r for r in simulate(jobs, Slots(2, ["0", "1"]), {k: Estimate(v, 0) for k, v in seconds.items()})}
    assert [(rows[j]["start"], rows[j]["end"]) for j in "ACDB"] == [(0, 10), (0, 3), (3, 4), (10, 15)]
    assert rows["A"]["gpus"] == ["0"] and rows["C"]["gpus"] == ["1"] and rows["D"]["gpus"] == ["1"]


def test_a_dry_run_prints_the_cost_and_writes_nothing(data: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("AVA_HOME", str(tmp_path / "home"))
    grid = ["--vfm", "siglip2,dinov2", "--head", "knn,probe-linear", "--data", str(data)]
    grid += ["--cache", str(tmp_path / "c"), "--out", str(tmp_path / "runs")]
    code, output = run_cli(
        ["sweep", *grid, "--gpus", "4", "--dry-run", "--device-kind", "nvidia-h200"], capsys, monkeypatch
    )
    assert code == 0, output
    assert "estimate on nvidia-h200 (the speed table's nvidia-h200 figures)" in output
    assert "4 job(s) at once on GPU(s) 0,1,2,3" in output and "6 job(s), 6 would run" in output
    assert "extract-siglip2" in output and "total: 6 job(s)" in output and "device-hours" in output
    assert not (tmp_path / "runs").exists() and not (tmp_path / "c").exists()
    result = ava.run_sweep(
        ["siglip2", "dinov2"],
        head=["knn", "probe-linear"],
        data=data,
        cache=tmp_path / "c",
        out=tmp_path / "runs",
        gpus=4,
        dry_run=True,
        device_kind="nvidia-h200",
    )
    est = result.estimate
    assert result.plan is None and result.dry_run and len(est["jobs"]) == 6
    assert math.isclose(est["gpu_hours"], sum(j["seconds"] for j in est["jobs"]) / 3600, rel_tol=1e-3)
    assert est["wall_s"] == pytest.approx(max(j["end"] for j in est["jobs"]), abs=0.01)
    assert est["wall_s"] < sum(j["seconds"] for j in est["jobs"])  # jobs ran side by side
    by = {j["job"]: j for j in est["jobs"]}
    assert by["knn-siglip2"]["start"] >= by["extract-siglip2"]["end"]  # after its own extraction only
    assert ava.sweep_estimate(["siglip2"], head="knn", data=data, cache=tmp_path / "c", out=tmp_path / "runs")[
        "device"
    ] in ("cpu", "nvidia-h100", "nvidia-h200")
    assert not (tmp_path / "runs").exists()


def test_status_shows_each_jobs_estimate_beside_the_time_it_took(data: Path, tmp_path: Path, monkeypatch) -> None:
    from ava.sweep import run
    from ava.sweep.plan import make_plan

    monkeypatch.setenv("AVA_HOME", str(tmp_path / "home"))
    ev = tmp_path / "events"
    jobs = [
        Job("extract-pixels", "extract", "pixels", recorder(ev, "extract-pixels")),
        Job("knn-pixels", "train", "pixels", recorder(ev, "knn-pixels"), "knn", after=["extract-pixels"]),
    ]
    monkeypatch.setattr(run, "plan_jobs", lambda plan: jobs)
    plan = make_plan(
        {"vfm": "pixels", "head": "knn", "data": str(data), "cache": str(tmp_path / "c"), "out": str(tmp_path / "r")}
    )
    result = run.sweep(plan)
    rows = {r["job"]: r for r in result["jobs"]}
    assert {r["state"] for r in rows.values()} == {DONE}
    for name in ("extract-pixels", "knn-pixels"):
        expected = next(j for j in result["estimate"]["jobs"] if j["job"] == name)
        assert rows[name]["estimate_s"] == expected["seconds"] > 0 and rows[name]["elapsed_s"] > 0
    assert run.sweep(plan)["submitted"] == []  # done: nothing runs again


def test_a_calibration_on_this_host_takes_precedence_for_its_device_kind(tmp_path: Path, monkeypatch) -> None:
    """The storage of calibrated figures (the values written here test where they go, not a measurement)."""
    monkeypatch.setenv("AVA_HOME", str(tmp_path / "home"))
    path = save_calibration("cpu", {"job_start_s": 1.5}, {"random-vit": {"forward_s": 0.25, "load_s": 0.5}}, threads=2)
    assert path.parent == tmp_path / "home" / "speeds" and json.loads(path.read_text())["threads"] == 2
    speeds = speeds_for("cpu")
    assert speeds.job_start_s == 1.5 and speeds.vfm_forward_s == {"random-vit": 0.25} and speeds.threads == 2
    assert speeds.source.startswith("calibrated on ")
    assert speeds_for("cpu", calibrated=False).job_start_s != 1.5
    path.write_text("[1, 2]")
    with pytest.raises(CostError, match=r"not a speed calibration"):
        speeds_for("cpu")


def test_a_job_given_fewer_threads_than_the_figures_computes_slower(data: Path) -> None:
    cpu = speeds_for("cpu", calibrated=False)
    vit, shape = vfm_shape("random-vit"), data_shape(data)
    whole = extract_estimate(vit, shape, cpu, threads=cpu.threads)
    half = extract_estimate(vit, shape, cpu, threads=max(1, cpu.threads // 2))
    assert half.parts["images"] >= whole.parts["images"] and half.parts["start"] == whole.parts["start"]


@pytest.mark.slow
def test_calibrate_times_this_machine_in_seconds_and_the_estimate_uses_it(
    data: Path, tmp_path: Path, capsys, monkeypatch
) -> None:
    monkeypatch.setenv("AVA_HOME", str(tmp_path / "home"))
    grid = ["sweep", "--vfm", "pixels,random-vit", "--head", "knn", "--data", str(data), "--device", "cpu"]
    grid += ["--cache", str(tmp_path / "c"), "--out", str(tmp_path / "runs"), "--dry-run", "--calibrate", "--json"]
    code, output = run_cli(grid, capsys, monkeypatch)
    assert code == 0, output
    est = json.loads(output[output.index("{") :])["estimate"]
    assert est["speeds"].startswith("calibrated on ")
    saved = json.loads(next((tmp_path / "home" / "speeds").glob("cpu-*.json")).read_text())
    assert set(saved["vfm"]) == {"pixels", "random-vit"} and saved["seconds"] < 120
    assert saved["vfm"]["random-vit"]["forward_s"] > 0 and saved["figures"]["job_start_s"] > 0
    assert sys.executable  # the calibration ran in its own process (python -m ava.cost.calibrate)
