"""Run a sweep plan (submitting only what is missing or failed) and report each job's state.

A job whose command changed since it last ran (another ability set, device or cache for the same run directory:
a second sweep with other settings into the same ``--out``) is refused unless ``force``, naming what changed, since
running it replaces that run; with ``force`` it is trained again with ``--force``. Every job ever run into ``--out``
stays in ``ava sweep status``, also those of an earlier plan.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ava.sweep.jobs import (
    BLOCKED,
    DONE,
    FAILED,
    PENDING,
    Job,
    JobState,
    blocked_error,
    check_graph,
    plan_jobs,
    result_files,
    topological,
)
from ava.sweep.plan import SweepError, SweepPlan, write_plan

FORCE = "--force"


def _current(plan: SweepPlan, jobs: list[Job], state: JobState) -> dict[str, dict[str, Any]]:
    """Every job's state record, refreshed from SLURM where it was submitted there (a job SLURM cancelled because
    a job it waits for failed is blocked, naming that job)."""
    records = {j.name: state.read(j) for j in jobs}
    if any(r.get("job_id") for r in records.values()):
        from ava.sweep.slurm import refresh_slurm, squeue_states

        queued = squeue_states()
        records = {j.name: refresh_slurm(j, records[j.name], state, queued) for j in jobs}
        for job in topological(jobs):
            r = records[job.name]
            bad = next((a for a in job.after if records.get(a, {}).get("state") in (FAILED, BLOCKED)), None)
            if bad and r.get("state") == FAILED and r.get("job_id") and not Path(r.get("result_file") or "").is_file():
                error = blocked_error(bad, records[bad]["state"], records[bad].get("error"))
                records[job.name] = state.write(job, state=BLOCKED, error=error)
    return records


def _command(argv: list[str]) -> list[str]:
    """A job's command without ``--force``: forcing once does not make the next plain rerun a change."""
    return [a for a in argv if a != FORCE]


def _options(argv: list[str]) -> dict[str, str]:
    """``--name value`` pairs of a command line (flags map to "")."""
    out: dict[str, str] = {}
    for i, a in enumerate(argv):
        if a.startswith("--"):
            nxt = argv[i + 1] if i + 1 < len(argv) else ""
            out[a] = "" if nxt.startswith("--") else nxt
    return out


def changes(before: list[str], now: list[str]) -> str:
    """What differs between two command lines, by option: ``--ava color there, ocr now``."""
    a, b = _options(_command(before)), _options(_command(now))
    said = [
        f"{k} {a.get(k) or '(none)'} there, {b.get(k) or '(none)'} now"
        for k in dict.fromkeys([*a, *b])
        if a.get(k) != b.get(k)
    ]
    return "; ".join(said) or "the command line"


def _changed(jobs: list[Job], records: dict[str, dict[str, Any]]) -> list[tuple[Job, list[str]]]:
    """Training jobs that ran before with another command into a run directory that is there: (job, old argv)."""
    out = []
    for job in jobs:
        old = records[job.name].get("job", {}).get("argv")
        if job.kind == "train" and old and _command(old) != job.argv and job.run_dir and Path(job.run_dir).exists():
            out.append((job, old))
    return out


def sweep(plan: SweepPlan, *, force: bool = False, progress: bool = False) -> dict[str, Any]:
    """Write the plan, then run (``local``) or submit (``slurm``) every job that is not done or in flight.

    ``force``: jobs whose command changed since they ran are trained again, replacing their runs (else refused
    before anything runs or is written). ``progress``: the local executor says when each job starts and ends.
    Returns ``{"plan": path, "submitted": [names], "skipped": [names], "jobs": status rows}``."""
    if plan.executor == "slurm":
        from ava.sweep.slurm import check_slurm

        check_slurm(plan.slurm)  # before anything is written or submitted
    jobs = plan_jobs(plan)
    check_graph(jobs)
    state = JobState(plan.folder)
    records = _current(plan, jobs, state)
    changed = _changed(jobs, records)
    if changed and not force:
        job, old = changed[0]
        more = f" (and {len(changed) - 1} other job(s))" if len(changed) > 1 else ""
        raise SweepError(
            f"{plan.out}: job {job.name} ran before with other settings ({changes(old, job.argv)}) into "
            f"{job.run_dir}{more}; give --force to train it again with these (its run is replaced), "
            "or sweep into another --out"
        )
    forced = {j.name for j, _ in changed}
    jobs = [Job(**{**j.__dict__, "argv": [*j.argv, FORCE]}) if j.name in forced else j for j in jobs]
    path = write_plan(plan)
    todo = [
        j
        for j in jobs
        if records[j.name].get("state", PENDING) in (PENDING, FAILED, BLOCKED)
        or _command(records[j.name].get("job", {}).get("argv") or []) != _command(j.argv)
    ]
    todo += [j for j in jobs if j.name in forced and j not in todo]
    finished = {j.name: records[j.name].get("state", PENDING) for j in jobs if j not in todo}
    if plan.executor == "slurm":
        from ava.sweep.slurm import submit_slurm

        submit_slurm(todo, state, plan.slurm, finished)
    else:
        from ava.sweep.local import run_local

        run_local(todo, state, plan.jobs, finished, progress=progress)
    return {
        "plan": str(path),
        "submitted": [j.name for j in todo],
        "skipped": [j.name for j in jobs if j not in todo],
        "jobs": status(plan)["jobs"],
    }


def _row(job: Job, r: dict[str, Any], current: bool) -> dict[str, Any]:
    return {
        "job": job.name,
        "kind": job.kind,
        "state": r.get("state", PENDING),
        "log": r.get("log"),
        "slurm_id": r.get("job_id"),
        "run_dir": job.run_dir,
        "results": result_files(job) if r.get("state") == DONE else [],
        "error": r.get("error") if r.get("state") in (FAILED, BLOCKED) else None,
        "current": current,
    }


def status(plan: SweepPlan) -> dict[str, Any]:
    """Each job's state, log path, SLURM id, and its result files (done) or error line (failed, blocked); the jobs
    of earlier plans run into the same ``out`` follow, with ``current`` false."""
    jobs = plan_jobs(plan)
    state = JobState(plan.folder)
    records = _current(plan, jobs, state)
    rows = [_row(job, records[job.name], True) for job in jobs]
    names = {j.name for j in jobs}
    for record in state.read_all():
        if record.get("name") not in names and isinstance(record.get("job"), dict):
            try:
                job = Job.from_record(record["job"])
            except TypeError:  # a record of another ava version: shown by name only
                job = Job(str(record["name"]), str(record.get("kind", "")), "", [])
            rows.append(_row(job, record, False))
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["state"]] = counts.get(row["state"], 0) + 1
    return {"plan": str(plan.folder / "plan.toml"), "counts": counts, "jobs": rows}
