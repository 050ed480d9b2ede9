"""Where a plan's jobs will run, and the speed figures its estimate uses.

A local plan with ``gpus`` runs on the GPUs :func:`ava.sweep.gpus.choose` picks (``jobs_per_gpu`` jobs each, at most
``jobs`` at once); without, on ``jobs`` CPU slots as before. The device kind (the key of the speed table) is that of
the GPUs, else ``cpu``; ``--device-kind`` names another (plan on a laptop for the node it will run on). A SLURM
plan's estimate simulates ``array_parallelism`` slots (the cluster may give fewer). ``--calibrate`` times this
machine first (:mod:`ava.cost.calibrate`, in its own process, on the first GPU of the sweep).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

from ava.cost import CostError, Speeds, kinds, speeds_for
from ava.sweep.gpus import GPU, choose, inventory
from ava.sweep.plan import SweepError
from ava.sweep.slots import Slots

DEFAULT_GPU_KIND = "nvidia-h100"  # what a plan for GPUs that are not here is estimated on, unless --device-kind


@dataclass
class Machine:
    slots: Slots
    kind: str  # the device kind the estimate uses
    gpus: list[GPU] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # GPUs another process fills, in words
    notes: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # variables for every job
    here: str = "cpu"  # this machine's device kind (what --calibrate can time)


def machine_for(
    plan: Any,
    *,
    dry_run: bool = False,
    device_kind: str | None = None,
    held: frozenset[str] = frozenset(),
) -> Machine:
    """The slots, GPUs and device kind of ``plan`` on this machine (``held``: GPUs this sweep's own jobs fill). A plan
    without GPU fields (a reproduction's) runs on ``jobs`` CPU slots."""
    gpus_here = inventory() if plan.executor == "local" or dry_run else []
    here = gpus_here[0].kind if gpus_here and gpus_here[0].name else "cpu"
    notes: list[str] = []
    if plan.executor == "slurm":
        slots = Slots(plan.slurm.array_parallelism, cpus=[], usable=1)
        slots.threads = plan.slurm.cpus_per_job
        kind = device_kind or (DEFAULT_GPU_KIND if plan.slurm.gpus_per_job else "cpu")
        if plan.slurm.gpus_per_job and not device_kind:
            notes.append(f"the cluster's GPUs are estimated as {kind} (--device-kind names theirs)")
        return Machine(slots, _known(kind), notes=notes, here=here)
    gpus, per_gpu, per_extract = (
        getattr(plan, k, d) for k, d in (("gpus", None), ("jobs_per_gpu", 1), ("gpus_per_extract", 1))
    )
    choice = choose(gpus, gpus_here, dry_run=dry_run, min_free_gb=getattr(plan, "gpu_min_free", None), held=held)
    notes += [choice.note] if choice.note else []
    if choice.gpus:
        if per_extract > len(choice.gpus):
            raise SweepError(
                f"--gpus-per-extract {per_extract} is more than the {len(choice.gpus)} GPU(s) this sweep "
                f"has ({', '.join(g.id for g in choice.gpus)}"
                + (f"; skipped: {'; '.join(choice.skipped)}" if choice.skipped else "")
                + ")"
            )
        units = plan.jobs or len(choice.gpus) * per_gpu
        if units > len(choice.gpus) * per_gpu:  # "all" or busy GPUs left fewer slots than --jobs
            notes.append(f"--jobs {units} capped at the {len(choice.gpus) * per_gpu} GPU slot(s)")
            units = len(choice.gpus) * per_gpu
        ids = [g.id for g in choice.gpus]  # planned for another machine: its CPUs are not these
        slots = Slots(units, ids, per_gpu, cpus=[] if choice.planned else None, share=not choice.planned)
        names = [g.name for g in choice.gpus if g.name]
        kind = device_kind or (choice.gpus[0].kind if names else DEFAULT_GPU_KIND)
        if not names and not device_kind:
            notes.append(f"estimated as {kind} GPUs (--device-kind names the node's)")
        if len({g.kind for g in choice.gpus if g.name}) > 1:
            notes.append(f"GPUs of several kinds: estimated as {kind}, the first's")
        env = {} if "CUDA_VISIBLE_DEVICES" in os.environ else {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
        return Machine(slots, _known(kind), choice.gpus, choice.skipped, notes, env, here)
    slots = Slots(plan.jobs or 1)
    device = str(getattr(plan, "device", "auto"))
    on_gpu = device != "cpu" and gpus_here and device.startswith(("auto", "cuda"))
    kind = device_kind or (here if on_gpu else "cpu")
    return Machine(slots, _known(kind), notes=notes, here=here)


def _known(kind: str) -> str:
    """``kind`` when the speed table or a calibration on this host has figures for it; else refused naming both."""
    if kind in kinds():
        return kind
    try:
        speeds_for(kind)
    except CostError as e:
        raise SweepError(f"--device-kind {kind}: {e}") from None
    return kind


def speeds(machine: Machine, plan: Any, *, calibrate: bool = False, say: Any = None) -> Speeds:
    """The figures for the machine's device kind, after timing this machine first with ``calibrate``."""
    if calibrate:
        if machine.kind != machine.here:
            raise SweepError(
                f"--calibrate times this machine ({machine.here}); the estimate is for {machine.kind}: "
                "drop --calibrate, or --device-kind"
            )
        run_calibration(machine, plan, say)
    try:
        return speeds_for(machine.kind)
    except CostError as e:
        raise SweepError(str(e)) from None


def run_calibration(machine: Machine, plan: Any, say: Any = None) -> None:
    """``python -m ava.cost.calibrate`` for the plan's VFMs, on the sweep's first GPU (or the CPU)."""
    device = "cpu" if machine.kind == "cpu" else "cuda"
    argv = [sys.executable, "-m", "ava.cost.calibrate", "--kind", machine.kind, "--device", device]
    argv += ["--data", str(plan.data)] if getattr(plan, "data", None) else []
    argv += ["--jobs", str(machine.slots.units)]
    for vfm in getattr(plan, "vfm", None) or []:
        argv += ["--vfm", vfm]
    env = {**os.environ, **machine.env}
    if machine.gpus:
        env["CUDA_VISIBLE_DEVICES"] = machine.gpus[0].id
    out = subprocess.run(argv, capture_output=True, text=True, env=env)
    for line in out.stdout.splitlines():
        if say:
            say(line)
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or out.stdout.strip().splitlines() or ["?"])[-1]
        raise SweepError(f"--calibrate failed: {last}")
