"""`ava score`."""

from __future__ import annotations


def score() -> None:
    """Not yet implemented."""
    raise NotImplementedError
