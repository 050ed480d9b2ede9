"""`ava data synth` and `ava data preview`."""

from __future__ import annotations


def synth() -> None:
    """Not yet implemented."""
    raise NotImplementedError


def preview() -> None:
    """Not yet implemented."""
    raise NotImplementedError
