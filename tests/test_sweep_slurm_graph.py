"""The jobs' graph on a real one-node SLURM cluster (``bash .ci/slurm-up.sh``; skipped when none answers here):
``Job.after`` becomes ``--dependency=afterok`` on the SLURM ids of the jobs waited for, a chain runs in order, and
the jobs after a failed one are cancelled by SLURM and shown blocked, naming it."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from ava.sweep.jobs import BLOCKED, DONE, FAILED, Job
from tests.helpers import events, recorder, slurm_up, when


@pytest.mark.slow
@pytest.mark.skipif(not slurm_up(), reason="no SLURM cluster answers here (start one: bash .ci/slurm-up.sh)")
def test_a_chain_runs_in_order_on_slurm_and_a_failure_blocks_what_follows(
    tmp_path: Path, monkeypatch, cache_data_6: Path
) -> None:
    pytest.importorskip("submitit")
    from ava.sweep import run
    from ava.sweep.plan import make_plan

    data = cache_data_6
    ev = tmp_path / "events"
    jobs = [
        Job("extract-a", "extract", "pixels", recorder(ev, "extract-a")),
        Job("stage1-a", "train", "pixels", recorder(ev, "stage1-a"), "knn", after=["extract-a"]),
        Job("stage2-a", "train", "pixels", recorder(ev, "stage2-a"), "knn", after=["stage1-a"]),
        Job("extract-b", "extract", "pixels", recorder(ev, "extract-b", fail="no such image")),
        Job("stage1-b", "train", "pixels", recorder(ev, "stage1-b"), "knn", after=["extract-b"]),
        Job("stage2-b", "train", "pixels", recorder(ev, "stage2-b"), "knn", after=["stage1-b"]),
    ]
    monkeypatch.setattr(run, "plan_jobs", lambda plan: jobs)
    partition = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True).stdout.split()[0]
    plan = make_plan(
        {
            "vfm": "pixels",
            "head": "knn",
            "data": str(data),
            "cache": str(tmp_path / "c"),
            "out": str(tmp_path / "runs"),
            "executor": "slurm",
            "slurm": {"partition": partition.rstrip("*"), "time_min": 10},
        }
    )
    first = run.sweep(plan)
    assert all(r["slurm_id"] for r in first["jobs"])
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        rows = {r["job"]: r for r in run.status(plan)["jobs"]}
        if all(r["state"] in (DONE, FAILED, BLOCKED) for r in rows.values()):
            break
        time.sleep(1)
    states = {n: r["state"] for n, r in rows.items()}
    assert states == {
        "extract-a": DONE,
        "stage1-a": DONE,
        "stage2-a": DONE,
        "extract-b": FAILED,
        "stage1-b": BLOCKED,
        "stage2-b": BLOCKED,
    }, rows
    assert rows["stage1-b"]["error"].startswith("the job it waits for, extract-b failed")
    assert rows["stage2-b"]["error"].startswith("the job it waits for, stage1-b is blocked")
    order = events(ev)
    assert when(order, "end", "extract-a") < when(order, "start", "stage1-a") < when(order, "start", "stage2-a")
    assert not any(r["job"].startswith("stage") and r["job"].endswith("-b") for r in order)
