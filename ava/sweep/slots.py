"""Where a local sweep's jobs run: GPU slots and the CPUs divided among the jobs running at once.

``units`` jobs run at once (``--jobs``; with GPUs, one per GPU slot unless fewer are asked). With GPUs each GPU
has ``per_gpu`` slots (``--jobs-per-gpu``, default 1: never two jobs on one GPU); a job takes ``Job.gpus`` of them
on distinct GPUs (an extraction given ``--gpus-per-extract K`` takes K and runs under torchrun), the least used
GPUs first, and sees only those through ``CUDA_VISIBLE_DEVICES``.

The CPUs this process may use are divided into ``units`` equal groups; a job holds one group per unit it takes
and runs pinned to those CPUs (its affinity), with ``OMP_NUM_THREADS`` set to their number, so torch's threads and
the DataLoader workers each job sizes from its affinity add up to the machine, not to ``units`` times it. A sweep
of one job at a time keeps the machine whole and sets nothing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from ava.threads import env_threads, usable_cpus


@dataclass(frozen=True)
class Lease:
    """What one running job holds: GPUs (as ``CUDA_VISIBLE_DEVICES`` names them), CPU units and their CPUs."""

    gpus: tuple[str, ...] = ()
    units: tuple[int, ...] = ()
    cpus: tuple[int, ...] = ()  # empty: not pinned
    threads: int | None = None  # OMP_NUM_THREADS for the job (None: the job's own default)

    def env(self) -> dict[str, str]:
        """The variables a job on this lease runs with."""
        out: dict[str, str] = {}
        if self.gpus:
            # nvidia-smi numbers GPUs by PCI bus; CUDA's own default order (fastest first) may differ
            out["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
            out["CUDA_VISIBLE_DEVICES"] = ",".join(self.gpus)
        if self.threads:
            out["OMP_NUM_THREADS"] = out["MKL_NUM_THREADS"] = str(self.threads)
        return out

    def describe(self) -> str:
        """``GPU 2, CPUs 8-11 (4 threads)`` for logs and progress lines ("" when the job has the machine whole)."""
        parts = []
        if self.gpus:
            parts.append(f"GPU{'s' if len(self.gpus) > 1 else ''} {','.join(self.gpus)}")
        if self.cpus:
            parts.append(f"CPUs {cpu_ranges(self.cpus)} ({self.threads} thread{'s' if self.threads != 1 else ''})")
        return ", ".join(parts)


def cpu_ranges(cpus: tuple[int, ...] | list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``0-2,5`` (the form ``taskset -c`` and ``/proc`` use)."""
    spans: list[list[int]] = []
    for c in sorted(cpus):
        if spans and spans[-1][1] == c - 1:
            spans[-1][1] = c
        else:
            spans.append([c, c])
    return ",".join(f"{a}-{b}" if b > a else str(a) for a, b in spans)


def parse_cpus(text: str) -> list[int]:
    """``0-2,5`` -> ``[0, 1, 2, 5]``."""
    out: list[int] = []
    for part in text.split(","):
        if not part.strip():
            continue
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def _affinity() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux: no pinning
        return []


@dataclass
class Slots:
    """The slots of one local sweep: ``units`` jobs at once, on ``gpus`` (``per_gpu`` jobs each) or on the CPU.

    ``cpus``: the CPUs to divide (default: this process's affinity); ``usable``: how many of them it may use (default:
    :func:`ava.threads.usable_cpus`, which also counts a cgroup's CPU quota)."""

    units: int = 1
    gpus: list[str] = field(default_factory=list)
    per_gpu: int = 1
    cpus: list[int] | None = None
    usable: int | None = None
    share: bool = True  # divide this machine's CPUs (False: the slots of a machine planned for, not this one)

    def __post_init__(self) -> None:
        self.units = max(1, self.units)
        cpus = _affinity() if self.cpus is None else list(self.cpus)
        usable = self.usable or usable_cpus()
        self.groups: list[tuple[int, ...]] = []
        self.threads: int | None = None
        if self.units > 1 and self.share:  # one job at a time keeps the machine whole (as it would run alone)
            share = max(1, usable // self.units)
            self.threads = min(share, env_threads() or share)
            if len(cpus) >= self.units:
                size = len(cpus) // self.units
                self.groups = [tuple(cpus[i * size : (i + 1) * size]) for i in range(self.units)]
        self.free_units = list(range(self.units))
        self.load = {g: 0 for g in self.gpus}  # jobs on each GPU

    def need(self, job: Any) -> int:
        """GPUs ``job`` takes here (0 on a CPU-only sweep)."""
        return max(1, int(getattr(job, "gpus", 1) or 1)) if self.gpus else 0

    def take(self, job: Any, on: tuple[str, ...] | None = None) -> Lease | None:
        """A lease for ``job`` (taken), or None when its GPUs or units are not free now. ``on``: these GPUs (a job
        found running when the sweep began keeps the GPUs it was started on)."""
        n = self.need(job) if on is None else len(on)
        units = max(1, n)
        if len(self.free_units) < units:
            return None
        if on is None:
            free = sorted((g for g in self.gpus if self.load[g] < self.per_gpu), key=lambda g: self.load[g])
            if len(free) < n:
                return None
            gpus = tuple(sorted(free[:n], key=self.gpus.index))
        else:
            gpus = tuple(on)
        taken, self.free_units = self.free_units[:units], self.free_units[units:]
        for g in gpus:
            if g in self.load:
                self.load[g] += 1
        cpus = tuple(c for u in taken for c in self.groups[u]) if self.groups else ()
        threads = self.threads * units if self.threads else None
        return Lease(gpus, tuple(taken), cpus, threads)

    def give(self, lease: Lease) -> None:
        for g in lease.gpus:
            if g in self.load:
                self.load[g] -= 1
        self.free_units = sorted([*self.free_units, *lease.units])

    def why_not(self, job: Any) -> str:
        """Why ``job`` can never start on these slots."""
        n = self.need(job)
        if n > len(self.gpus):
            return f"needs {n} GPUs at once and the sweep has {len(self.gpus)}"
        return f"needs {max(1, n)} job slots at once and the sweep runs {self.units}"

    def describe(self) -> str:
        """One line: the slots and how the CPUs are shared."""
        cpu = (
            f"{self.threads} CPU thread(s) per job"
            + (f", pinned to {len(self.groups[0])} CPU(s)" if self.groups else "")
            if self.threads
            else "the whole machine per job"
        )
        where = f"{self.units} job(s) at once on " + (
            f"GPU(s) {','.join(self.gpus)} ({self.per_gpu} job(s) per GPU)" if self.gpus else "the CPU"
        )
        return f"{where}; {cpu}" if self.share else where
