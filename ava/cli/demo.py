"""`ava demo`."""

from __future__ import annotations


def demo() -> None:
    """Not yet implemented."""
    raise NotImplementedError
