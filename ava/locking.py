"""Exclusive per-job locks (``flock``) that only the process holding them keeps.

A lock is a ``flock`` on a small file; the kernel drops it when the holder dies, so a killed job never
leaves a stale lock behind. ``flock`` belongs to the open file, and a forked child (a DataLoader worker,
a process-pool worker) shares its parent's open files: a worker orphaned by a killed job would keep the
lock. So every lock taken here is closed in forked children (``os.register_at_fork``), and only the
process that took it holds it.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import IO

from ava.errors import AvaError

_HELD: dict[int, IO[str]] = {}  # fd -> handle, of the locks this process took


def _close_in_child() -> None:
    for handle in list(_HELD.values()):
        with contextlib.suppress(OSError):
            handle.close()
    _HELD.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_in_child)


class LockBusyError(AvaError):
    """Another job holds the lock."""


class JobLock:
    """An exclusive lock on ``path`` (created if needed), taken without waiting; ``close()`` releases it.

    A holder may remove the file before releasing it (:meth:`remove`: a run directory that its failed job left
    empty). A job that opened the file just before that would lock a file no longer at ``path``, so the lock is
    kept only where ``path`` is still the file locked; else the file at ``path`` now is tried (a few times)."""

    def __init__(self, path: str | os.PathLike[str], busy: str) -> None:
        self.path = Path(path)
        self.handle: IO[str] | None = None
        for _ in range(3):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.handle = open(self.path, "a+")  # noqa: SIM115 (held until close)
            try:
                import fcntl
            except ImportError:  # not POSIX: no lock
                return
            try:
                fcntl.flock(self.handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self.handle.seek(0)
                holder = self.handle.read().strip()
                self.handle.close()
                self.handle = None
                raise LockBusyError(busy + (f" (held by pid {holder})" if holder else "")) from None
            if self._still_at_path():
                break
            self.handle.close()  # its holder removed it meanwhile: lock the file there now
            self.handle = None
        if self.handle is None:
            raise LockBusyError(busy + " (its lock file was removed and made again while this job took it)")
        self.handle.seek(0)
        self.handle.truncate()
        self.handle.write(str(os.getpid()))
        self.handle.flush()
        _HELD[self.handle.fileno()] = self.handle

    def _still_at_path(self) -> bool:
        assert self.handle is not None
        try:
            here = os.stat(self.path)
        except FileNotFoundError:
            return False
        held = os.fstat(self.handle.fileno())
        return (here.st_dev, here.st_ino) == (held.st_dev, held.st_ino)

    def remove(self) -> None:
        """Delete the lock file, then release the lock (a job that opened the file meanwhile tries again)."""
        if self.handle is not None:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
        self.close()

    def fileno(self) -> None:
        """No descriptor for a forked child to close: children close this lock at fork (``register_at_fork``)."""
        return None

    def close(self) -> None:
        if self.handle is not None:
            _HELD.pop(self.handle.fileno(), None)
            self.handle.close()
            self.handle = None

    def __enter__(self) -> JobLock:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
