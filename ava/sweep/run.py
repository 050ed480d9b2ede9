"""Run a sweep plan (submitting only what is missing or failed) and report each job's state.

A job whose command changed since it last ran (another ability set, device or cache for the same run directory:
a second sweep with other settings into the same ``--out``) is refused unless ``force``, naming what changed, since
running it replaces that run; with ``force`` it is trained again with ``--force``. Every job ever run into ``--out``
stays in ``ava sweep status``, also those of an earlier plan.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from ava.errors import redact
from ava.sweep.jobs import BLOCKED, DONE, FAILED, PENDING, RUNNING, Job, JobState, plan_jobs, result_files
from ava.sweep.plan import PLAN_FILE, SlurmOptions, SweepError, SweepPlan, write_plan

FORCE = "--force"


def _alive(pid: Any, argv: list[str]) -> bool:
    """Whether process ``pid`` is still the job that was started (its command line, where /proc says it)."""
    import os

    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process now holds the number
        return False
    cmdline = Path(f"/proc/{pid}/cmdline")
    if cmdline.is_file():
        try:
            return cmdline.read_bytes().split(b"\0")[: len(argv)] == [a.encode() for a in argv]
        except OSError:
            return False
    return True


def _current(jobs: list[Job], state: JobState) -> dict[str, dict[str, Any]]:
    """Every job's state record, refreshed from SLURM where it was submitted there; a local job recorded running whose
    process is gone (the executor was killed) is failed, so that a rerun runs it again."""
    records = {j.name: state.read(j) for j in jobs}
    if any(r.get("job_id") for r in records.values()):
        from ava.sweep.slurm import refresh_slurm, squeue_states

        queued = squeue_states()
        records = {j.name: refresh_slurm(j, records[j.name], state, queued) for j in jobs}
    for job in jobs:
        r = records[job.name]
        if (
            r.get("state") == RUNNING
            and not r.get("job_id")
            and not _alive(r.get("pid"), r.get("job", {}).get("argv") or [])
        ):
            records[job.name] = state.write(
                job, state=FAILED, error="interrupted: its process ended without a result (the executor was stopped?)"
            )
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
    executor runs them, how many at once (local) and the SLURM options."""

    folder: Path
    executor: str
    jobs: int
    slurm: SlurmOptions
    out: str


def run_jobs(
    jobs: list[Job],
    plan: Executes,
    *,
    force: bool = False,
    progress: bool = False,
    before: Callable[[], Any] | None = None,
) -> dict[str, list[str]]:
    """Run (``local``) or submit (``slurm``) every job of ``jobs`` that is not done or in flight, with ``plan``'s
    executor, keeping their state under ``plan.folder`` (a rerun resumes: done jobs are skipped). ``before`` runs
    once the jobs are checked, before any starts (it writes the plan). ``force``: see :func:`sweep`. Returns
    ``{"submitted": [names], "skipped": [names]}``."""
    if plan.executor == "slurm":
        from ava.sweep.slurm import check_slurm

        check_slurm(plan.slurm)  # before anything is written or submitted
    state = JobState(plan.folder)
    records = _current(jobs, state)
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
    if before is not None:
        before()
    todo = _todo(jobs, records)
    todo += [j for j in jobs if j.name in forced and j not in todo]
    finished = {j.name: records[j.name].get("state", PENDING) for j in jobs if j not in todo}
    if plan.executor == "slurm":
        from ava.sweep.slurm import submit_slurm

        submit_slurm(todo, state, plan.slurm, finished)
    else:
        from ava.sweep.local import run_local

        run_local(todo, state, plan.jobs, finished, progress=progress)
    return {"submitted": [j.name for j in todo], "skipped": [j.name for j in jobs if j not in todo]}


def sweep(plan: SweepPlan, *, force: bool = False, progress: bool = False) -> dict[str, Any]:
    """Write the plan, then run (``local``) or submit (``slurm``) every job that is not done or in flight.

    ``force``: jobs whose command changed since they ran are trained again, replacing their runs (else refused
    before anything runs or is written). ``progress``: the local executor says when each job starts and ends.
    Returns ``{"plan": path, "submitted": [names], "skipped": [names], "jobs": status rows}``."""
    ran = run_jobs(plan_jobs(plan), plan, force=force, progress=progress, before=lambda: write_plan(plan))
    return {"plan": str(plan.folder / PLAN_FILE), **ran, "jobs": status(plan)["jobs"]}


def dry_run(jobs: list[Job], folder: Path) -> list[dict[str, Any]]:
    """What a run of ``jobs`` would do, job by job, without starting or writing anything: its kind, the jobs it waits
    for, its state now, whether it would run, and its command line (credentials redacted)."""
    state = JobState(folder)
    records = {j.name: state.read(j) for j in jobs}
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
    return job_status(jobs, plan.folder, str(plan.folder / PLAN_FILE))


def job_status(jobs: list[Job], folder: Path, plan: str) -> dict[str, Any]:
    """:func:`status` of any list of jobs whose state is kept under ``folder`` (``plan``: the plan file's path)."""
    state = JobState(folder)
    records = _current(jobs, state)
    rows = [_row(job, records[job.name], True) for job in jobs]
    names = {j.name for j in jobs}
    for record in state.read_all():
        if record.get("name") not in names and isinstance(record.get("job"), dict):
            try:
                job = Job(**record["job"])
            except TypeError:  # a record of another ava version: shown by name only
                job = Job(str(record["name"]), str(record.get("kind", "")), "", [])
            rows.append(_row(job, record, False))
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["state"]] = counts.get(row["state"], 0) + 1
    return {"plan": plan, "counts": counts, "jobs": rows}
