"""What GPU tests use to find where the host waits for the device: CUDA's sync debug mode ("warn"), each waiting
call noted with the thread that made it."""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Iterator

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
