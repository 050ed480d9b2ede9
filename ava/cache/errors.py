"""The cache's error type, below every module of :mod:`ava.cache` that raises it."""

from __future__ import annotations

from ava.errors import AvaError


class CacheError(AvaError, ValueError):
    """A cache directory or group is missing, inconsistent, or does not match the requested spec."""
