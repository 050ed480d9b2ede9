"""Devices, precision, processes and the progress bar of the LLM head: what training, evaluation and alignment share.

This module sits below :mod:`ava.heads.llm.train`, :mod:`~ava.heads.llm.evaluate` and
:mod:`~ava.heads.llm.runtime` and imports none of them, so the imports between those run one way.
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch

from ava.errors import AvaError


@dataclass
class Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0


def init_dist(device: str) -> tuple[Dist, torch.device]:
    """Under ``torchrun`` (WORLD_SIZE > 1): join the process group (nccl on GPU, gloo on CPU); else a single rank."""
    from ava.heads.features import resolve_device

    world = int(os.environ.get("WORLD_SIZE", "1"))
    dist = Dist(int(os.environ.get("RANK", "0")), world, int(os.environ.get("LOCAL_RANK", "0")))
    dev = torch.device(resolve_device(device))
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", dist.local_rank)
        torch.cuda.set_device(dev)
    if world > 1 and not torch.distributed.is_initialized():
        torch.distributed.init_process_group("nccl" if dev.type == "cuda" else "gloo")
    return dist, dev


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """The autocast dtype: bf16 on GPU by default, fp32 on CPU."""
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    table = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16}
    if dtype not in table:
        raise AvaError(f"--dtype {dtype!r}: use auto, fp32 or bf16")
    return table[dtype]


def autocast(device: torch.device, dtype: torch.dtype) -> Any:
    if dtype == torch.float32:
        return nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def progress_bar(enabled: bool, training: bool = True) -> Any:
    """The shared progress bar; training bars also show loss, samples/s and tokens/s."""
    from rich.progress import TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from ava.progress import progress

    stats = "loss {task.fields[loss]:.4f}  {task.fields[sps]:.1f} samples/s  {task.fields[tps]:.0f} tokens/s"
    extra = [TextColumn(stats)] if training else []
    return progress(enabled, *extra, TimeElapsedColumn(), TimeRemainingColumn())


def to_device(batch: dict[str, Any], device: torch.device) -> dict[str, Any]:
    """The batch's tensors on ``device`` (asynchronously from pinned memory); plain values stay as they are."""
    return {k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def adamw(params: list[torch.nn.Parameter], lr: float, weight_decay: float) -> torch.optim.Optimizer:
    """AdamW with the fused kernel where PyTorch has one for the device (one launch, no host reads of the step
    count), else the multi-tensor (foreach) implementation."""
    try:
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=True)
    except (RuntimeError, ValueError):
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, foreach=True)
