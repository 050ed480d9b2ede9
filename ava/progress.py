"""The one rich progress bar for long work (training, importing, rendering, extracting), on stderr.

Every caller shows the same leading columns: the task's description, the bar and ``done/total``; the columns after
them are the caller's (a rate, a loss), elapsed time when it names none. The bar goes to stderr so a command's
stdout (a table, a path) stays clean when piped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.progress import Progress, ProgressColumn


def progress(enabled: bool, *extra_columns: ProgressColumn, transient: bool = False) -> Progress:
    """A rich ``Progress`` to use as a context manager: description, bar, ``M/N``, then ``extra_columns``.

    Without ``extra_columns`` the last column is the elapsed time. When ``enabled`` is false the bar is a no-op
    (rich's ``disable``): ``add_task``, ``advance`` and friends still work and nothing is drawn. ``transient``
    clears the bar when the work ends.
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    tail = extra_columns or (TimeElapsedColumn(),)
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        *tail,
        console=Console(stderr=True),
        disable=not enabled,
        transient=transient,
    )
