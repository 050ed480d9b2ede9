"""The ``local`` executor: every job as a process on this machine, ``--jobs`` at a time; a VFM's training jobs start
once its extraction has finished (and are ``blocked`` when it failed), and a job with ``after`` once those jobs have
(a chain of stages runs in waves: each wave the jobs whose predecessors are all done). With ``progress``, the one
progress bar counts the jobs, and a line says when each starts (with its log) and how it ended."""

from __future__ import annotations

import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ava.errors import redact
from ava.sweep.jobs import BLOCKED, DONE, FAILED, RUNNING, Job, JobState, error_line


def _run_one(job: Job, state: JobState, say: Any) -> str:
    log = state.log(job)
    log.parent.mkdir(parents=True, exist_ok=True)
    state.write(job, state=RUNNING, log=str(log), pid=None, rc=None, error=None, started=time.time())
    say(f"running {job.name} (log {log})")
    t0 = time.perf_counter()
    with open(log, "w", encoding="utf-8") as out:
        out.write("$ " + redact(" ".join(job.argv)) + "\n")
        out.flush()
        env = {**os.environ, "COLUMNS": "200"}  # one error line on one line
        proc = subprocess.Popen(job.argv, stdout=out, stderr=subprocess.STDOUT, env=env)
        state.write(job, pid=proc.pid)
        rc = proc.wait()
    took = f"{time.perf_counter() - t0:.0f} s"
    if rc == 0:
        state.write(job, state=DONE, rc=0, ended=time.time())
        say(f"done    {job.name} in {took}")
        return DONE
    error = error_line(log)
    state.write(job, state=FAILED, rc=rc, error=error, ended=time.time())
    say(f"failed  {job.name} in {took} (exit {rc}): {error}")
    return FAILED


def run_local(
    todo: list[Job], state: JobState, jobs: int, finished: dict[str, str], *, progress: bool = False
) -> dict[str, Any]:
    """Run ``todo`` (extractions first); ``finished`` maps the names of jobs already done to their state."""
    from ava.progress import progress as progress_bar

    outcome = dict(finished)
    extracts = [j for j in todo if j.kind == "extract"]
    trains = [j for j in todo if j.kind != "extract"]  # training jobs, and those after them (a report)
    with progress_bar(progress and bool(todo)) as bar, ThreadPoolExecutor(max(1, jobs)) as pool:
        task = bar.add_task("sweep jobs", total=len(todo))

        def say(line: str) -> None:
            if progress:
                bar.console.print(line, highlight=False, markup=False, soft_wrap=True)

        def one(job: Job) -> str:
            result = _run_one(job, state, say)
            bar.advance(task)
            return result

        for job, result in zip(extracts, pool.map(one, extracts), strict=True):
            outcome[job.name] = result
        while trains:
            waiting = {j.name for j in trains}
            wave = [j for j in trains if not any(n in waiting for n in j.waits_for())]
            if not wave:  # a circle of `after`: nothing can start
                wave = trains
            ready = []
            for job in wave:
                failed = next((n for n in job.waits_for() if outcome.get(n, DONE) != DONE or n in waiting), None)
                if failed is not None:
                    why = state.read_name(failed).get("error")
                    what = "its extraction" if failed == job.needs else "the job it waits for,"
                    error = f"{what} {failed} failed: {why}"
                    state.write(job, state=BLOCKED, log=str(state.log(job)), error=error)
                    outcome[job.name] = BLOCKED
                    say(f"blocked {job.name}: {error}")
                    bar.advance(task)
                else:
                    ready.append(job)
            for job, result in zip(ready, pool.map(one, ready), strict=True):
                outcome[job.name] = result
            trains = [j for j in trains if j not in wave]
    return outcome
