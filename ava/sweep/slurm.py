"""The ``slurm`` executor: jobs submitted through submitit, one array per VFM's training jobs, each array waiting
for its VFM's extraction (``--dependency=afterok``), and a job with ``after`` waiting for those jobs too; with more
than one GPU per job the extraction runs under torchrun inside the allocation (each rank writes its own shards,
:mod:`ava.cache.extraction`).

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

from ava.sweep.jobs import DONE, FAILED, PENDING, RUNNING, SUBMITTED, Job, JobState, error_line
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
        return [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={options.gpus_per_job}",
            *job.argv[1:],
        ]
    return job.argv


def submit_slurm(todo: list[Job], state: JobState, options: SlurmOptions, done: dict[str, str]) -> dict[str, str]:
    """Submit ``todo``: each extraction as a job, each VFM's training jobs as one array after it."""
    import submitit

    folder = state.folder.parent / "slurm"
    ids: dict[str, str] = {}
    for job in [j for j in todo if j.kind == "extract"]:
        sub = _executor(folder, options, job.name, None).submit(
            submitit.helpers.CommandFunction(_command(job, options), verbose=True)
        )
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
    groups: dict[tuple[str, ...], list[Job]] = {}
    for job in [j for j in todo if j.kind != "extract"]:  # in order: a job comes after those it waits for
        groups.setdefault((job.needs or "", *job.after), []).append(job)
    for waits, jobs in groups.items():
        needs = waits[0]
        found = []
        for name in (n for n in waits if n):
            job_id = ids.get(name)
            if job_id is None and done.get(name) != DONE:  # it runs outside this submission
                job_id = state.read_name(name).get("job_id")
            if job_id:
                found.append(str(job_id))
        after = ":".join(found) or None
        label = needs.removeprefix("extract-") or (jobs[0].name if len(waits) > 1 else "no-cache")
        ex = _executor(folder, options, f"ava-{label}", after)
        with ex.batch():
            subs = [ex.submit(submitit.helpers.CommandFunction(_command(j, options), verbose=True)) for j in jobs]
        for job, sub in zip(jobs, subs, strict=True):
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
