"""The ``local`` executor: every job as a process on this machine, ``--jobs`` at a time; a VFM's training jobs start
once its extraction has finished (and are ``blocked`` when it failed)."""

from __future__ import annotations

import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ava.sweep.jobs import BLOCKED, DONE, FAILED, RUNNING, Job, JobState, error_line


def _run_one(job: Job, state: JobState) -> str:
    log = state.log(job)
    log.parent.mkdir(parents=True, exist_ok=True)
    state.write(job, state=RUNNING, log=str(log), pid=None, rc=None, error=None, started=time.time())
    with open(log, "w", encoding="utf-8") as out:
        out.write("$ " + " ".join(job.argv) + "\n")
        out.flush()
        env = {**os.environ, "COLUMNS": "200"}  # one error line on one line
        proc = subprocess.Popen(job.argv, stdout=out, stderr=subprocess.STDOUT, env=env)
        state.write(job, pid=proc.pid)
        rc = proc.wait()
    if rc == 0:
        state.write(job, state=DONE, rc=0, ended=time.time())
        return DONE
    state.write(job, state=FAILED, rc=rc, error=error_line(log), ended=time.time())
    return FAILED


def run_local(todo: list[Job], state: JobState, jobs: int, finished: dict[str, str]) -> dict[str, Any]:
    """Run ``todo`` (extractions first); ``finished`` maps the names of jobs already done to their state."""
    outcome = dict(finished)
    extracts = [j for j in todo if j.kind == "extract"]
    trains = [j for j in todo if j.kind == "train"]
    with ThreadPoolExecutor(max(1, jobs)) as pool:
        for job, result in zip(extracts, pool.map(lambda j: _run_one(j, state), extracts), strict=True):
            outcome[job.name] = result
        ready = []
        for job in trains:
            if job.needs and outcome.get(job.needs, DONE) != DONE:
                why = state.read_name(job.needs).get("error")
                error = f"its extraction {job.needs} failed: {why}"
                state.write(job, state=BLOCKED, log=str(state.log(job)), error=error)
                outcome[job.name] = BLOCKED
            else:
                ready.append(job)
        for job, result in zip(ready, pool.map(lambda j: _run_one(j, state), ready), strict=True):
            outcome[job.name] = result
    return outcome
