"""Where a feature cache lives: a local directory, or any fsspec URL (``s3://bucket/prefix``, ``gs://...``).

:func:`cache_path` turns what the user gave ``--cache`` into a path object: a :class:`pathlib.Path` for a local
directory (``file://DIR`` is the same directory), else a :class:`RemotePath` over the URL's fsspec filesystem. A
``RemotePath`` has the few pathlib methods the cache code uses (``/``, ``parent``, ``name``, ``is_file``,
``read_text``, ``iterdir``...), so the layout code in :mod:`ava.cache.store` reads the same for both; what differs
(how Zarr opens a store, atomic writes, listing files with their sizes, ranged reads) goes through the functions
here.

Credentials and endpoints come from the filesystem's own configuration, never from ``ava``'s files: for ``s3://``
that is botocore's (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, ``AWS_PROFILE``, ``~/.aws/config``,
``AWS_ENDPOINT_URL`` or ``AWS_ENDPOINT_URL_S3`` for an S3-compatible store on premises).

An object store has no rename and no ``flock``; what stands for them: every object is written by one PUT (an S3
PUT is atomic: readers see the old object or the new one), and a job's claim on a group is a lease object
(:mod:`ava.cache.lease`).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

from ava.errors import AvaError, outage_line, redact, store_outage

F = TypeVar("F", bound=Callable[..., Any])
LOCAL_PROTOCOLS = ("file", "local")
# Object stores a cache can live in: each object is written whole by one request (a reader sees the old object or
# the new one, never part of one), listed with sizes, and read by byte range: what the layout relies on.
OBJECT_STORES = ("s3", "s3a", "gs", "gcs", "az", "abfs", "abfss")
# What the other filesystems fsspec knows lack, for the refusal's line
_LACKS = {
    **dict.fromkeys(
        ("http", "https", "github", "gist", "git", "data", "zip", "tar", "libarchive", "reference", "dvc", "jlab"),
        "it is read-only",
    ),
    "memory": "it lives in one process's memory (gone when the command ends, unseen by other processes)",
    **dict.fromkeys(
        ("ftp", "sftp", "ssh", "smb", "webdav", "hdfs", "webhdfs", "arrow_hdfs", "dbfs"),
        "it writes a file as it streams in, so a cut-off upload leaves a half-written file that readers would take",
    ),
    **dict.fromkeys(
        ("cached", "simplecache", "filecache", "blockcache", "dir", "async_wrapper", "asyncwrapper", "generic"),
        "it wraps another filesystem rather than storing anything itself",
    ),
}


class CacheLocationError(AvaError, ValueError):
    """A cache URL whose filesystem cannot be used: protocol unknown or its package missing, store unreachable,
    credentials refused."""


class StoreUnreachableError(CacheLocationError):
    """The object store went away (or kept failing) in the middle of an operation; a rerun resumes."""


def _not_an_abandoned_outage(record: logging.LogRecord) -> bool:
    """asyncio's log filter: False for its reports of a store outage inside the client library's own tasks, futures
    and callbacks ("Task exception was never retrieved", "Future exception was never retrieved", "Exception in
    callback", a traceback each, printed when they are collected): the client retried, or the command says the outage
    in one line."""
    error = record.exc_info[1] if record.exc_info else None
    return error is None or store_outage(error) is None


@contextlib.contextmanager
def store_errors(*paths: Any) -> Iterator[None]:
    """An outage of the object store under any of ``paths`` (:func:`ava.errors.store_outage`) raised inside the
    block becomes a :class:`StoreUnreachableError`: one line naming the cache and the endpoint, saying that what was
    committed is kept and that running the command again resumes. Local paths pass everything through."""
    log = logging.getLogger("asyncio")
    if _not_an_abandoned_outage not in log.filters:
        log.addFilter(_not_an_abandoned_outage)
    try:
        yield
    except AvaError:  # said already (the probe's refusal, a damaged group)
        raise
    except Exception as e:
        remote = [p for p in paths if isinstance(p, RemotePath) or (isinstance(p, str) and is_url(p))]
        outage = store_outage(e) if remote else None
        if outage is None:
            raise
        raise StoreUnreachableError(outage_line(outage, " -> ".join(map(str, remote)))) from e


def outages_named(where: Callable[..., Any]) -> Callable[[F], F]:
    """Decorator: the function runs inside :func:`store_errors` of the cache location(s) ``where(*args, **kwargs)``
    returns (a URL, a path, or a tuple of them), so an object-store outage anywhere in it is one clear line."""

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            found = where(*args, **kwargs)
            with store_errors(*(found if isinstance(found, tuple) else (found,))):
                return fn(*args, **kwargs)

        return run  # type: ignore[return-value]

    return wrap


@dataclass(frozen=True)
class _Stat:
    st_size: int


class RemotePath:
    """A path inside an fsspec filesystem, printed as its URL (``s3://bucket/prefix/key``)."""

    def __init__(self, fs: Any, protocol: str, path: str) -> None:
        self.fs, self.protocol = fs, protocol
        self.path = str(PurePosixPath(path)) if path else ""

    # -- pure path ------------------------------------------------------------------------------------
    def __truediv__(self, other: str | os.PathLike[str]) -> RemotePath:
        return RemotePath(self.fs, self.protocol, f"{self.path}/{os.fspath(other)}".strip("/"))

    def __str__(self) -> str:
        return f"{self.protocol}://{self.path}"

    def __repr__(self) -> str:
        return f"RemotePath({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RemotePath) and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))

    @property
    def name(self) -> str:
        return PurePosixPath(self.path).name

    @property
    def parent(self) -> RemotePath:
        return RemotePath(self.fs, self.protocol, str(PurePosixPath(self.path).parent))

    # -- what is there ---------------------------------------------------------------------------------
    def is_file(self) -> bool:
        try:
            return self.fs.isfile(self.path)
        except FileNotFoundError:
            return False

    def exists(self) -> bool:
        return self.fs.exists(self.path)

    def is_dir(self) -> bool:
        return self.fs.isdir(self.path)

    def iterdir(self) -> Iterator[RemotePath]:
        try:
            entries = self.fs.ls(self.path, detail=False, refresh=True)
        except FileNotFoundError:
            return iter(())
        return iter(RemotePath(self.fs, self.protocol, e) for e in entries if e.strip("/") != self.path)

    def stat(self) -> _Stat:
        return _Stat(int(self.fs.size(self.path)))

    # -- contents --------------------------------------------------------------------------------------
    def read_bytes(self) -> bytes:
        return self.fs.cat_file(self.path)

    def read_text(self, encoding: str = "utf-8") -> str:
        return self.read_bytes().decode(encoding)

    def write_bytes(self, data: bytes) -> None:
        self.fs.pipe_file(self.path, data)  # one PUT: atomic on object stores

    def write_text(self, text: str, encoding: str = "utf-8") -> None:
        self.write_bytes(text.encode(encoding))

    def unlink(self, missing_ok: bool = False) -> None:
        try:
            self.fs.rm_file(self.path)
        except FileNotFoundError:
            if not missing_ok:
                raise

    def mkdir(self, parents: bool = False, exist_ok: bool = False) -> None:
        """Object stores have no folders: nothing to make."""

    def read_range(self, start: int, end: int) -> bytes:
        return self.fs.cat_file(self.path, start=start, end=end)


CachePath = Path | RemotePath


def is_url(text: str | os.PathLike[str]) -> bool:
    return isinstance(text, RemotePath) or "://" in os.fspath(text)


def is_remote(path: Any) -> bool:
    return isinstance(path, RemotePath)


def _filesystem(protocol: str, url: str, option: str = "--cache") -> Any:
    """The fsspec filesystem of ``protocol`` (one instance per process: fsspec caches them), or a one-line error
    naming the package to install."""
    try:
        import fsspec
        from fsspec.registry import known_implementations
    except ImportError:  # pragma: no cover - zarr depends on fsspec's absence gracefully; ava needs it for URLs
        raise CacheLocationError(f"{option} {url}: cache URLs need fsspec (pip install fsspec)") from None
    try:
        cls = fsspec.get_filesystem_class(protocol)
    except ValueError:
        raise CacheLocationError(
            f"{option} {url}: unknown protocol {protocol!r} (fsspec knows "
            f"{', '.join(sorted(known_implementations)[:12])}, ...)"
        ) from None
    except ImportError as e:
        hint = known_implementations.get(protocol, {}).get("err") or str(e)
        package = _package(known_implementations.get(protocol, {}).get("class", ""), hint)
        from ava.extras import extra_of, install_line

        found = extra_of(package)
        how = f"the {found[0]} extra: {install_line(found[0])}" if found else f"pip install {package}"
        raise CacheLocationError(
            f"{option} {url}: the {protocol}:// protocol needs the package {package} ({how})"
        ) from None
    return cls(**_options(protocol))


_LISTING_CACHES = ("s3", "s3a", "gs", "gcs", "az", "abfs", "abfss")


def _options(protocol: str) -> dict[str, Any]:
    """No cached listings: other processes (torchrun ranks, a resumed job) write the same prefix."""
    return {"use_listings_cache": False} if protocol in _LISTING_CACHES else {}


def _package(cls_path: str, hint: str) -> str:
    """The distribution to install for an fsspec implementation class (``s3fs.S3FileSystem`` -> ``s3fs``)."""
    words = [w.strip(".,") for w in hint.split()]
    if "Install" in words and words.index("Install") + 1 < len(words):
        return words[words.index("Install") + 1]
    return cls_path.split(".")[0] or "the protocol's fsspec package"


def cache_path(cache: str | os.PathLike[str] | RemotePath, option: str = "--cache") -> CachePath:
    """The path object of a ``--cache`` value: a local :class:`Path`, or a :class:`RemotePath` for a URL. ``option``
    names the option in errors (other folders that may live at a URL: ``--published``, ``--out``)."""
    if isinstance(cache, (Path, RemotePath)):
        return cache
    text = os.fspath(cache)
    if "://" not in text:
        return Path(text)
    if redact(text) != text:
        raise CacheLocationError(
            f"{option} {redact(text)}: a credential written into the URL is not read (it would be "
            "echoed in logs and saved in run files); give it to the client library instead "
            "(for s3://: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, AWS_PROFILE or "
            "~/.aws/credentials)"
        )
    protocol, rest = text.split("://", 1)
    protocol = protocol.lower()
    if protocol in LOCAL_PROTOCOLS:
        return Path(rest)
    check_protocol(protocol, text)
    if not rest.strip("/"):
        raise CacheLocationError(f"{option} {text}: give a bucket (and prefix), e.g. {protocol}://bucket/features")
    return RemotePath(_filesystem(protocol, text, option), protocol, rest.rstrip("/"))


def check_protocol(protocol: str, url: str) -> None:
    """Refuse, before any work, a protocol whose filesystem cannot hold a cache, naming what it lacks: a remote cache
    is written one whole object per request, committed by writing its metadata last, and that is safe only where
    each write is atomic (an object store's PUT). FTP, SFTP, SMB, WebDAV or HDFS write a file as it streams in, so a
    cut-off upload leaves a half-written file that readers would take."""
    if protocol in OBJECT_STORES:
        return
    try:
        from fsspec.registry import known_implementations
    except ImportError:  # pragma: no cover - a dependency of ava
        known_implementations = {}
    if protocol not in known_implementations and protocol not in _LACKS:
        return  # unknown: said by _filesystem, with the protocols fsspec knows
    lacks = _LACKS.get(protocol, "ava knows no atomic whole-object write there (a cut-off upload could be half-read)")
    raise CacheLocationError(
        f"--cache {url}: a feature cache cannot live on {protocol}://: {lacks}. Use a directory (local or a network "
        "file system) or an object store (s3:// with any S3-compatible endpoint, gs://, az://)"
    )


def zarr_store(path: CachePath, *, read_only: bool) -> Any:
    """What ``zarr.open_group``/``open_array`` take for ``path``: the local path, or Zarr's fsspec store."""
    if not isinstance(path, RemotePath):
        return str(path)
    from zarr.storage import FsspecStore

    store = FsspecStore.from_url(str(path), storage_options=_options(path.protocol) or None, read_only=read_only)
    return _block_reads()(store) if read_only else store


READ_BLOCK = 8 << 20  # bytes fetched per ranged GET when reading chunks of a shard in object storage
READ_BLOCKS_KEPT = 16  # blocks kept per opened array (128 MB at most)
READ_AHEAD = 2  # blocks fetched ahead of the one a read needs, side by side with it


@functools.cache
def _block_reads() -> type:
    """A Zarr store wrapper that serves the sharding codec's per-chunk range reads from ``READ_BLOCK``-sized blocks.

    Zarr 3.1 reads the chunks a selection needs from a shard one ranged GET at a time, in turn (one image's tokens
    per GET here), after reading the shard's index again: on an object store each costs a round trip (64 rows of
    random-vit tokens: 64 GETs). A cache's rows are read in runs of consecutive rows, whose chunks lie side by side
    in the shard object, so the first read of a block fetches it whole, with the ``READ_AHEAD`` blocks after it at
    the same time, and the next chunks come from memory; a shard's index is fetched once. Only stores opened
    read-only are wrapped (a reader never sees a block of a shard it is writing), and the blocks live as long as the
    array handle (``CacheGroup.reload`` drops them)."""
    import asyncio
    from collections import OrderedDict

    from zarr.abc.store import RangeByteRequest, SuffixByteRequest
    from zarr.core.buffer import default_buffer_prototype
    from zarr.storage import WrapperStore

    class BlockReads(WrapperStore):  # type: ignore[type-arg]
        def __init__(self, store: Any) -> None:
            super().__init__(store)
            self._blocks: OrderedDict[tuple[str, int], bytes | None] = OrderedDict()
            self._pending: dict[tuple[str, int], asyncio.Future[bytes | None]] = {}
            self._sizes: dict[str, int] = {}  # shard object -> its size (known once its index was read)

        async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
            if isinstance(byte_range, SuffixByteRequest):  # a shard's index: read again by every partial read
                k = (key, -byte_range.suffix)
                if k not in self._blocks:
                    if k not in self._pending:
                        self._pending[k] = asyncio.ensure_future(self._index(key, byte_range))
                    try:
                        self._blocks[k] = await self._pending[k]
                    finally:
                        self._pending.pop(k, None)
                data = self._blocks[k]
                return None if data is None else prototype.buffer.from_bytes(data)
            if not isinstance(byte_range, RangeByteRequest) or byte_range.end - byte_range.start >= READ_BLOCK:
                return await self._store.get(key, prototype, byte_range)
            first, last = byte_range.start // READ_BLOCK, (byte_range.end - 1) // READ_BLOCK
            parts = [await self._block(key, i) for i in range(first, last + 1)]
            if any(p is None for p in parts):
                return None
            data = b"".join(parts)[byte_range.start - first * READ_BLOCK : byte_range.end - first * READ_BLOCK]  # type: ignore[arg-type]
            if len(data) != byte_range.end - byte_range.start:  # past the object's end: as the store answers it
                return await self._store.get(key, prototype, byte_range)
            return prototype.buffer.from_bytes(data)

        async def _block(self, key: str, i: int) -> bytes | None:
            k = (key, i)
            if k in self._blocks:
                self._blocks.move_to_end(k)
                return self._blocks[k]
            if k not in self._pending:
                self._start(key, i)
                for ahead in range(i + 1, i + 1 + READ_AHEAD):  # runs of rows are read in order: fetch what follows
                    if ahead * READ_BLOCK < self._sizes.get(key, 0) and (key, ahead) not in self._blocks:
                        self._start(key, ahead)
            try:
                return await self._pending[k]
            except Exception:  # noqa: BLE001 - a read-ahead that failed: fetched again, its error raised here
                return await self._fetch(key, i)

        def _start(self, key: str, i: int) -> None:
            if (key, i) in self._pending:
                return
            task = asyncio.ensure_future(self._fetch(key, i))
            self._pending[(key, i)] = task
            task.add_done_callback(lambda t, k=(key, i): self._keep(k, t))

        def _keep(self, k: tuple[str, int], task: asyncio.Future[bytes | None]) -> None:
            self._pending.pop(k, None)
            if task.cancelled() or task.exception() is not None:
                return
            self._blocks[k] = task.result()
            while len(self._blocks) > READ_BLOCKS_KEPT:
                self._blocks.popitem(last=False)

        async def _index(self, key: str, byte_range: Any) -> bytes | None:
            buf = await self._store.get(key, default_buffer_prototype(), byte_range)
            if buf is None:
                return None
            self._sizes[key] = await self._store.getsize(key)
            return buf.to_bytes()

        async def _fetch(self, key: str, i: int) -> bytes | None:
            rng = RangeByteRequest(i * READ_BLOCK, (i + 1) * READ_BLOCK)
            buf = await self._store.get(key, default_buffer_prototype(), rng)
            return None if buf is None else buf.to_bytes()

    return BlockReads


def write_text_atomic(path: CachePath, text: str) -> None:
    """Replace ``path``'s contents in one step (local: a temporary file and a rename; remote: one PUT)."""
    if isinstance(path, RemotePath):
        path.write_text(text)
        return
    from ava.data.format import atomic_write_text

    atomic_write_text(path, text)


def list_sizes(folder: CachePath) -> dict[str, int]:
    """Every object under ``folder`` but metadata (``zarr.json``) and hidden files: relative key -> size."""
    if not isinstance(folder, RemotePath):
        return _walk_local(folder)
    try:
        found = folder.fs.find(folder.path, detail=True)
    except FileNotFoundError:
        return {}
    out: dict[str, int] = {}
    prefix = folder.path.rstrip("/") + "/"
    for name, info in found.items():
        rel = name[len(prefix) :] if name.startswith(prefix) else None
        if not rel or info.get("type") == "directory":
            continue
        last = rel.rsplit("/", 1)[-1]
        if last.startswith(".") or last == "zarr.json":
            continue
        out[rel] = int(info.get("size") or 0)
    return out


def _walk_local(folder: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    stack = [(folder, "")]
    while stack:
        here, prefix = stack.pop()
        try:
            entries = list(os.scandir(here))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for entry in entries:
            if entry.name.startswith(".") or entry.name == "zarr.json":
                continue
            name = prefix + entry.name
            try:
                if entry.is_dir():
                    stack.append((Path(entry.path), name + "/"))
                else:
                    out[name] = entry.stat().st_size
            except OSError:  # vanished or unreadable: as good as missing
                continue
    return out


def read_range(path: CachePath, start: int, end: int) -> bytes:
    """Bytes ``start:end`` of a file (one ranged GET on an object store)."""
    if isinstance(path, RemotePath):
        return path.read_range(start, end)
    with open(path, "rb") as f:
        f.seek(start)
        return f.read(end - start)


def total_bytes(path: CachePath) -> int:
    """Bytes of every file under ``path`` (metadata included)."""
    if isinstance(path, RemotePath):
        try:
            return int(sum(int(i.get("size") or 0) for i in path.fs.find(path.path, detail=True).values()))
        except FileNotFoundError:
            return 0
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def probe(path: CachePath, *, write: bool, option: str = "--cache") -> None:
    """Check, before any work, that a remote cache location can be reached (and written, with ``write``): one
    listing and, for a writer, one small object put and deleted. Refused in one line naming the URL and the cause
    (no such bucket, credentials refused, endpoint unreachable)."""
    if not isinstance(path, RemotePath):
        return
    bucket = path.path.split("/", 1)[0]
    fs = _quick(path)
    try:
        fs.ls(bucket, refresh=True)
        if write:
            token = f"{path.path}/{PROBE}{socket.gethostname()}-{os.getpid()}-{os.urandom(4).hex()}"
            fs.pipe_file(token, b"")
            fs.rm_file(token)
            _remove_dead_probes(fs, path.path)
    except FileNotFoundError:
        raise CacheLocationError(
            f"{option} {path}: bucket {bucket!r} does not exist (or is not visible to these credentials)"
        ) from None
    except PermissionError as e:
        raise CacheLocationError(
            f"{option} {path}: access denied ({_short(e)}); check the credentials "
            "(AWS_ACCESS_KEY_ID, AWS_PROFILE, ~/.aws) and the bucket policy"
        ) from None
    except Exception as e:  # connection refused, DNS, TLS, timeouts: every client library raises its own type
        if "Credential" in type(e).__name__:  # botocore's NoCredentialsError, PartialCredentialsError...
            raise CacheLocationError(
                f"{option} {path}: no usable credentials ({_short(e)}); set them the way the "
                "client library reads them (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, "
                "~/.aws)"
            ) from None
        raise CacheLocationError(
            f"{option} {path}: the store cannot be reached ({_short(e)}); check the "
            "endpoint (AWS_ENDPOINT_URL) and the network"
        ) from None


PROBE = ".ava-probe-"  # + host-pid-random: the object a writer's probe puts and deletes


def _remove_dead_probes(fs: Any, root: str) -> None:
    """Delete the probe objects at ``root`` that writers of this host killed between putting and deleting them left
    (their process is gone); another host's are left to it."""
    try:
        names = fs.ls(root, detail=False, refresh=True)
    except FileNotFoundError:
        return
    for name in names:
        base = name.rstrip("/").rsplit("/", 1)[-1]
        host, _, pid = base.removeprefix(PROBE).rpartition("-")[0].rpartition("-")
        if not base.startswith(PROBE) or host != socket.gethostname() or not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            with contextlib.suppress(FileNotFoundError):
                fs.rm_file(name)
        except PermissionError:  # another user's process: running
            continue


def _quick(path: RemotePath) -> Any:
    """A filesystem like ``path.fs`` that gives up on an unreachable S3 endpoint in seconds, not after s3fs's and
    botocore's retries with backoff (a minute); other protocols: ``path.fs``."""
    if path.protocol not in ("s3", "s3a"):
        return path.fs
    try:
        fs = type(path.fs)(
            skip_instance_cache=True,
            **_options(path.protocol),
            config_kwargs={"connect_timeout": 5, "retries": {"max_attempts": 1}},
        )
    except TypeError:
        return path.fs
    fs.retries = 1  # s3fs's own retries of connection errors (a class attribute)
    return fs


def _short(e: BaseException) -> str:
    text = " ".join(f"{type(e).__name__}: {e}".split())
    return text if len(text) <= 200 else text[:197] + "..."
