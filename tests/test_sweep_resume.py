"""A local sweep whose driver is killed (``kill -9``) and run again: jobs still running are adopted (their GPUs stay
taken until they end), jobs that died with it run again, and what was waiting starts on the GPUs free now (a GPU
another process filled meanwhile is skipped). The driver is a real process running a real plan on a machine of
five GPUs described by ``AVA_GPU_INVENTORY``; its jobs record their GPUs and wait for files the test writes, so
every kill and check happens at a known point."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ava.sweep import run
from ava.sweep.jobs import DONE, FAILED, RUNNING, Job, JobState
from ava.sweep.plan import SweepError, load_plan
from ava.sweep.run import status, sweep
from tests.helpers import events, gpu_inventory, pid_gone, recorder, wait_for_line, when

# the driver: a real plan and run.sweep, its jobs replaced by recording ones (the executor's logic under test)
DRIVER = """
import json, sys
from ava.sweep import run
from ava.sweep.jobs import Job
from ava.sweep.plan import load_plan
spec = json.load(open(sys.argv[1]))
run.plan_jobs = lambda plan: [Job(**j) for j in spec["jobs"]]
run.sweep(load_plan(spec["plan"]), progress=True)
"""

PROGRESS_JOB = """
import os, sys, time
from ava.progress import progress
hold = sys.argv[1]
with progress(False) as bar:
    task = bar.add_task("extract", total=10)
    bar.advance(task, 3)
    bar.stop()  # written now (a bar writes at most once a second, and when it stops)
    while not os.path.exists(hold):
        time.sleep(0.01)
"""


def _start_driver(spec: Path, env: dict[str, str], log: Path) -> subprocess.Popen:
    out = open(log, "w")  # noqa: SIM115 - the driver's stderr, read by the test while it runs
    return subprocess.Popen([sys.executable, "-c", DRIVER, str(spec)], stdout=out, stderr=subprocess.STDOUT, env=env)


@pytest.fixture
def sweep_dir(tmp_path: Path, cache_data_6: Path) -> Path:
    data = cache_data_6
    out = tmp_path / "runs"
    (tmp_path / "plan.toml").write_text(
        f'vfm = ["pixels"]\nhead = ["knn"]\ndata = "{data}"\ncache = "{tmp_path / "cache"}"\nout = "{out}"\n'
        'gpus = "all"\ndevice = "auto"\n'
    )
    return tmp_path


@pytest.mark.slow
def test_kill_9_of_the_driver_then_a_rerun_adopts_reruns_and_reassigns(sweep_dir: Path, monkeypatch) -> None:
    tmp = sweep_dir
    ev, inv = tmp / "events", gpu_inventory(tmp / "gpus.csv", [80, 80, 80, 80, 80])
    go = {k: tmp / f"go-{k}" for k in ("a", "b", "c")}
    (tmp / "progress_job.py").write_text(PROGRESS_JOB)
    jobs = [
        Job("extract-a", "extract", "pixels", recorder(ev, "extract-a", hold=go["a"])),
        Job("extract-b", "extract", "pixels", recorder(ev, "extract-b")),
        Job("knn-b", "train", "pixels", recorder(ev, "knn-b", hold=go["b"]), "knn", after=["extract-b"]),
        Job("knn-a", "train", "pixels", recorder(ev, "knn-a"), "knn", after=["extract-a"]),
        Job("progress-c", "train", "pixels", [sys.executable, str(tmp / "progress_job.py"), str(go["c"])], "knn"),
    ]
    spec = tmp / "spec.json"
    spec.write_text(json.dumps({"plan": str(tmp / "plan.toml"), "jobs": [j.__dict__ for j in jobs]}))
    env = {**os.environ, "AVA_GPU_INVENTORY": str(inv), "AVA_HOME": str(tmp / "home"), "WAIT_S": "120"}
    monkeypatch.setenv("AVA_GPU_INVENTORY", str(inv))
    monkeypatch.setattr(run, "plan_jobs", lambda plan: jobs)  # this process's status and sweep see the same jobs
    plan = load_plan(tmp / "plan.toml")
    state = JobState(plan.folder)
    by_name = {j.name: j for j in jobs}
    orphans: list[int] = []
    try:
        first = _start_driver(spec, env, tmp / "driver1.log")
        wait_for_line(ev, "start knn-b")
        wait_for_line(ev, "start extract-a")
        wait_for_line(tmp / "driver1.log", "running progress-c")
        wait_for_line(state.progress_file(by_name["progress-c"]), "extract")
        os.kill(first.pid, signal.SIGKILL)  # the known point: knn-b, extract-a and progress-c hold their GPUs
        first.wait()
        records = {n: state.read(j) for n, j in by_name.items()}
        orphans = [records[n]["pid"] for n in ("extract-a", "knn-b", "progress-c")]
        # knn-b dies too (its wrapper and its command): it must run again; extract-a and progress-c live on
        knn_b_job = int(next(r["pid"] for r in events(ev) if r["job"] == "knn-b"))
        for pid in (records["knn-b"]["pid"], knn_b_job):
            os.kill(pid, signal.SIGKILL)
        pid_gone(records["knn-b"]["pid"])

        rows = {r["job"]: r for r in status(plan)["jobs"] if r["job"] in by_name}
        assert rows["extract-a"]["state"] == RUNNING and rows["extract-a"]["gpus"] == records["extract-a"]["gpus"]
        assert rows["progress-c"]["progress"] == "extract 3/10 (30%)"
        assert rows["knn-b"]["state"] == FAILED and rows["knn-b"]["error"].startswith("interrupted")
        assert rows["extract-b"]["state"] == DONE and rows["knn-a"]["state"] == "pending"

        held = {g for n in ("extract-a", "progress-c") for g in records[n]["gpus"]}
        free = sorted({"0", "1", "2", "3", "4"} - held)
        busy = free[0]  # another process fills the first free GPU now: the rerun must not use it
        gpu_inventory(inv, [1.0 if str(i) == busy else 80.0 for i in range(5)])
        second = _start_driver(spec, env, tmp / "driver2.log")
        log2 = wait_for_line(tmp / "driver2.log", "running knn-b")
        assert "adopted extract-a: still running on GPU" in log2 and "adopted progress-c" in log2
        assert f"skipped GPU {busy} (NVIDIA H100 80GB HBM3: 1.0 of 80.0 GB free" in log2
        with pytest.raises(SweepError, match=r"another `ava sweep` is running this plan"):
            sweep(plan)
        go["a"].touch()
        wait_for_line(ev, "start knn-a")
        go["b"].touch()
        go["c"].touch()
        assert second.wait(timeout=120) == 0, (tmp / "driver2.log").read_text()
    finally:
        for f in go.values():
            f.touch()
        for pid in orphans:
            pid_gone(pid)
    rows = events(ev)
    starts = [r for r in rows if r["what"] == "start"]
    assert [r["job"] for r in starts].count("extract-a") == 1  # adopted, never started twice
    assert [r["job"] for r in starts].count("knn-b") == 2  # died with the driver: run again
    # a GPU was free all along: knn-a waited for the adopted extraction it depends on, not for a slot
    assert when(rows, "end", "extract-a") < when(rows, "start", "knn-a")
    gpus = {r["job"]: r["gpus"] for r in starts}  # the last start of each
    assert gpus["knn-a"] != busy and gpus["knn-b"] != busy
    # knn-a started while the rerun knn-b and the adopted progress-c still held their GPUs
    assert gpus["knn-a"] not in {gpus["knn-b"], *state.read(by_name["progress-c"])["gpus"]}
    final = {r["job"]: r for r in status(plan)["jobs"] if r["job"] in by_name}
    assert {r["state"] for r in final.values()} == {DONE}, final
    assert final["knn-a"]["gpus"] == [gpus["knn-a"]] and final["knn-a"]["elapsed_s"] is not None
