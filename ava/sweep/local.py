"""The ``local`` executor: every job as a process on this machine, on the slots of :mod:`ava.sweep.slots` (``--jobs``
at a time; with ``--gpus``, each job on its own GPU(s)), started as soon as the jobs it waits for are done
(:mod:`ava.sweep.schedule`): one VFM's trainings start when its own extraction ends, while others still extract.

Each job runs through :mod:`ava.sweep.child`, which records how the job ended even when this driver is gone. Jobs
found running when a sweep begins (left by a driver that was killed) are adopted: they keep their GPUs until they
end (waited for while a job of this run waits for them), and their outcome is read from their exit file. With
``progress``, the one progress bar counts the jobs, and a line says when each starts (where, and its log) and how
it ended.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ava.sweep.child import alive, ended_line, process_start, read_exit
from ava.sweep.jobs import BLOCKED, DONE, FAILED, RUNNING, Job, JobState, torchrun
from ava.sweep.schedule import Schedule
from ava.sweep.slots import Lease, Slots, cpu_ranges

POLL_S = 0.5  # how often the state of a job is looked at where the kernel cannot say when it ends (no pidfd)


@dataclass
class _Running:
    job: Job
    lease: Lease
    pid: int
    start: int | None
    t0: float
    proc: subprocess.Popen | None = None  # None: adopted (started by an earlier driver)

    def ended(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is not None
        return not alive(self.pid, self.start)


def _start(job: Job, lease: Lease, state: JobState, extra_env: dict[str, str]) -> _Running:
    log, exit_file = state.log(job), state.exit_file(job)
    state.progress.mkdir(parents=True, exist_ok=True)  # the job's progress bar writes there
    for stale in (exit_file, state.progress_file(job)):
        with contextlib.suppress(FileNotFoundError):
            stale.unlink()
    command = torchrun(job.argv, len(lease.gpus)) if len(lease.gpus) > 1 else job.argv
    wrapper = [sys.executable, "-m", "ava.sweep.child", "--exit-file", str(exit_file), "--log", str(log)]
    wrapper += ["--job", job.name] + (["--cpus", cpu_ranges(lease.cpus)] if lease.cpus else [])
    env = {**os.environ, **extra_env, **lease.env(), "AVA_PROGRESS_FILE": str(state.progress_file(job))}
    state.write(
        job,
        state=RUNNING,
        log=str(log),
        rc=None,
        error=None,
        started=time.time(),
        ended=None,
        gpus=list(lease.gpus),
        cpus=cpu_ranges(lease.cpus) if lease.cpus else None,
        threads=lease.threads,
        host=socket.gethostname(),
        pid=None,
    )
    proc = subprocess.Popen([*wrapper, "--", *command], env=env, stdin=subprocess.DEVNULL)
    start = process_start(proc.pid)
    state.write(job, pid=proc.pid, pid_start=[proc.pid, start])  # the pid, and when the process that had it began
    return _Running(job, lease, proc.pid, start, time.perf_counter(), proc)


def _outcome(run: _Running, state: JobState) -> tuple[str, int | None, str | None]:
    """(state, exit code, error line) of an ended job, from its exit file, else from how its wrapper ended."""
    record = read_exit(state.exit_file(run.job))
    if record is not None:
        rc = int(record["rc"])
        return (DONE if rc == 0 else FAILED), rc, record.get("error")
    rc = run.proc.returncode if run.proc is not None else None
    if rc is None:
        return FAILED, None, "ended without an exit status (its process was killed)"
    return FAILED, rc, f"its wrapper ended without an exit status ({ended_line(rc)})"


def _wait_any(running: dict[str, _Running]) -> list[_Running]:
    """Block until at least one running job ends; the ended ones. Waits on pidfds where the kernel has them
    (no polling), else looks every ``POLL_S``."""
    while True:
        ended = [r for r in running.values() if r.ended()]
        if ended:
            return ended
        fds = []
        try:
            if hasattr(os, "pidfd_open"):
                for r in running.values():
                    with contextlib.suppress(ProcessLookupError):
                        fds.append(os.pidfd_open(r.pid))
            if fds:
                select.select(fds, [], [], 60.0)
            else:
                time.sleep(POLL_S)
        except OSError:  # pidfd_open refused (an old kernel, a sandbox): look again shortly
            time.sleep(POLL_S)
        finally:
            for fd in fds:
                os.close(fd)


def run_local(
    todo: list[Job],
    state: JobState,
    jobs: int = 1,
    finished: dict[str, str] | None = None,
    *,
    progress: bool = False,
    slots: Slots | None = None,
    adopted: list[tuple[Job, dict[str, Any]]] | None = None,
    cost: Callable[[Job], float] | None = None,
    env: dict[str, str] | None = None,
) -> dict[str, str]:
    """Run ``todo`` on ``slots`` (default: ``jobs`` CPU slots), each job once every job it waits for is done.

    ``finished``: the state of jobs outside ``todo`` (done earlier); ``adopted``: jobs already running (job, its
    record), waited for on the GPUs they hold; ``cost``: each job's estimated seconds (the schedule's priority);
    ``env``: variables for every job. Returns every job's state by name."""
    from ava.progress import progress as progress_bar

    slots = slots or Slots(jobs)
    schedule = Schedule(todo, slots, finished, cost, errors=lambda name: state.read_name(name).get("error"))
    running: dict[str, _Running] = {}
    for job, record in adopted or []:
        lease = slots.take(job, on=tuple(record.get("gpus") or ()))
        lease = lease or Lease(tuple(record.get("gpus") or ()))  # more than the slots: held outside them
        schedule.hold(job, lease)
        pid, ran = int(record["pid"]), time.time() - float(record.get("started") or time.time())
        running[job.name] = _Running(job, lease, pid, _start_of(record), time.perf_counter() - ran)
    total = len(todo) + len(running)
    with progress_bar(progress and bool(total)) as bar:
        task = bar.add_task("sweep jobs", total=total)

        def say(line: str) -> None:
            if progress:
                bar.console.print(line, highlight=False, markup=False, soft_wrap=True)

        for name, run in running.items():
            where = f" on {run.lease.describe()}" if run.lease.describe() else ""
            say(f"adopted {name}: still running{where} (pid {run.pid}), started by an earlier sweep")
        try:
            while schedule.active:
                for job, reason in schedule.blocked():
                    state.write(job, state=BLOCKED, log=str(state.log(job)), error=reason, started=None, ended=None)
                    say(f"blocked {job.name}: {reason}")
                    bar.advance(task)
                for job, lease in schedule.startable():
                    running[job.name] = _start(job, lease, state, env or {})
                    where = f" on {lease.describe()}" if lease.describe() else ""
                    say(f"running {job.name}{where} (log {state.log(job)})")
                if not schedule.waiting and running and all(r.proc is None for r in running.values()):
                    for name in running:  # adopted, and nothing of this run waits for them: theirs to finish
                        say(f"left running {name} (started by an earlier sweep; `ava sweep status` follows it)")
                    break
                if not running:
                    for job, reason in schedule.stuck():
                        state.write(job, state=BLOCKED, log=str(state.log(job)), error=reason)
                        say(f"blocked {job.name}: {reason}")
                        bar.advance(task)
                    break
                for run in _wait_any(running):
                    del running[run.job.name]
                    result, rc, error = _outcome(run, state)
                    state.write(run.job, state=result, rc=rc, error=error, ended=time.time())
                    schedule.end(run.job, result)
                    took = f"{time.perf_counter() - run.t0:.0f} s"
                    if result == DONE:
                        say(f"done    {run.job.name} in {took}")
                    else:
                        say(f"failed  {run.job.name} in {took} ({ended_line(rc) if rc else 'no exit'}): {error}")
                    bar.advance(task)
        except KeyboardInterrupt:
            _stop(running, state)
            raise
    return schedule.outcome


def _stop(running: dict[str, _Running], state: JobState) -> None:
    """Ctrl-C: the jobs got the signal from the terminal too; give them a moment to end, then end the rest, and
    record each as failed (interrupted), so the next sweep runs them again."""
    deadline = time.monotonic() + 10
    for run in running.values():
        if run.proc is None:
            continue  # adopted: not this driver's to stop
        with contextlib.suppress(subprocess.TimeoutExpired):
            run.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        if run.proc.poll() is None:
            run.proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                run.proc.wait(timeout=5)
        exit_record = read_exit(state.exit_file(run.job)) or {}
        state.write(
            run.job,
            state=FAILED,
            rc=exit_record.get("rc", run.proc.returncode),
            error="interrupted (Ctrl-C); the next `ava sweep` runs it again",
            ended=time.time(),
        )


def _start_of(record: dict[str, Any]) -> int | None:
    """When the process a record names began (None: not recorded with that pid), to tell it from a later process
    given the same pid."""
    pid, start = (record.get("pid_start") or [None, None])[:2]
    return start if pid == record.get("pid") else None


INTERRUPTED = "interrupted: its process ended without an exit status (killed with the sweep's driver?)"


def refresh_local(job: Job, record: dict[str, Any], state: JobState) -> dict[str, Any]:
    """A local job's state now, without writing: a ``running`` record whose process has ended takes the outcome
    its wrapper wrote (done or failed), or is failed (interrupted) when there is none. Records of another host
    are as they are (this host cannot see its processes)."""
    if record.get("state") != RUNNING or record.get("job_id") or not record.get("pid"):
        return record
    if record.get("host") not in (None, socket.gethostname()):
        return record
    exit_record = read_exit(state.exit_file(job))
    if exit_record is not None and exit_record.get("pid") in (None, record.get("pid")):  # this start's, not a former
        rc = int(exit_record["rc"])
        ended = exit_record.get("ended")
        return {
            **record,
            "state": DONE if rc == 0 else FAILED,
            "rc": rc,
            "error": exit_record.get("error"),
            "ended": ended,
        }
    if alive(int(record["pid"]), _start_of(record)):
        return record
    return {**record, "state": FAILED, "error": INTERRUPTED}
