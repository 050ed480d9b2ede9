"""Run a sweep plan (submitting only what is missing or failed) and report each job's state.

A job whose command changed since it last ran (another ability set, device or cache for the same run directory:
a second sweep with other settings into the same ``--out``) is refused unless ``force``, naming what changed, since
running it replaces that run; with ``force`` it is trained again with ``--force``. Every job ever run into ``--out``
stays in ``ava sweep status``, also those of an earlier plan.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ava.errors import redact, remove_dead_temp_files
from ava.sweep.jobs import (
    BLOCKED,
    DONE,
    FAILED,
    PENDING,
    RUNNING,
    Job,
    JobState,
    blocked_error,
    check_graph,
    plan_jobs,
    result_files,
    topological,
)
from ava.sweep.plan import PLAN_FILE, SlurmOptions, SweepError, SweepPlan, write_plan

FORCE = "--force"


def _current(jobs: list[Job], state: JobState) -> dict[str, dict[str, Any]]:
    """Every job's state record as it is now, nothing written: refreshed from SLURM where it was submitted there (a
    job SLURM cancelled because a job it waits for failed is blocked, naming that job); a local job recorded running
    whose process has ended since takes the outcome its process wrote, or is failed (interrupted) without one, so
    that a rerun runs it again."""
    from ava.sweep.local import refresh_local

    records = {j.name: state.read(j) for j in jobs}
    if any(r.get("job_id") for r in records.values()):
        from ava.sweep.slurm import refresh_slurm, squeue_states

        queued = squeue_states()
        records = {j.name: refresh_slurm(j, records[j.name], state, queued) for j in jobs}
        for job in topological(jobs):
            r = records[job.name]
            bad = next((a for a in job.waits_for() if records.get(a, {}).get("state") in (FAILED, BLOCKED)), None)
            if bad and r.get("state") == FAILED and r.get("job_id") and not Path(r.get("result_file") or "").is_file():
                error = blocked_error(job, bad, records[bad]["state"], records[bad].get("error"))
                records[job.name] = state.write(job, state=BLOCKED, error=error)
    return {j.name: refresh_local(j, records[j.name], state) for j in jobs}


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


def _foreign(jobs: list[Job], records: dict[str, dict[str, Any]], plan: Executes) -> None:
    """Refuse to run jobs another host's sweep marks running (this host cannot see whether they still run)."""
    import socket

    host = socket.gethostname()
    for job in jobs:
        r = records[job.name]
        if r.get("state") == RUNNING and not r.get("job_id") and r.get("host") not in (None, host):
            raise SweepError(
                f"{plan.out}: job {job.name} is marked running on host {r['host']} (pid {r.get('pid')}); a local "
                f"sweep resumes the jobs of its own machine: run it on {r['host']}, or remove "
                f"{state_file(plan, job)} if that run is gone"
            )


def state_file(plan: Executes, job: Job) -> Path:
    return JobState(plan.folder).folder / f"{job.name}.json"


def _driver_lock(plan: Executes) -> Any:
    """One driver per plan at a time: a second ``ava sweep`` into the same ``--out`` is refused (the lock goes with
    the driver's process, ``kill -9`` included)."""
    from ava.locking import JobLock, LockBusyError

    try:
        return JobLock(
            plan.folder / "driver.lock",
            f"{plan.out}: another `ava sweep` is running this plan; wait for it, or follow it with "
            f"`ava sweep status {plan.out}`",
        )
    except LockBusyError as e:
        raise SweepError(str(e)) from None


def _todo(jobs: list[Job], records: dict[str, dict[str, Any]]) -> list[Job]:
    """The jobs a run would start: not done nor in flight, or whose command changed since."""
    return [
        j
        for j in jobs
        if records[j.name].get("state", PENDING) in (PENDING, FAILED, BLOCKED)
        or _command(records[j.name].get("job", {}).get("argv") or []) != _command(j.argv)
    ]


class Executes(Protocol):
    """What :func:`run_jobs` reads of a plan (a sweep's, a reproduction's): where the jobs' state is kept, which
    executor runs them, how many at once (local), the SLURM options, and where the runs go. A plan may also say
    ``gpus``, ``jobs_per_gpu``, ``gpus_per_extract``, ``gpu_min_free`` (a local sweep's GPU slots), and ``data``,
    ``vfm`` and ``device`` (what the estimate reads)."""

    folder: Path
    executor: str
    jobs: int | None
    slurm: SlurmOptions
    out: str


@dataclass
class _Work:
    """What a sweep finds to do: the jobs (``--force`` added where forced), every job's record now, the jobs to
    run, those still running from an earlier driver (adopted), and the state of the others."""

    jobs: list[Job]
    records: dict[str, dict[str, Any]]
    todo: list[Job]
    adopted: list[tuple[Job, dict[str, Any]]]
    finished: dict[str, str]


def _work(plan: Executes, jobs: list[Job], state: JobState, force: bool) -> _Work:
    """Read the jobs' records and decide what runs (refusing changed jobs unless ``force``); writes nothing."""
    records = _current(jobs, state)
    if plan.executor == "local":
        _foreign(jobs, records, plan)
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
    todo = [j for j in jobs if j in _todo(jobs, records) or j.name in forced]
    adopted = [
        (j, records[j.name])
        for j in jobs
        if plan.executor == "local" and records[j.name].get("state") == RUNNING and j not in todo
    ]
    finished = {j.name: records[j.name].get("state", PENDING) for j in jobs if j not in todo}
    return _Work(jobs, records, todo, adopted, finished)


def run_jobs(
    jobs: list[Job],
    plan: Executes,
    *,
    force: bool = False,
    progress: bool = False,
    before: Callable[[], Any] | None = None,
    dry_run: bool = False,
    calibrate: bool = False,
    device_kind: str | None = None,
) -> dict[str, Any]:
    """Run (``local``) or submit (``slurm``) every job of ``jobs`` that is not done or in flight, with ``plan``'s
    executor, keeping their state under ``plan.folder`` (a rerun resumes: done jobs are skipped). ``before`` runs
    once everything is checked, before any job starts (it writes the plan).

    ``force``: jobs whose command changed since they ran are trained again, replacing their runs (else refused
    before anything runs or is written). ``progress``: the local executor says when each job starts and ends.
    ``dry_run``: write and run nothing; say what would run, where and when, and its estimated cost (for the GPUs
    asked for even where there are none). ``calibrate``: time this machine first (:mod:`ava.cost.calibrate`).
    ``device_kind``: the speed table's device to estimate with (default: the machine's).

    Jobs a killed driver left running are adopted: they keep their GPUs until they end (waited for only while a job
    of this run waits for them); jobs it left dead run again, on whatever slots are free. Everything a user can get
    wrong (the jobs' graph, the GPUs, a changed job) is refused before anything is written.

    Returns ``{"submitted": [names], "skipped": [names], "adopted": [names], "gpus": [...], "skipped_gpus": [...],
    "estimate": {...}}``."""
    from ava.sweep.estimate import estimate
    from ava.sweep.machine import machine_for, speeds

    if plan.executor == "slurm" and not dry_run:
        from ava.sweep.slurm import check_slurm

        check_slurm(plan.slurm)  # before anything is written or submitted
    check_graph(jobs)
    state = JobState(plan.folder)
    work = _work(plan, jobs, state, force)

    def resources(work: _Work) -> Any:
        held = frozenset(g for _, r in work.adopted for g in r.get("gpus") or ())  # this run's own, still running
        return machine_for(plan, dry_run=dry_run, device_kind=device_kind, held=held)

    machine = resources(work)  # refusals (GPUs this machine lacks or others fill) before anything is written
    say = _say(progress)
    figures = speeds(machine, plan, calibrate=calibrate, say=say)
    lock = None if dry_run or plan.executor != "local" else _driver_lock(plan)
    try:
        if lock is not None:  # under the lock: what another driver did meanwhile is seen
            remove_dead_temp_files([plan.folder])  # what a killed driver or job left mid-write
            work = _work(plan, jobs, state, force)
            machine = resources(work)
        for line in machine.skipped:
            say(f"skipped {line}")
        cost = estimate(
            plan,
            work.todo,
            machine.slots,
            figures,
            finished=work.finished,
            notes=machine.notes,
            running={j.name: _left(r) for j, r in work.adopted},
            jobs=work.jobs,
        )
        about = {
            "submitted": [j.name for j in work.todo],
            "skipped": [j.name for j in work.jobs if j not in work.todo],
            "adopted": [j.name for j, _ in work.adopted],
            "gpus": [g.id for g in machine.gpus],
            "skipped_gpus": machine.skipped,
            "estimate": cost.as_dict(),
        }
        if dry_run:
            return about
        if before is not None:
            before()
        _record(work, state, cost)
        if plan.executor == "slurm":
            from ava.sweep.slurm import submit_slurm

            submit_slurm(work.todo, state, plan.slurm, work.finished)
        else:
            from ava.sweep.local import run_local

            seconds = {r["job"]: r["seconds"] or 0.0 for r in cost.jobs}
            run_local(
                work.todo,
                state,
                finished=work.finished,
                progress=progress,
                slots=machine.slots,
                adopted=work.adopted,
                cost=lambda j: seconds.get(j.name, 0.0),
                env=machine.env,
            )
    finally:
        if lock is not None:
            lock.close()
    return about


def sweep(
    plan: SweepPlan,
    *,
    force: bool = False,
    progress: bool = False,
    dry_run: bool = False,
    calibrate: bool = False,
    device_kind: str | None = None,
) -> dict[str, Any]:
    """Write the plan, then run (``local``) or submit (``slurm``) every job that is not done or in flight
    (:func:`run_jobs`, whose options these are). Returns ``{"plan": path, "submitted", "skipped", "adopted", "gpus",
    "skipped_gpus", "estimate", "jobs": status rows}``; a dry run: ``plan`` None and ``jobs`` the rows of
    :func:`preview` with each job's estimate."""
    jobs = plan_jobs(plan)
    ran = run_jobs(
        jobs,
        plan,
        force=force,
        progress=progress,
        before=lambda: write_plan(plan),
        dry_run=dry_run,
        calibrate=calibrate,
        device_kind=device_kind,
    )
    if dry_run:
        placed = {r["job"]: r for r in ran["estimate"]["jobs"]}
        rows = [{**r, **_placed(placed.get(r["job"]))} for r in preview(jobs, plan.folder)]
        return {"plan": None, **ran, "jobs": rows}
    return {"plan": str(plan.folder / PLAN_FILE), **ran, "jobs": status(plan)["jobs"]}


def _placed(row: dict[str, Any] | None) -> dict[str, Any]:
    """A job's place in the estimate's schedule: its seconds, bytes, start, end and GPUs (None: it would not run)."""
    keys = ("seconds", "bytes", "start", "end", "gpus")
    return {k: (row or {}).get(k) for k in keys}


def preview(jobs: list[Job], folder: Path) -> list[dict[str, Any]]:
    """What a run of ``jobs`` would do, job by job, without starting or writing anything: its kind, the jobs it waits
    for, its state now, whether it would run, and its command line (credentials redacted)."""
    state = JobState(folder)
    records = _current(jobs, state)
    todo = {j.name for j in _todo(jobs, records)}
    return [
        {
            "job": j.name,
            "kind": j.kind,
            "after": j.waits_for(),
            "state": records[j.name].get("state", PENDING),
            "runs": j.name in todo,
            "run_dir": j.run_dir,
            "command": redact(" ".join(j.argv)),
        }
        for j in jobs
    ]


def _record(work: _Work, state: JobState, cost: Any) -> None:
    """Write what this start learned (jobs that ended since the last driver saw them) and each job's estimate."""
    for job in work.jobs:
        now = work.records[job.name]
        if now.get("state", PENDING) != PENDING and now != state.read(job):
            state.write(job, **{k: v for k, v in now.items() if k not in ("name", "kind", "job")})
    todo = {j.name: j for j in work.todo}
    for row in cost.jobs:
        if row["seconds"] is not None and row["job"] in todo:
            state.write(
                todo[row["job"]], estimate={"seconds": row["seconds"], "bytes": row["bytes"], "device": cost.device}
            )


def _left(record: dict[str, Any]) -> float:
    """The estimated seconds a job found running has left (its estimate less the time it has run; 0 without one)."""
    import time

    estimate = (record.get("estimate") or {}).get("seconds") or 0.0
    return max(0.0, float(estimate) - (time.time() - float(record.get("started") or time.time())))


def _say(progress: bool) -> Any:
    def say(line: str) -> None:
        if progress:
            import sys

            print(line, file=sys.stderr, flush=True)

    return say


def _progress_text(job: Job, state: JobState) -> str | None:
    """A running job's progress from the file its progress bar writes: ``extract 1200/5000 (24%)``."""
    import json

    try:
        tasks = json.loads(state.progress_file(job).read_text(encoding="utf-8")).get("tasks") or []
    except (OSError, ValueError, AttributeError):
        return None
    said = []
    for t in tasks:
        if t.get("total"):
            pct = 100 * float(t["completed"]) / float(t["total"])
            said.append(f"{t['description']} {t['completed']:.0f}/{t['total']:.0f} ({pct:.0f}%)")
    return "; ".join(said) or None


def _row(job: Job, r: dict[str, Any], current: bool, state: JobState) -> dict[str, Any]:
    import time

    started, ended = r.get("started"), r.get("ended")
    running = r.get("state") == RUNNING
    elapsed = (ended or time.time()) - started if started and (ended or running) else None
    estimate = r.get("estimate") or {}
    return {
        "job": job.name,
        "kind": job.kind,
        "state": r.get("state", PENDING),
        "gpus": r.get("gpus") or [],
        "cpus": r.get("cpus"),
        "elapsed_s": None if elapsed is None else round(elapsed, 1),
        "estimate_s": estimate.get("seconds"),
        "estimate_bytes": estimate.get("bytes"),
        "progress": _progress_text(job, state) if running else None,
        "log": r.get("log"),
        "slurm_id": r.get("job_id"),
        "run_dir": job.run_dir,
        "results": result_files(job) if r.get("state") == DONE else [],
        "error": r.get("error") if r.get("state") in (FAILED, BLOCKED) else None,
        "after": job.waits_for(),
        "current": current,
    }


def status(plan: SweepPlan) -> dict[str, Any]:
    """Each job's state, GPUs, elapsed time (running: so far) beside its estimate, progress (running), log path,
    SLURM id, and its result files (done) or error line (failed, blocked); the jobs of earlier plans run into the
    same ``out`` follow, with ``current`` false. Reads only: a local job whose process ended since is shown with
    its outcome."""
    return job_status(plan_jobs(plan), plan.folder, str(plan.folder / PLAN_FILE))


def job_status(jobs: list[Job], folder: Path, plan: str) -> dict[str, Any]:
    """:func:`status` of any list of jobs whose state is kept under ``folder`` (``plan``: the plan file's path)."""
    state = JobState(folder)
    records = _current(jobs, state)
    rows = [_row(job, records[job.name], True, state) for job in jobs]
    names = {j.name for j in jobs}
    for record in state.read_all():
        if record.get("name") not in names and isinstance(record.get("job"), dict):
            try:
                job = Job(**record["job"])
            except TypeError:  # a record of another ava version: shown by name only
                job = Job(str(record["name"]), str(record.get("kind", "")), "", [])
            if not record.get("job_id"):
                from ava.sweep.local import refresh_local

                record = refresh_local(job, record, state)
            rows.append(_row(job, record, False, state))
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["state"]] = counts.get(row["state"], 0) + 1
    return {"plan": plan, "counts": counts, "jobs": rows}
