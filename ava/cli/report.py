"""`ava report`."""

from __future__ import annotations


def report() -> None:
    """Not yet implemented."""
    raise NotImplementedError
