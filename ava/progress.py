"""The one rich progress bar for long work (training, importing, rendering, extracting), on stderr.

Every caller shows the same leading columns: the task's description, the bar and ``done/total``; the columns after
them are the caller's (a rate, a loss), elapsed time when it names none. The bar goes to stderr so a command's
stdout (a table, a path) stays clean when piped.

When ``AVA_PROGRESS_FILE`` names a file (a local sweep sets it for each job), the bar's tasks are also written
there as JSON (``{"tasks": [{"description", "completed", "total"}], "time"}``, at most once a second and when the
bar stops; by the first rank only under torchrun), whether the bar is drawn or not: ``ava sweep status`` shows a
running job's progress from it.
"""

from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.progress import Progress, ProgressColumn

PROGRESS_FILE_ENV = "AVA_PROGRESS_FILE"


def _reporting(base: type) -> type:
    """``base`` (rich's Progress) that also writes its tasks to ``$AVA_PROGRESS_FILE``."""

    class Reporting(base):  # type: ignore[misc,valid-type]
        _written = 0.0

        def _report(self, force: bool = False) -> None:
            now = time.monotonic()
            if not force and now - self._written < 1.0:
                return
            self._written = now
            path = os.environ.get(PROGRESS_FILE_ENV, "")
            tasks = [{"description": t.description, "completed": t.completed, "total": t.total} for t in self.tasks]
            try:
                tmp = f"{path}.{os.getpid()}.tmp"
                with open(tmp, "w", encoding="utf-8") as f:
                    json.dump({"tasks": tasks, "time": time.time()}, f)
                os.replace(tmp, path)
            except OSError:  # the folder is gone or read-only: progress is a courtesy, never a failure
                pass

        def update(self, *args: Any, **kwargs: Any) -> None:
            super().update(*args, **kwargs)
            self._report()

        def advance(self, *args: Any, **kwargs: Any) -> None:
            super().advance(*args, **kwargs)
            self._report()

        def stop(self) -> None:
            super().stop()
            self._report(force=True)

    return Reporting


def progress(enabled: bool, *extra_columns: ProgressColumn, transient: bool = False) -> Progress:
    """A rich ``Progress`` to use as a context manager: description, bar, ``M/N``, then ``extra_columns``.

    Without ``extra_columns`` the last column is the elapsed time. When ``enabled`` is false the bar is a no-op
    (rich's ``disable``): ``add_task``, ``advance`` and friends still work and nothing is drawn. ``transient``
    clears the bar when the work ends.
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    tail = extra_columns or (TimeElapsedColumn(),)
    path = os.environ.get(PROGRESS_FILE_ENV)
    cls = _reporting(Progress) if path and os.environ.get("RANK", "0") == "0" else Progress
    return cls(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        *tail,
        console=Console(stderr=True),
        disable=not enabled,
        transient=transient,
    )
