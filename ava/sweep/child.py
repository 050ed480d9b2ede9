"""A local sweep job's own process: ``python -m ava.sweep.child --exit-file F --log L [--cpus 0-3] -- COMMAND``.

The local executor starts every job through this small wrapper, which pins itself to the job's CPUs (the command
inherits them, before any thread of it starts), writes the job's log (a header naming the GPUs, CPUs and threads
the job was given, the command, then its output), runs the command and, when it ends, writes its exit status to
the exit file. The outcome is recorded by the job's own process, so a sweep whose driver was killed (``kill -9``)
still learns how each job it left running ended: the next ``ava sweep`` adopts jobs still running (their GPUs stay
taken until they end) and reruns those that died without an exit status.

Ctrl-C reaches the command (the terminal signals the whole process group) and the wrapper records how it ended;
SIGTERM sent to the wrapper is passed on to the command.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ava.errors import redact

VARIABLES = ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "AVA_PROGRESS_FILE")


def signal_name(rc: int) -> str:
    """``-9`` -> ``SIGKILL``."""
    try:
        return signal.Signals(-rc).name
    except ValueError:
        return f"signal {-rc}"


def ended_line(rc: int) -> str:
    """How a command ended, for a job whose log holds no error line of its own."""
    if rc < 0:
        hint = " (out of memory? the kernel's OOM killer sends it)" if rc == -signal.SIGKILL else ""
        return f"killed by {signal_name(rc)}{hint}"
    return f"exit {rc}"


def process_start(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot, ``/proc/PID/stat``), to tell it from a later process
    given the same pid; None off Linux or when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(text.rsplit(")", 1)[1].split()[19])  # field 22; the name in parentheses may hold spaces


def alive(pid: int | None, start: int | None = None) -> bool:
    """Whether process ``pid`` runs (and, given ``start``, is the process that started then)."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process with this pid
        return start is None
    if start is not None:
        now = process_start(pid)
        if now is not None and now != start:
            return False
    with contextlib.suppress(OSError, IndexError, ValueError):  # a zombie has ended
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


def read_exit(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The exit record the wrapper wrote (``rc``, ``error``, its ``pid``, ``ended``), or None when there is none
    (yet)."""
    try:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and "rc" in record else None


def _write_exit(path: Path, record: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record), encoding="utf-8")
    os.replace(tmp, path)


def header(command: list[str], job: str = "") -> str:
    """The first lines of a job's log: where it runs, with what, and the command as a user would type it."""
    seen = ", ".join(f"{v}={os.environ[v]}" for v in VARIABLES[:2] if v in os.environ) or "no GPU or thread setting"
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = []
    from ava.sweep.slots import cpu_ranges

    pinned = f", CPUs {cpu_ranges(cpus)}" if cpus else ""
    when = time.strftime("%Y-%m-%d %H:%M:%S")
    lines = [f"# ava sweep job {job}: {seen}{pinned}; host {socket.gethostname()}, pid {os.getpid()}, {when}"]
    return "\n".join([*lines, "$ " + redact(shlex.join(command))]) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ava.sweep.child", description=__doc__.splitlines()[0])
    parser.add_argument("--exit-file", required=True, help="where the exit status is written (JSON)")
    parser.add_argument("--log", required=True, help="the job's log (replaced)")
    parser.add_argument("--cpus", default="", help="CPUs to pin the command to, e.g. 0-3,8")
    parser.add_argument("--job", default="", help="the job's name, for the log's header")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command after --")
    if args.cpus and hasattr(os, "sched_setaffinity"):
        from ava.sweep.slots import parse_cpus

        with contextlib.suppress(OSError):  # CPUs this process may not use: the command runs unpinned
            os.sched_setaffinity(0, parse_cpus(args.cpus))
    log, exit_file = Path(args.log), Path(args.exit_file)
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.time()
    with open(log, "w", encoding="utf-8") as out:
        out.write(header(command, args.job))
        out.flush()
        try:
            proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "COLUMNS": "200"})
        except OSError as e:
            out.write(f"error: cannot start {command[0]}: {e}\n")
            _write_exit(
                exit_file,
                {"rc": 127, "error": f"cannot start {command[0]}: {e}", "pid": os.getpid(), "ended": time.time()},
            )
            return 127
        # Ctrl-C signals the whole group: the command gets it and ends; the wrapper stays to record how
        signal.signal(signal.SIGINT, lambda *_: None)
        signal.signal(signal.SIGTERM, lambda *_: proc.terminate())
        rc = proc.wait()
    from ava.sweep.jobs import error_line

    error = None if rc == 0 else error_line(log)
    if rc != 0 and (rc < 0 or error in (None, "(empty log)") or error.startswith("$ ")):
        error = ended_line(rc)
    _write_exit(exit_file, {"rc": rc, "error": error, "pid": os.getpid(), "started": started, "ended": time.time()})
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main())
