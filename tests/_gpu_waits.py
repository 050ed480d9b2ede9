"""What GPU tests use to find where the host waits for the device: CUDA's sync debug mode ("warn"), each waiting
call noted with the thread that made it."""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch


@contextlib.contextmanager
def noted_waits(waits: list[tuple[str, str]]) -> Iterator[list[tuple[str, str]]]:
    """Within: every call that waits for the GPU (``torch.cuda.set_sync_debug_mode("warn")``) appended to ``waits``
    as (thread name, message); the mode and the warnings' display restored after."""
    shown = warnings.showwarning

    def note(message, category, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if "synchronizing" in str(message).lower():
            waits.append((threading.current_thread().name, str(message).splitlines()[0]))
            return None
        return shown(message, category, *args, **kwargs)

    torch.cuda.synchronize()
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = note
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield waits
        finally:
            torch.cuda.set_sync_debug_mode("default")


def waits_after_the_first(fn: Callable[..., Any], calls: list[str], waits: list[tuple[str, str]]) -> Callable[..., Any]:
    """``fn`` wrapped to note each call's thread in ``calls`` and, from the second call on (the first starts the
    kernels and the allocator), every wait for the GPU it makes in ``waits`` (:func:`noted_waits`)."""

    def wrapped(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        with noted_waits(waits) if calls else contextlib.nullcontext():
            try:
                return fn(*args, **kwargs)
            finally:
                calls.append(threading.current_thread().name)

    return wrapped
