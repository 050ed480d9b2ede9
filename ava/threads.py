"""How many CPU threads a compute command should use, and applying that choice to torch.

torch sizes its intra-op pool from the machine's core count, not from what this process may use: in a
container with a CPU quota, under ``taskset``, or beside DataLoader workers it oversubscribes the cores, and
its threads then spend their time waiting for each other (the demo ran 2.5x slower on a shared 2-core machine).
The default here is the CPUs this process may use (its affinity mask, capped by a cgroup v2 or v1 CPU quota, and
not counting CPUs other processes keep busy at start) minus the DataLoader workers that will run beside it;
``OMP_NUM_THREADS``, when set, wins over that guess.

Nothing here imports torch until :func:`apply_threads` runs, so the CLI's ``--help`` stays fast.
"""

from __future__ import annotations

import contextlib
import math
import os
from pathlib import Path
from typing import Any

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")


def _affinity_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def _cgroup_paths(proc_cgroup: Path) -> dict[str, str]:
    """{controller: path} of this process's cgroups ("" is the v2 unified hierarchy)."""
    paths: dict[str, str] = {}
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return paths
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for controller in parts[1].split(",") if parts[1] else [""]:
            paths[controller] = parts[2]
    return paths


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _quota_v2(root: Path, rel: str) -> float | None:
    """The tightest ``cpu.max`` quota (quota / period, in CPUs) from this cgroup up to the root."""
    best: float | None = None
    here = root / rel.lstrip("/")
    while True:
        text = _read(here / "cpu.max")
        if text:
            quota, _, period = text.partition(" ")
            if quota != "max":
                try:
                    cpus = int(quota) / int(period or 100000)
                    best = cpus if best is None else min(best, cpus)
                except (ValueError, ZeroDivisionError):
                    pass
        if here == root or root not in here.parents:
            return best
        here = here.parent


def _quota_v1(root: Path, rel: str) -> float | None:
    for mount in ("cpu,cpuacct", "cpu", "cpuacct,cpu"):
        base = root / mount
        for here in (base / rel.lstrip("/"), base):
            quota, period = _read(here / "cpu.cfs_quota_us"), _read(here / "cpu.cfs_period_us")
            if quota is None or period is None:
                continue
            try:
                q, p = int(quota), int(period)
            except ValueError:
                continue
            return q / p if q > 0 and p > 0 else None
    return None


def cgroup_cpu_quota(root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> float | None:
    """The CPU quota of this process's cgroup in CPUs (e.g. 1.5), or None when there is none (or no cgroups)."""
    paths = _cgroup_paths(proc_cgroup)
    if (root / "cgroup.controllers").exists():  # v2 unified hierarchy
        return _quota_v2(root, paths.get("", "/"))
    rel = paths.get("cpu", paths.get("cpuacct", "/"))
    return _quota_v1(root, rel)


def usable_cpus(root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> int:
    """CPUs this process may use: its affinity mask, capped by its cgroup CPU quota (rounded up), at least 1."""
    n = _affinity_cpus()
    quota = cgroup_cpu_quota(root, proc_cgroup)
    if quota is not None:
        n = min(n, math.ceil(quota))
    return max(1, n)


def _cpu_times(proc_stat: Path) -> tuple[int, int] | None:
    """(idle, total) jiffies of all CPUs from /proc/stat, or None off Linux."""
    try:
        fields = proc_stat.read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    if not fields or fields[0] != "cpu":
        return None
    values = [int(v) for v in fields[1:9]]  # user nice system idle iowait irq softirq steal
    return values[3] + values[4], sum(values)


def idle_cpus(interval: float = 0.2, proc_stat: Path = Path("/proc/stat")) -> float | None:
    """How many CPUs of the machine sat idle over the last ``interval`` seconds (None when unknown)."""
    import time

    first = _cpu_times(proc_stat)
    if first is None:
        return None
    time.sleep(interval)
    second = _cpu_times(proc_stat)
    if second is None or second[1] <= first[1]:
        return None
    return (second[0] - first[0]) / (second[1] - first[1]) * (os.cpu_count() or 1)


def env_threads() -> int | None:
    """``OMP_NUM_THREADS`` as a positive int, or None when unset or not a positive int."""
    text = os.environ.get("OMP_NUM_THREADS", "").strip()
    try:
        n = int(text)
    except ValueError:
        return None
    return n if n > 0 else None


def default_threads(num_workers: int = 0, busy_aware: bool = True) -> int:
    """``OMP_NUM_THREADS`` when set, else the usable CPUs minus the DataLoader workers, at least 1.

    ``busy_aware``: CPUs kept busy by other processes right now are not counted (measured over 0.2 s). On a
    2-core machine beside one busy process, two torch threads wait on each other at every parallel region
    (a thread is descheduled half the time), and one thread runs faster than two.
    """
    if env := env_threads():
        return env
    n = usable_cpus()
    if busy_aware and (idle := idle_cpus()) is not None:
        n = min(n, max(1, math.floor(idle + 0.5)))
    return max(1, n - max(0, num_workers or 0))


def apply_threads(threads: int | None = None, num_workers: int = 0) -> dict[str, Any]:
    """Set torch's intra-op (and, when torch still allows it, inter-op) threads; returns what was chosen.

    ``threads`` None takes :func:`default_threads`. The choice is also exported as ``OMP_NUM_THREADS`` and
    ``MKL_NUM_THREADS`` (when unset) so worker processes started later inherit it.
    """
    import torch

    source = "option" if threads else ("OMP_NUM_THREADS" if env_threads() else "usable CPUs")
    n = int(threads) if threads else default_threads(num_workers)
    torch.set_num_threads(n)
    with contextlib.suppress(RuntimeError):  # allowed only before the first inter-op parallel work of the process
        torch.set_num_interop_threads(n)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, str(n))
    return {"threads": n, "source": source, "usable_cpus": usable_cpus()}


def threads_in_use() -> dict[str, int] | None:
    """torch's current intra-/inter-op thread counts, for results files; None when torch was never imported."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None:
        return None
    return {"intra_op": torch.get_num_threads(), "inter_op": torch.get_num_interop_threads()}
