"""What an evaluation inside a training loop must leave as it found: :func:`preserved_training_state` (below
every package that evaluates a model which may be training: the VFM wrapper of a live module, the callbacks)."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch import nn


def _autocast_state() -> dict[str, Any]:
    state: dict[str, Any] = {}
    for device in ("cpu", "cuda"):
        try:
            state[device] = (torch.is_autocast_enabled(device), torch.get_autocast_dtype(device))
        except (RuntimeError, TypeError, AttributeError):  # a device type this build does not know
            continue
    state["cache"] = torch.is_autocast_cache_enabled()
    return state


def _set_autocast_state(state: dict[str, Any]) -> None:
    for device in ("cpu", "cuda"):
        if device in state:
            enabled, dtype = state[device]
            torch.set_autocast_enabled(device, enabled)
            torch.set_autocast_dtype(device, dtype)
    torch.set_autocast_cache_enabled(state["cache"])


@contextlib.contextmanager
def preserved_training_state(module: nn.Module | None = None) -> Iterator[None]:
    """Inside the block anything may change; on leaving it, put back what training depends on.

    Restored: the train/eval mode of every sub-module of ``module`` and the ``requires_grad`` of its parameters,
    the RNG states of Python's ``random``, numpy's global generator, torch on the CPU and on every CUDA device,
    whether grad is enabled, the autocast state (enabled and dtype, per device type; its cache flag), and torch's
    intra-op thread count (which decides how matmuls round)."""
    modes = [(m, m.training) for m in module.modules()] if module is not None else []
    grads = [(p, p.requires_grad) for p in module.parameters()] if module is not None else []
    py_state, np_state, cpu_state = random.getstate(), np.random.get_state(), torch.get_rng_state()
    cuda_states = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    grad_enabled, autocast, threads = torch.is_grad_enabled(), _autocast_state(), torch.get_num_threads()
    try:
        yield
    finally:
        for m, mode in modes:
            m.training = mode
        for p, flag in grads:
            p.requires_grad_(flag)
        random.setstate(py_state)
        np.random.set_state(np_state)
        torch.set_rng_state(cpu_state)
        if cuda_states is not None:
            torch.cuda.set_rng_state_all(cuda_states)
        torch.set_grad_enabled(grad_enabled)
        _set_autocast_state(autocast)
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
