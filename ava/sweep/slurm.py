"""The ``slurm`` executor: jobs submitted through submitit, each extraction as a job and the jobs that wait for the
same jobs as one array (a VFM's training jobs: one array after its extraction), with ``--dependency=afterok`` on
the SLURM ids of the jobs they wait for (``Job.waits_for``); with more than one GPU per job the extraction runs under
torchrun inside the allocation (each rank writes its own shards, :mod:`ava.cache.extraction`).

A job's state is read back without accounting (clusters without ``sacct`` included): ``squeue`` while it is queued
or running, then the result file submitit writes when it ends (success, or the error); a job gone from the queue
without one was killed (time limit, node failure, ``scancel``): failed, see its log.
"""

from __future__ import annotations

import pickle
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from ava.sweep.jobs import DONE, FAILED, PENDING, RUNNING, SUBMITTED, Job, JobState, error_line, torchrun
from ava.sweep.plan import SlurmOptions, SweepError


def _sinfo_partitions() -> list[str]:
    if shutil.which("sinfo") is None:
        raise SweepError("--executor slurm: no SLURM here (sinfo is not on PATH); use --executor local")
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, timeout=30, check=True)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
        detail = getattr(e, "stderr", "") or str(e)
        raise SweepError(
            f"--executor slurm: the SLURM controller does not answer ({' '.join(detail.split())})"
        ) from None
    return [p.strip().rstrip("*") for p in out.stdout.split() if p.strip()]


def check_slurm(options: SlurmOptions) -> None:
    """Refuse, before any job is submitted, a partition that does not exist and a missing submitit."""
    from ava.extras import require

    require("slurm", "--executor slurm")
    partitions = _sinfo_partitions()
    if options.partition is not None and options.partition not in partitions:
        raise SweepError(
            f"--partition {options.partition!r}: no such SLURM partition (partitions: "
            f"{', '.join(partitions) or 'none'})"
        )


def _executor(folder: Path, options: SlurmOptions, name: str, after: str | None) -> Any:
    """A submitit executor for one job or array; ``after``: the SLURM ids it waits for, ``:``-separated."""
    import submitit

    ex = submitit.SlurmExecutor(folder=str(folder), python=sys.executable)
    params: dict[str, Any] = {
        "time": options.time_min,
        "cpus_per_task": options.cpus_per_job,
        "job_name": name,
        "array_parallelism": options.array_parallelism,
        "stderr_to_stdout": True,
        "ntasks_per_node": 1,
        "nodes": 1,
    }
    if options.partition:
        params["partition"] = options.partition
    if options.gpus_per_job:
        params["gpus_per_node"] = options.gpus_per_job
    if options.account:
        params["account"] = options.account
    if after:
        params["additional_parameters"] = {"dependency": f"afterok:{after}", "kill-on-invalid-dep": "yes"}
    ex.update_parameters(**params)
    return ex


def _command(job: Job, options: SlurmOptions) -> list[str]:
    """The job's command; a multi-GPU extraction under torchrun (one rank per GPU of the allocation)."""
    if job.kind == "extract" and options.gpus_per_job > 1:
        return torchrun(job.argv, options.gpus_per_job)
    return job.argv


def submit_slurm(todo: list[Job], state: JobState, options: SlurmOptions, done: dict[str, str]) -> dict[str, str]:
    """Submit ``todo`` in dependency order: each extraction as a job, the other jobs as one array per set of jobs
    they wait for (a VFM's training jobs: one array after its extraction), with ``afterok`` on those jobs' SLURM
    ids (submitted here, or in flight from an earlier sweep)."""
    import submitit

    folder = state.folder.parent / "slurm"
    ids: dict[str, str] = {}

    def after_ids(job: Job) -> list[str]:
        out = []
        for name in job.waits_for():
            if name in ids:
                out.append(ids[name])
            elif done.get(name) != DONE and (job_id := state.read_name(name).get("job_id")):
                out.append(str(job_id))  # in flight from an earlier submission
        return out

    def record(job: Job, sub: Any) -> None:
        ids[job.name] = sub.job_id
        state.write(
            job,
            state=SUBMITTED,
            job_id=sub.job_id,
            log=str(sub.paths.stdout),
            result_file=str(sub.paths.result_pickle),
            error=None,
            rc=None,
        )

    pending = list(todo)
    while pending:  # in waves: each job after every job of this submission it waits for
        names = {j.name for j in pending}
        wave = [j for j in pending if not any(a in names for a in j.waits_for())]
        if not wave:
            raise SweepError(f"sweep jobs: {', '.join(sorted(names))} wait for each other in a circle")
        pending = [j for j in pending if j not in wave]
        arrays: dict[tuple[str, ...], list[Job]] = {}
        for job in wave:
            if job.kind == "extract":
                sub = _executor(folder, options, job.name, ":".join(after_ids(job)) or None).submit(
                    submitit.helpers.CommandFunction(_command(job, options), verbose=True)
                )
                record(job, sub)
            else:
                arrays.setdefault(tuple(job.waits_for()), []).append(job)
        for key, jobs in arrays.items():
            vfms = {j.vfm for j in jobs}
            name = f"ava-{next(iter(vfms)) if len(vfms) == 1 else 'jobs'}" if key else "ava-no-cache"
            ex = _executor(folder, options, name, ":".join(after_ids(jobs[0])) or None)
            with ex.batch():
                subs = [ex.submit(submitit.helpers.CommandFunction(_command(j, options), verbose=True)) for j in jobs]
            for job, sub in zip(jobs, subs, strict=True):
                record(job, sub)
    return {j.name: SUBMITTED for j in todo}


def squeue_states() -> dict[str, str]:
    """SLURM job id (``123`` or ``123_4``) -> state, of every job in the queue, one line per array task."""
    if shutil.which("squeue") is None:
        return {}
    try:
        out = subprocess.run(["squeue", "-h", "-r", "-o", "%i %T"], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return {}
    return dict(line.split(None, 1) for line in out.stdout.splitlines() if len(line.split()) == 2)


def refresh_slurm(job: Job, record: dict[str, Any], state: JobState, queued: dict[str, str] | None = None) -> dict:
    """A submitted job's state now: queued/running from squeue, else from the result file submitit wrote."""
    job_id = record.get("job_id")
    if record.get("state") not in (SUBMITTED, RUNNING, PENDING) or not job_id:
        return record
    queued = squeue_states() if queued is None else queued
    if job_id in queued:
        new = RUNNING if queued[job_id] in ("RUNNING", "COMPLETING") else SUBMITTED
        return state.write(job, state=new, slurm_state=queued[job_id]) if new != record.get("state") else record
    result = Path(record.get("result_file") or "")
    if result.is_file():
        try:
            with open(result, "rb") as f:
                outcome, value = pickle.load(f)  # written by submitit for this job
        except Exception as e:  # noqa: BLE001 - a torn result file: the job is not known to have succeeded
            outcome, value = "error", f"unreadable result file {result} ({type(e).__name__})"
        if outcome == "success":
            return state.write(job, state=DONE, rc=0)
        return state.write(job, state=FAILED, error=error_line(record.get("log")) or str(value).splitlines()[-1])
    return state.write(
        job,
        state=FAILED,
        error=f"gone from the queue without a result (killed, time limit or "
        f"node failure); {error_line(record.get('log'))}",
    )
