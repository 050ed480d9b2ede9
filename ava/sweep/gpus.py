"""The GPUs of this machine, and which of them a local sweep may use (``--gpus all|N|0,2,5``).

The inventory comes from ``nvidia-smi`` (index, name, memory total and free, UUID; nothing in this process touches
CUDA, so the sweep's driver holds no memory on any GPU), else from a short probe process that asks torch
(``torch.cuda.mem_get_info``), else there is none. ``AVA_GPU_INVENTORY=FILE`` describes the machine instead: a file
in the format ``nvidia-smi --query-gpu=index,name,memory.total,memory.free,uuid --format=csv,noheader,nounits``
prints (memory in MiB), for a machine whose ``nvidia-smi`` is not on ``PATH``, or to try a plan's slots.

GPUs are numbered as ``nvidia-smi`` numbers them (PCI bus order; jobs get ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` so CUDA
agrees). When ``CUDA_VISIBLE_DEVICES`` is set for the sweep, its entries are the GPUs (numbered 0, 1 ... in its
order, as torch numbers them) and each job gets the entry of its GPU.

``--gpus``: ``all``; a count ``N`` (the first N GPUs with room); GPU numbers ``0,2,5`` (one GPU: ``3,``); ``0``
for none. A GPU another process already fills (less free memory than ``--gpu-min-free`` GB, by default 90% of the
card's memory) is named and skipped.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ava.sweep.plan import SweepError, parse_gpus

INVENTORY_ENV = "AVA_GPU_INVENTORY"
QUERY = ["--query-gpu=index,name,memory.total,memory.free,uuid", "--format=csv,noheader,nounits"]
FREE_FRACTION = 0.9  # a GPU with less of its memory free is in use by another process
ASSUMED_NODE = 8  # GPUs a dry run of ``gpus = "all"`` plans for on a machine that has none

_PROBE = """
import torch
for i in range(torch.cuda.device_count()):
    free, total = torch.cuda.mem_get_info(i)
    p = torch.cuda.get_device_properties(i)
    print(f"{i}, {p.name}, {total // 2**20}, {free // 2**20}, {getattr(p, 'uuid', '')}")
"""


@dataclass(frozen=True)
class GPU:
    id: str  # what CUDA_VISIBLE_DEVICES names it by for a job
    name: str = ""
    total_mb: float | None = None
    free_mb: float | None = None
    uuid: str = ""

    @property
    def kind(self) -> str:
        """The device kind (``nvidia-h100``), the key of the speed table."""
        return device_kind(self.name)


def device_kind(name: str) -> str:
    """``NVIDIA H100 80GB HBM3`` -> ``nvidia-h100`` (as the benchmarks name their results files)."""
    words = re.sub(r"[^a-z0-9]+", "-", name.lower().replace("nvidia", "")).strip("-").split("-")
    return "nvidia-" + (words[0] if words and words[0] else "gpu")


def parse_inventory(text: str, source: str) -> list[GPU]:
    """GPUs from lines of ``index, name, memory.total, memory.free, uuid`` (memory in MiB; ``[N/A]`` allowed)."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 2 or not parts[0].isdigit():
            raise SweepError(f"{source}: line {n} is not 'index, name, memory.total, memory.free, uuid': {line!r}")

        def mib(i: int, parts: list[str] = parts) -> float | None:
            try:
                return float(parts[i])
            except (IndexError, ValueError):
                return None  # "[N/A]" (some boards report no memory figures)

        out.append(GPU(parts[0], parts[1], mib(2), mib(3), parts[4] if len(parts) > 4 else ""))
    return out


def _nvidia_smi() -> str | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, *QUERY], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def _probe() -> str | None:
    """The probe in its own process (this one never creates a CUDA context), GPUs numbered in PCI bus order."""
    env = {**os.environ, "CUDA_DEVICE_ORDER": os.environ.get("CUDA_DEVICE_ORDER", "PCI_BUS_ID")}
    try:
        out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def inventory() -> list[GPU]:
    """This machine's GPUs (see the module's docstring); empty when it has none."""
    if path := os.environ.get(INVENTORY_ENV):
        try:
            gpus = parse_inventory(Path(path).read_text(encoding="utf-8"), f"{INVENTORY_ENV}={path}")
        except OSError as e:
            raise SweepError(f"{INVENTORY_ENV}={path}: cannot read it ({e.strerror})") from None
    else:
        text = _nvidia_smi()
        if text is None:
            text = _probe() if _torch_has_cuda() else None
        gpus = parse_inventory(text or "", "nvidia-smi")
    return visible(gpus, os.environ.get("CUDA_VISIBLE_DEVICES"))


def _torch_has_cuda() -> bool:
    """Whether the installed torch was built with CUDA (without importing it: a CPU build has no ``torch/lib``
    CUDA runtime); a probe process is started only then."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return False
    lib = Path(next(iter(spec.submodule_search_locations))) / "lib"
    return any(lib.glob("libtorch_cuda*")) or any(lib.glob("libc10_cuda*"))


def visible(gpus: list[GPU], cuda_visible: str | None) -> list[GPU]:
    """The GPUs ``CUDA_VISIBLE_DEVICES`` leaves (each named by its entry there); all when it is unset."""
    if cuda_visible is None:
        return gpus
    out = []
    for token in [t.strip() for t in cuda_visible.split(",") if t.strip()]:
        match = next(
            (g for g in gpus if g.id == token or (g.uuid and token.startswith("GPU-") and g.uuid.startswith(token))),
            None,
        )
        out.append(GPU(token, *(match.name, match.total_mb, match.free_mb, match.uuid)) if match else GPU(token))
    return out


def min_free_mb(gpu: GPU, min_free_gb: float | None) -> float | None:
    """The free memory below which ``gpu`` counts as in use by another process (None: not known)."""
    if min_free_gb is not None:
        return min_free_gb * 1024
    return None if gpu.total_mb is None else FREE_FRACTION * gpu.total_mb


@dataclass
class Choice:
    """The GPUs a sweep runs on, those skipped (another process fills them) and what to say about it."""

    gpus: list[GPU]
    skipped: list[str]
    note: str = ""  # e.g. the count a dry run assumed
    planned: bool = False  # GPUs of the machine a dry run plans for, not of this one


def choose(
    spec: str | None,
    gpus: list[GPU],
    *,
    dry_run: bool = False,
    min_free_gb: float | None = None,
    held: set[str] | frozenset[str] = frozenset(),
) -> Choice:
    """The GPUs of ``spec`` on a machine with ``gpus``. A real run refuses GPUs the machine lacks (one line) and
    skips those another process fills (``held``: GPUs this sweep's own running jobs fill); a dry run does the same
    where the GPUs are here, and plans for the GPUs asked for where they are not."""
    if spec is None:
        return Choice([], [])
    mode, value = parse_gpus(spec)
    if mode == "count" and value == 0:
        return Choice([], [])
    here = ", ".join(g.id for g in gpus) or "none"
    lacks = (
        not gpus
        or (mode == "ids" and any(i >= len(gpus) for i in value))  # type: ignore[union-attr]
        or (mode == "count" and value > len(gpus))  # type: ignore[operator]
    )
    if lacks and dry_run:  # plan for the node it will run on
        if mode == "all":
            return Choice(
                [GPU(str(i)) for i in range(ASSUMED_NODE)],
                [],
                f"no GPU here: gpus = all planned as {ASSUMED_NODE} GPUs (give --gpus N for the node it will run on)",
                planned=True,
            )
        ids = list(range(value)) if mode == "count" else value  # type: ignore[arg-type]
        note = f"planned for GPUs this machine lacks (its GPUs: {here})" if gpus else "no GPU here: planned for them"
        return Choice([GPU(str(i)) for i in ids], [], note, planned=True)
    if not gpus:
        raise SweepError(
            f"--gpus {spec}: this machine has no GPU (nvidia-smi lists none); run the sweep where the GPUs are, "
            "without --gpus to run on the CPU, or with --dry-run to plan for them"
        )
    if mode == "ids":
        missing = [i for i in value if i >= len(gpus)]  # type: ignore[union-attr]
        if missing:
            raise SweepError(f"--gpus {spec}: GPU {missing[0]} is not on this machine (its GPUs: {here})")
        wanted = [gpus[i] for i in value]  # type: ignore[union-attr]
    else:
        if mode == "count" and value > len(gpus):  # type: ignore[operator]
            raise SweepError(f"--gpus {spec}: this machine has {len(gpus)} GPU(s) ({here})")
        wanted = list(gpus)
    ok, skipped = [], []
    for g in wanted:
        floor = min_free_mb(g, min_free_gb)
        if g.id not in held and g.free_mb is not None and floor is not None and g.free_mb < floor:
            skipped.append(
                f"GPU {g.id} ({g.name}: {g.free_mb / 1024:.1f} of {(g.total_mb or 0) / 1024:.1f} GB free, "
                f"under {floor / 1024:.1f}; another process holds it)"
            )
        else:
            ok.append(g)
    if mode == "count":
        ok = ok[:value]  # type: ignore[misc]
    if not ok:
        raise SweepError(f"--gpus {spec}: every GPU asked for is in use by another process: {'; '.join(skipped)}")
    return Choice(ok, skipped)
