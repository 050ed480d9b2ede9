"""Run a sweep plan (submitting only what is missing or failed) and report each job's state."""

from __future__ import annotations

from typing import Any

from ava.sweep.jobs import BLOCKED, DONE, FAILED, PENDING, Job, JobState, plan_jobs, result_files
from ava.sweep.plan import SweepPlan, write_plan


def _current(plan: SweepPlan, jobs: list[Job], state: JobState) -> dict[str, dict[str, Any]]:
    """Every job's state record, refreshed from SLURM where it was submitted there."""
    records = {j.name: state.read(j) for j in jobs}
    if any(r.get("job_id") for r in records.values()):
        from ava.sweep.slurm import refresh_slurm, squeue_states

        queued = squeue_states()
        records = {j.name: refresh_slurm(j, records[j.name], state, queued) for j in jobs}
    return records


def sweep(plan: SweepPlan) -> dict[str, Any]:
    """Write the plan, then run (``local``) or submit (``slurm``) every job that is not done or in flight.

    Returns ``{"plan": path, "submitted": [names], "skipped": [names], "jobs": status rows}``."""
    if plan.executor == "slurm":
        from ava.sweep.slurm import check_slurm

        check_slurm(plan.slurm)  # before anything is written or submitted
    path = write_plan(plan)
    jobs = plan_jobs(plan)
    state = JobState(plan.folder)
    records = _current(plan, jobs, state)
    todo = [j for j in jobs if records[j.name].get("state", PENDING) in (PENDING, FAILED, BLOCKED)
            or records[j.name].get("job", {}).get("argv") != j.argv]  # a job whose command changed runs again
    finished = {j.name: records[j.name].get("state", PENDING) for j in jobs if j not in todo}
    if plan.executor == "slurm":
        from ava.sweep.slurm import submit_slurm

        submit_slurm(todo, state, plan.slurm, finished)
    else:
        from ava.sweep.local import run_local

        run_local(todo, state, plan.jobs, finished)
    return {"plan": str(path), "submitted": [j.name for j in todo],
            "skipped": [j.name for j in jobs if j not in todo], "jobs": status(plan)["jobs"]}  # fmt: skip


def status(plan: SweepPlan) -> dict[str, Any]:
    """Each job's state, log path, SLURM id, and its result files (done) or error line (failed, blocked)."""
    jobs = plan_jobs(plan)
    state = JobState(plan.folder)
    records = _current(plan, jobs, state)
    rows = []
    for job in jobs:
        r = records[job.name]
        rows.append({"job": job.name, "kind": job.kind, "state": r.get("state", PENDING), "log": r.get("log"),
                     "slurm_id": r.get("job_id"), "run_dir": job.run_dir,
                     "results": result_files(job) if r.get("state") == DONE else [],
                     "error": r.get("error") if r.get("state") in (FAILED, BLOCKED) else None})  # fmt: skip
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["state"]] = counts.get(row["state"], 0) + 1
    return {"plan": str(plan.folder / "plan.toml"), "counts": counts, "jobs": rows}
