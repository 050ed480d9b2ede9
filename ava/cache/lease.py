"""A job's claim on a cache group: ``flock`` on a local disk, a lease object in object storage (:func:`claim_group`).

Locally the claim is an exclusive ``flock`` on ``<group>/.extract.lock`` (:class:`ava.locking.JobLock`: the kernel
drops it when the holder dies, and the file names the holder's pid). In object storage there is no ``flock``; the
claim is a lease object, described below. Extraction holds a group's claim for the whole job; ``ava cache rm`` and
``gc`` take it before deleting a group, so neither ever removes a group that a job is writing.

The lease is one small JSON object (``<group>/.extract.lease``: host, pid, a random token, when it was taken and
last renewed). It is created only if absent (a conditional PUT, ``If-None-Match: *``, where the store supports it;
else a PUT read back after a pause, the last writer winning), renewed every :data:`RENEW_S` seconds by a
background thread, and deleted when the job ends (after a job that succeeded, a store that fails at that moment is
asked again for up to :data:`RELEASE_S` seconds). A second job finds it and is refused, naming the holder. A killed
job's lease, or one its job could not delete, is taken over once it is stale (not renewed for :data:`TTL_S`
seconds), or at once when its holder is a process of this host that no longer runs (the kill-and-resume case).

Writes that commit data never depend on the lease: a shard is committed by its own ``done`` chunk, written after
its data (:mod:`ava.cache.store`). The lease keeps two jobs from writing the same group's index and shards.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from typing import Any

from ava.cache.location import CachePath, RemotePath, is_remote
from ava.errors import AvaError, store_outage
from ava.jsonfile import read_json

LEASE_FILE = ".extract.lease"
LOCK_FILE = ".extract.lock"
TTL_S = 120.0
RENEW_S = 20.0
RELEASE_S = 15.0  # how long a job that ended waits for a failing store to let it delete its lease
_SETTLE_S = 0.5  # pause before reading a lease back where the store cannot create-if-absent


class LeaseBusyError(AvaError):
    """Another job holds the group's lease."""


_HELD: set[str] = set()  # tokens of the leases this process holds now


def _alive_here(holder: dict[str, Any]) -> bool | None:
    """Whether the holder's process runs (None: it is on another host, so this host cannot tell). A lease of this
    very process that it no longer holds (its deletion failed: the store was down when the job ended) is dead."""
    if holder.get("host") != socket.gethostname():
        return None
    if holder.get("pid") == os.getpid():
        return holder.get("token") in _HELD
    try:
        os.kill(int(holder.get("pid", -1)), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError, OverflowError):
        return True
    return True


class Lease:
    """Holds ``<group>/.extract.lease`` until :meth:`close`; raises :class:`LeaseBusyError` (``busy`` + holder)
    when another live job holds it."""

    def __init__(self, group_path: RemotePath, busy: str) -> None:
        self.path = group_path / LEASE_FILE
        self.token = os.urandom(8).hex()
        self.record = {"host": socket.gethostname(), "pid": os.getpid(), "token": self.token, "taken": time.time()}
        self._stop = threading.Event()
        self._take(busy)
        self._thread = threading.Thread(target=self._renew, name="ava-cache-lease", daemon=True)
        self._thread.start()

    def _read(self) -> dict[str, Any] | None:
        try:
            return read_json(self.path)
        except FileNotFoundError:
            return None
        except (ValueError, UnicodeDecodeError):
            return {}  # torn or foreign: treated as stale

    def _put(self, *, create: bool) -> bool:
        """Write the lease; with ``create``, only if absent (False when another job's appeared first)."""
        data = json.dumps({**self.record, "renewed": time.time()}).encode()
        if not create:
            self.path.write_bytes(data)
            return True
        try:
            self.path.fs.pipe_file(self.path.path, data, mode="create")
            return True
        except FileExistsError:
            return False
        except (TypeError, NotImplementedError, ValueError):  # no conditional put here: write, wait, read back
            self.path.write_bytes(data)
            time.sleep(_SETTLE_S)
            return (self._read() or {}).get("token") == self.token

    def _take(self, busy: str) -> None:
        for _ in range(3):
            holder = self._read()
            if holder is not None:
                stale = time.time() - float(holder.get("renewed", 0) or 0) > TTL_S
                if not (stale or _alive_here(holder) is False):
                    since = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(float(holder.get("taken", 0) or 0)))
                    raise LeaseBusyError(
                        f"{busy} (lease {self.path} held by pid {holder.get('pid')} on "
                        f"{holder.get('host')} since {since} UTC)"
                    )
                self.path.unlink(missing_ok=True)  # the holder is gone: take it over
            if self._put(create=True):
                _HELD.add(self.token)
                return
        raise LeaseBusyError(f"{busy} (lease {self.path} is being taken by another job)")

    def _renew(self) -> None:
        while not self._stop.wait(RENEW_S):
            with contextlib.suppress(Exception):  # a failed renewal is retried; the lease only goes stale
                self._put(create=False)

    def close(self, *, patience_s: float = RELEASE_S) -> None:
        """Stop renewing and delete the lease object if it is still this job's. A store that fails meanwhile (an
        outage: :func:`ava.errors.store_outage`) is asked again, with backoff, for up to ``patience_s`` seconds, so
        a short outage at the end of a job that succeeded does not leave the group claimed; past that, or on
        another error, the lease stays and the next job takes it over (its holder is gone)."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(timeout=patience_s + 5)  # a renewal in flight lands before the delete, not after it
        _HELD.discard(self.token)
        end, pause = time.monotonic() + patience_s, 0.25
        while True:
            try:
                if (self._read() or {}).get("token") == self.token:
                    self.path.unlink(missing_ok=True)
                return
            except Exception as e:  # noqa: BLE001 - never fails the job: the lease only stays behind
                if store_outage(e) is None or time.monotonic() + pause > end:
                    return
            time.sleep(pause)
            pause = min(2 * pause, 4.0)

    def fileno(self) -> None:
        """No descriptor for DataLoader workers to close (a local lock has one)."""
        return None

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        self.close(patience_s=RELEASE_S if exc_type is None else 0.0)  # a job that failed says so at once


def claim_group(group_path: CachePath, busy: str) -> Any:
    """The exclusive claim on the group at ``group_path`` (``close()`` releases it): a :class:`~ava.locking.JobLock`
    on a local disk, a :class:`Lease` in object storage. Another live holder: an AvaError, ``busy`` and the holder's
    pid (and host)."""
    if is_remote(group_path):
        return Lease(group_path, busy)  # type: ignore[arg-type]
    from ava.locking import JobLock

    return JobLock(group_path / LOCK_FILE, busy)  # type: ignore[operator]
