"""Jobs for the local executor's tests: tiny Python processes that record, in one shared events file, when they
start and end, the GPUs and CPU threads they were given (``CUDA_VISIBLE_DEVICES``, ``OMP_NUM_THREADS``, their CPU
affinity), and that wait for a known point (another job's start, a file the test writes) instead of sleeping.

A fake machine for the GPU slots: :func:`gpu_inventory` writes the file ``AVA_GPU_INVENTORY`` points at, in the
format of ``nvidia-smi --query-gpu=index,name,memory.total,memory.free,uuid --format=csv,noheader,nounits``."""

from __future__ import annotations

import sys
import time
from pathlib import Path

WAIT_S = 60.0  # how long a recording job waits for its known point before it fails (a barrier would make it wait)

_SCRIPT = """
import os, signal, sys, time
events, name, wait_for, hold, fail = sys.argv[1:6]
def mark(what):
    cpus = ",".join(map(str, sorted(os.sched_getaffinity(0)))) if hasattr(os, "sched_getaffinity") else "-"
    env = [os.environ.get(v, "-") for v in ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS")]
    more = [os.environ.get(v, "-") for v in ("AVA_PROGRESS_FILE", "LOCAL_RANK")]
    line = " ".join([what, name, *env, cpus, *more, str(os.getpid())])
    fd = os.open(events, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, (line + "\\n").encode())
    os.close(fd)
mark("start")
print("job", name, "CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"), flush=True)
deadline = time.monotonic() + float(os.environ.get("WAIT_S", "60"))
def seen(line):
    try:
        return any(l.startswith(line + " ") for l in open(events).read().splitlines())
    except FileNotFoundError:
        return False
while wait_for != "-" and not seen(wait_for):
    if time.monotonic() > deadline:
        print("error: waited for", wait_for, "in vain"); sys.exit(3)
    time.sleep(0.01)
while hold != "-" and not os.path.exists(hold):
    if time.monotonic() > deadline:
        print("error: waited for", hold, "in vain"); sys.exit(3)
    time.sleep(0.01)
if fail == "SIGKILL":
    os.kill(os.getpid(), signal.SIGKILL)
if fail != "-":
    print("error:", fail); sys.exit(2)
mark("end")
"""


def recorder(events: Path, name: str, *, wait_for: str | None = None, hold: Path | None = None, fail: str = "") -> list:
    """A job command: record its start, wait for ``wait_for`` (an events line such as ``start train-b``) and for
    the file ``hold``, fail with ``error: FAIL`` when given (``SIGKILL``: be killed), else record its end. A script
    file (not ``-c``), so that torchrun can start it too."""
    script = events.parent / "recorder.py"
    if not script.is_file():
        script.write_text(_SCRIPT)
    args = [str(events), name, wait_for or "-", str(hold) if hold else "-", fail or "-"]
    return [sys.executable, str(script), *args]


def events(path: Path) -> list[dict[str, str]]:
    """The events file as rows: what (start/end), job, gpus, threads, cpus, progress file; in the order written."""
    if not path.is_file():
        return []
    keys = ("what", "job", "gpus", "threads", "cpus", "progress", "rank", "pid")
    return [dict(zip(keys, line.split(" "), strict=False)) for line in path.read_text().splitlines() if line]


def when(rows: list[dict[str, str]], what: str, job: str) -> int:
    """The position of an event (its order among all events)."""
    return next(i for i, r in enumerate(rows) if r["what"] == what and r["job"] == job)


def gpu_inventory(
    path: Path, free_gb: list[float], total_gb: float = 80.0, name: str = "NVIDIA H100 80GB HBM3"
) -> Path:
    """A machine of ``len(free_gb)`` GPUs as ``nvidia-smi`` lists them (memory in MiB)."""
    lines = [
        f"{i}, {name}, {int(total_gb * 1024)}, {int(free * 1024)}, GPU-{i:08d}-fake-uuid"
        for i, free in enumerate(free_gb)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def wait_for_line(path: Path, text: str, timeout: float = WAIT_S) -> str:
    """Wait until ``path`` holds a line containing ``text`` (a known point another process reaches); its content."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        content = path.read_text(errors="replace") if path.is_file() else ""
        if any(text in line for line in content.splitlines()):
            return content
        time.sleep(0.02)
    raise AssertionError(f"{path} never said {text!r}; it says:\n" + (path.read_text() if path.is_file() else ""))


def pid_gone(pid: int, timeout: float = WAIT_S) -> None:
    """Wait until process ``pid`` has ended (a zombie its new parent has not reaped yet has ended)."""
    from ava.sweep.child import alive

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
            return
        time.sleep(0.02)
    raise AssertionError(f"process {pid} still runs")


def run_cli(args: list[str], capsys, monkeypatch) -> tuple[int, str]:
    """(exit code, stdout + stderr) of ``ava ARGS`` through the console entry point."""
    from ava.cli.main import main

    monkeypatch.setattr(sys, "argv", ["ava", *args])
    monkeypatch.setenv("COLUMNS", "1000")  # one message on one line
    try:
        main()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    out = capsys.readouterr()
    return code, out.out + out.err


def slurm_up() -> bool:
    """Whether a SLURM cluster answers here (``bash .ci/slurm-up.sh`` starts a one-node one)."""
    import shutil
    import subprocess

    if shutil.which("sinfo") is None:
        return False
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=10)
    except subprocess.TimeoutExpired:
        return False
    return out.returncode == 0 and bool(out.stdout.strip())
