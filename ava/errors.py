"""User-facing errors: the CLI prints their message (which names the file, sample or option at fault)
and exits with status 2, without a traceback.

:func:`describe` turns the other failures a user can cause or meet (an OSError on a read-only or full disk, a
file where a directory should be, bad UTF-8, a truncated safetensors file, corrupt JSON metadata) into one line
that names the path and the cause; ``ava/cli/main.py`` prints it instead of a traceback unless ``AVA_DEBUG=1``.
"""

from __future__ import annotations

import errno
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any


class AvaError(Exception):
    """Base of every error whose message is meant for the user."""


# Credentials written into a URL: `scheme://user:password@` (the password may hold '/', as AWS secret keys do; the
# user may not, so `s3://bucket/model@v1` is left alone), `scheme://token@`, and query parameters that carry one.
_USERINFO = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*://)(?:[^\s:@/]+:[^\s@]*?|[^\s:@/]+)@")
_SECRET_QUERY = re.compile(r"(?i)([?&][\w.-]*(?:key|secret|token|password|passwd|signature|credential|sig)=)[^&\s#]+")


def redact(text: str) -> str:
    """``text`` with every credential written into a URL replaced by ``***`` (``s3://KEY:SECRET@bucket/c`` ->
    ``s3://***@bucket/c``); what the CLI prints, warns or logs goes through here."""
    return _SECRET_QUERY.sub(r"\1***", _USERINFO.sub(r"\1***@", text))


# errno -> what it means for the user (strerror says it too, but tersely or in the C library's words)
_ERRNO_HINTS = {
    errno.ENOSPC: "no space left on the device (disk full)",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.ENOTDIR: "a file is where a directory is expected",
    errno.EISDIR: "a directory is where a file is expected",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.ENOENT: "no such file or directory",
    errno.EEXIST: "already exists",
    errno.ENOTEMPTY: "directory not empty",
}

_PATH_NAMES = ("path", "file", "filename", "fname", "fn", "p", "info_path", "src", "source", "where", "run_dir")


def _looks_like_path(value: Any, must_exist: bool = True) -> Path | None:
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
        if not must_exist and isinstance(value, str):
            return Path(value)
    if isinstance(value, str) and 0 < len(value) < 4096 and "\n" not in value:
        try:
            path = Path(value)
            return path if path.exists() else None
        except (OSError, ValueError):
            return None
    return None


def path_from_traceback(tb: TracebackType | None, must_exist: bool = True) -> Path | None:
    """The file the failing code was working on, read from the innermost frame that holds one.

    Decoders (json, UTF-8, safetensors, zarr metadata) raise without a file name; the caller's frame still has
    the path in a local variable. Locals named like a path are preferred; files are preferred over directories.
    ``must_exist=False`` also takes ``Path`` objects that no longer exist (a temporary removed on failure).
    """
    frames = []
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    # a store root and the key or node path it was reading (zarr's LocalStore has .root; metadata is zarr.json)
    keys = [v for f in frames for k, v in f.f_locals.items() if k in ("key", "path") and isinstance(v, str) and v]
    keys += [k.rstrip("/") + "/zarr.json" for k in keys] + ["zarr.json"]
    roots = [r for f in frames for v in f.f_locals.values() if isinstance(r := getattr(v, "root", None), Path)]
    for frame in reversed(frames):
        named: list[Path] = []
        other: list[Path] = []
        for name, value in frame.f_locals.items():
            path = _looks_like_path(value, must_exist)
            if path is not None:
                (named if name in _PATH_NAMES else other).append(path)
        found = named + other
        files = [p for p in found if p.is_file()]
        if files:
            return files[0]
        for folder in [*(p for p in found if p.is_dir()), *roots]:
            for key in keys:
                if (folder / key).is_file():
                    return folder / key
        if found:
            return found[0]
    return None


def _os_error(e: OSError) -> str:
    where = " -> ".join(str(f) for f in (e.filename, e.filename2) if f is not None)
    if not where:  # write() and friends raise without a file name: take it from the failing frame
        where = str(path_from_traceback(e.__traceback__, must_exist=False) or "")
    cause = _ERRNO_HINTS.get(e.errno or -1) or e.strerror or str(e)
    return f"{where}: {cause}" if where else cause


def _raised_in(tb: TracebackType | None, packages: tuple[str, ...]) -> bool:
    """Whether the innermost frame of ``tb`` is code of one of ``packages`` (module-name prefixes)."""
    name = ""
    while tb is not None:
        name = str(tb.tb_frame.f_globals.get("__name__", ""))
        tb = tb.tb_next
    return name.startswith(packages)


def _worker_error(e: BaseException) -> str | None:
    """The last line of an OSError re-raised from a DataLoader worker ("Caught OSError in DataLoader worker
    process 0. Original Traceback ...": torch puts the worker's whole traceback into the message)."""
    text = str(e)
    if not isinstance(e, OSError) or not text.startswith("Caught ") or "Original Traceback" not in text:
        return None
    last = next((line.strip() for line in reversed(text.splitlines()) if line.strip()), "")
    return f"{last} (in a DataLoader worker)"


# Exceptions of object-store clients (botocore, aiobotocore, aiohttp, urllib3, s3fs, gcsfs, adlfs) that say the store
# was not reached or gave up answering, by class name: this module imports none of those libraries.
_OUTAGES = frozenset(
    {
        "EndpointConnectionError",
        "ConnectionClosedError",
        "ConnectTimeoutError",
        "ReadTimeoutError",
        "HTTPClientError",
        "ProxyConnectionError",
        "ResponseStreamingError",
        "ClientConnectionError",
        "ClientConnectorError",
        "ClientOSError",
        "ServerDisconnectedError",
        "ServerTimeoutError",
        "ClientPayloadError",
        "IncompleteRead",
        "ProtocolError",
    }
)


def store_outage(e: BaseException) -> BaseException | None:
    """The exception in ``e``'s chain that says a remote store could not be reached, dropped the connection, timed
    out or answered a server error (5xx) after its client's own retries; None when ``e`` is about something else.

    Code that reads a cache tells damaged data from an unreachable store with this: an outage must never be taken
    for damage (``ava cache verify --repair`` would mark good rows for re-extraction)."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [e]
    while todo:
        x = todo.pop()
        if x is None or id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, ConnectionError | TimeoutError) or any(c.__name__ in _OUTAGES for c in type(x).__mro__):
            return x
        response = getattr(x, "response", None)  # botocore's ClientError: the HTTP status of the answer
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode") if isinstance(response, dict) else None
        if isinstance(status, int) and status >= 500:
            return x
        todo += [x.__cause__, x.__context__]
    return None


def outage_line(outage: BaseException, where: object = None) -> str:
    """One line for a store outage (:func:`store_outage`): the store's endpoint where the exception names it, the
    cause, and what a user does: run the command again once the store answers (what was committed is kept)."""
    kwargs = getattr(outage, "kwargs", None)
    endpoint = kwargs.get("endpoint_url") if isinstance(kwargs, dict) else None  # botocore: the request's URL
    if endpoint:
        from urllib.parse import urlsplit

        parts = urlsplit(str(endpoint))
        endpoint = f"{parts.scheme}://{parts.netloc}" if parts.netloc else endpoint
    elif getattr(outage, "host", None):  # aiohttp: host and port it connected to
        endpoint = f"{outage.host}:{getattr(outage, 'port', '')}".rstrip(":")  # type: ignore[attr-defined]
    endpoint = endpoint or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    cause = " ".join(f"{type(outage).__name__}: {outage}".split())
    cause = cause if len(cause) <= 160 else cause[:157] + "..."
    at = f"{where}: " if where is not None else ""
    store = f"the object store at {endpoint}" if endpoint else "the object store"
    return (
        f"{at}{store} cannot be reached or stopped answering ({cause}); what was committed before is kept: run "
        "the command again once it answers and it resumes (longer outages: raise the client's retries, e.g. "
        "AWS_MAX_ATTEMPTS=10 AWS_RETRY_MODE=adaptive)"
    )


def too_deep() -> str:
    """Why a JSON text nested deeper than Python's parser goes is refused."""
    return f"JSON nested too deeply to read (over {sys.getrecursionlimit()} levels); no ava input is"


def describe(e: BaseException) -> str | None:
    """One line for a failure the user can act on (path and cause), or None for a bug (keep the traceback)."""
    if isinstance(e, AvaError):
        return str(e)
    worker = _worker_error(e)
    if worker is not None:
        return worker
    outage = store_outage(e)
    if outage is not None and not isinstance(outage, BrokenPipeError):  # (a closed local pipe is no store)
        return outage_line(outage)
    for inner in (e, e.__cause__, e.__context__):
        if isinstance(inner, OSError) and not isinstance(inner, ConnectionError | TimeoutError):
            return _os_error(inner)
    path = path_from_traceback(e.__traceback__)
    at = f"{path}: " if path else ""
    if isinstance(e, UnicodeDecodeError):
        return f"{at}not valid {e.encoding} text (byte {e.object[e.start : e.start + 1]!r} at offset {e.start})"
    import json

    if isinstance(e, RecursionError) and _raised_in(e.__traceback__, ("json.",)):  # a library's own json.loads
        return f"{at}{too_deep()}"
    if isinstance(e, json.JSONDecodeError):
        return f"{at}not valid JSON ({e.msg}: line {e.lineno}, column {e.colno}), corrupt or truncated"
    kind = f"{type(e).__module__}.{type(e).__name__}"
    if "safetensor" in kind.lower():
        return f"{at}not a readable safetensors file, truncated or corrupt ({e})"
    if kind.startswith(("zarr.", "numcodecs.")) or _raised_in(e.__traceback__, ("zarr.", "numcodecs.")):
        # zarr raises builtin types too (a ValueError for metadata naming a codec or data type it refuses)
        return f"{at}corrupt cache data or metadata ({type(e).__name__}: {e})"
    if isinstance(e, MemoryError):
        return "out of memory (try a smaller --batch-size, fewer --num-workers or --max-train)"
    return None


def writer_pid(name: str) -> int | None:
    """The pid in the name of one of ava's temporary files (``.NAME.<pid>.tmp``, ``.NAME.<tag>-<pid>.tmp``: a file
    written atomically beside its target, then renamed), else None."""
    if not (name.startswith(".") and name.endswith(".tmp")):
        return None
    last = name[: -len(".tmp")].rsplit(".", 1)[-1].rsplit("-", 1)[-1]
    return int(last) if last.isdigit() and 0 < int(last) < 1 << 32 else None


def _remove_temp_files(roots: list[Path], max_depth: int, which: Callable[[int], bool]) -> list[Path]:
    """Delete the temporary files (or folders) under ``roots`` whose writer's pid passes ``which``."""
    import shutil

    removed = []
    for root in roots:
        if not root.is_dir():
            continue
        base = len(root.parts)
        for here, dirs, files in os.walk(root):
            depth = len(Path(here).parts) - base
            if depth >= max_depth:
                dirs[:] = []
            for name in [*files, *dirs]:
                pid = writer_pid(name)
                if pid is None or not which(pid):
                    continue
                target = Path(here) / name
                if target.is_dir() and not target.is_symlink():
                    shutil.rmtree(target, ignore_errors=True)
                else:
                    target.unlink(missing_ok=True)
                removed.append(target)
    return removed


def remove_own_temp_files(roots: list[Path], max_depth: int = 3) -> list[Path]:
    """Delete the temporary files this process left under ``roots`` after a failure (:func:`writer_pid`: only names
    holding this process's pid are touched, so another run's temporaries are never removed)."""
    return _remove_temp_files(roots, max_depth, lambda pid: pid == os.getpid())


def remove_dead_temp_files(roots: list[Path], max_depth: int = 3) -> list[Path]:
    """Delete the temporary files that writers killed mid-write left under ``roots``: those whose pid
    (:func:`writer_pid`) is no running process of this host. A job calls it once it holds the folder's lock, so the
    only live writers there are its own and those of runs still going (whose pids run: left alone)."""

    def dead(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except (PermissionError, OverflowError, ValueError):
            return False
        return False

    return _remove_temp_files(roots, max_depth, dead)
