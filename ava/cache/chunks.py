"""Which rows of a cache array hold data on disk, and reads that refuse the rows that do not.

Zarr reads a chunk that is not on disk as the array's fill value (zeros): a deleted shard file, an empty one, or a
shard whose index lists no chunk for a row would hand a head zeros as features without a word. So every read of a
cache array goes through :func:`read_rows`, which first checks that the rows it must return are on disk:

- the file of each shard they fall in exists and is at least as long as a shard's index (Zarr reads a 0-byte
  shard as all fill values);
- for sharded arrays (the tokens and scales: one chunk per image), the shard's index lists a chunk for each row
  (the index is read once per shard and kept; it carries its own CRC-32C).

The files of an array are listed once (one walk of its folder, or one listing of its prefix in object storage
(:func:`ava.cache.location.list_sizes`), kept on the group (``chunk_files`` of :class:`~ava.cache.store.CacheGroup`)),
so a read costs a set lookup per shard, and one read of a shard's index the first time a shard is met; a shard not
in the listing is looked for again once before it is called missing (an extraction may have written it since).
A chunk that is on disk but does not decode (a checksum mismatch, a torn file) is reported by the same error.

:func:`gaps` answers the same question without raising, for ``ava cache verify`` (:mod:`ava.cache.integrity`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ava.cache.errors import CacheError
from ava.cache.location import CachePath, is_remote, list_sizes, read_range
from ava.cache.shards import ArrayEncoder, decode_shard, stored_chunks
from ava.errors import store_outage


class CacheDataError(CacheError):
    """Rows a reader needs are missing from a cache array or do not decode (the cache is damaged)."""


class CacheGroup(Protocol):
    """What the reads here need of a group (:class:`ava.cache.store.CacheGroup` is one): its place, key and spec,
    its arrays and their shard encoders, and a dict where the files of each array are kept once listed."""

    path: CachePath
    key: str
    chunk_files: dict[str, Any]

    @property
    def spec(self) -> dict[str, Any]: ...

    def array(self, name: str) -> Any: ...

    def encoder(self, name: str) -> ArrayEncoder | None: ...


@dataclass
class Gap:
    """Rows of one shard of an array that have no data on disk, and why."""

    array: str
    shard: int
    rows: list[int]
    reason: str
    whole: bool  # the shard file itself is missing or unusable (not only some of its chunks)


@dataclass
class _Layout:
    """How an array's rows map to files: rows per shard file, rows per chunk inside it, and the shard index."""

    shard_rows: int
    chunk_rows: int  # == shard_rows for unsharded arrays (one chunk per file)
    chunks: int  # chunks per shard file
    index_bytes: int  # size of a shard's index (0: unsharded)
    index_crc: bool  # the index ends with a CRC-32C
    readable_index: bool  # the index is in the layout read here (little-endian uint64 pairs at the end)


@dataclass
class ArrayFiles:
    """The chunk files of one array as last listed (key -> size), and the stored-chunk mask of each shard read."""

    folder: CachePath
    layout: _Layout
    encode: Any  # chunk coordinates -> key
    ndim: int
    files: dict[str, int] = field(default_factory=dict)
    # shard -> (size, its index's (offset, length) pairs [chunks, 2], or why the index cannot be used)
    indexes: dict[int, tuple[int, np.ndarray | str]] = field(default_factory=dict)

    def list(self) -> None:
        self.files = _walk(self.folder)
        self.indexes.clear()

    def key(self, shard: int) -> str:
        return self.encode((shard,) + (0,) * (self.ndim - 1))

    def shard_gap(self, shard: int, rows: list[int]) -> Gap | None:
        """Why some of ``rows`` (all in ``shard``) have no data, or None when all do."""
        key = self.key(shard)
        size = self.files.get(key)
        lo = shard * self.layout.shard_rows
        span = f"shard {shard} (rows {lo}-{lo + self.layout.shard_rows - 1})"
        if size is None:
            return Gap("", shard, rows, f"{span} cannot be read: file {key} is missing", True)
        if size <= self.layout.index_bytes:
            return Gap("", shard, rows, f"{span} cannot be read: file {key} is truncated ({size} bytes)", True)
        if not self.layout.index_bytes or not self.layout.readable_index:
            return None
        entries = self.entries(shard, size)
        if isinstance(entries, str):
            return Gap("", shard, rows, f"{span} cannot be read: {entries}", True)
        stored = stored_chunks(entries)
        absent = [r for r in rows if not stored[(r - lo) // self.layout.chunk_rows]]
        if not absent:
            return None
        return Gap("", shard, absent, f"{span}: its index lists no chunk for row(s) {row_spans(absent)}", False)

    def entries(self, shard: int, size: int) -> np.ndarray | str:
        """The index of the shard (``size`` bytes long as listed): read once per size and kept."""
        known = self.indexes.get(shard)
        if known is None or known[0] != size:
            known = (size, self._read_index(self.key(shard), size))
            self.indexes[shard] = known
        return known[1]

    def _read_index(self, key: str, size: int) -> np.ndarray | str:
        """The shard's index, (offset, length) pairs [chunks, 2], or why it cannot be used."""
        n = self.layout.index_bytes
        try:
            raw = read_range(self.folder / key, size - n, size)  # one ranged GET on an object store
        except OSError as e:
            return f"file {key} cannot be read ({e.strerror or e})"
        if len(raw) != n:
            return f"file {key} is truncated"
        body = raw[:-4] if self.layout.index_crc else raw
        if self.layout.index_crc:
            import google_crc32c

            if np.uint32(google_crc32c.value(body)).tobytes() != raw[-4:]:
                return f"the index of file {key} fails its checksum (truncated or overwritten)"
        entries = np.frombuffer(body, dtype="<u8").reshape(-1, 2)
        data_end = size - n
        stored = stored_chunks(entries)
        past = stored & ((entries[:, 0] + entries[:, 1]) > data_end)
        if past.any():
            return f"file {key} is truncated (its index points past its end)"
        return entries


def _walk(folder: CachePath) -> dict[str, int]:
    """The array's chunk files with their sizes: one walk of a local folder, one listing of an object-store prefix."""
    return list_sizes(folder)


def _value(x: Any) -> Any:
    return getattr(x, "value", x)  # Zarr's enums (endian, index location) by their spec value


def _layout(arr: Any) -> _Layout:
    """The layout of ``arr`` from its metadata. The index is read here only in the sharding spec's default layout
    (little-endian offset/length pairs, then an optional CRC-32C, at the end of the file: what ava writes), with one
    chunk per row block; other layouts are left to Zarr (a shard file's presence is still checked)."""
    from zarr.codecs import BytesCodec, Crc32cCodec, ShardingCodec

    grid = [int(s) for s in arr.metadata.chunk_grid.chunk_shape]
    codecs = arr.metadata.codecs
    if not (codecs and isinstance(codecs[0], ShardingCodec)):
        return _Layout(grid[0], grid[0], 1, 0, False, False)
    sharding = codecs[0]
    inner = [int(c) for c in sharding.chunk_shape]
    per = [s // c for s, c in zip(grid, inner, strict=True)]
    chunks = int(np.prod(per))
    index = list(sharding.index_codecs)
    crc = bool(index) and isinstance(index[-1], Crc32cCodec)
    plain = len(index) == 1 + crc and isinstance(index[0], BytesCodec) and _value(index[0].endian) == "little"
    readable = plain and all(p == 1 for p in per[1:]) and _value(sharding.index_location) == "end"
    return _Layout(grid[0], inner[0], chunks, 16 * chunks + (4 if crc else 0), crc, readable)


def array_files(group: CacheGroup, name: str) -> ArrayFiles:
    """The listing of array ``name`` kept on ``group`` (made on first use)."""
    files = group.chunk_files.get(name)
    if files is None:
        arr = group.array(name)
        files = ArrayFiles(group.path / name, _layout(arr), arr.metadata.encode_chunk_key, len(arr.shape))
        files.list()
        group.chunk_files[name] = files
    return files


def gaps(group: CacheGroup, name: str, rows: np.ndarray | list[int]) -> list[Gap]:
    """The rows of ``rows`` that have no data in array ``name``, by shard (empty when every row has data)."""
    files = array_files(group, name)
    by_shard: dict[int, list[int]] = {}
    for r in np.asarray(rows, dtype=np.int64).tolist():
        by_shard.setdefault(r // files.layout.shard_rows, []).append(r)
    found: list[Gap] = []
    relisted = False
    for shard, shard_rows in by_shard.items():
        gap = files.shard_gap(shard, shard_rows)
        if gap is not None and not relisted:  # written since the listing? look once more
            files.list()
            relisted = True
            gap = files.shard_gap(shard, shard_rows)
        if gap is not None:
            gap.array = name
            found.append(gap)
    return found


def row_spans(rows: list[int]) -> str:
    """``[4, 5, 6, 9]`` -> ``"4-6, 9"`` (at most 6 spans, then ``...``)."""
    out: list[str] = []
    start = prev = rows[0]
    for r in [*rows[1:], None]:
        if r is not None and r == prev + 1:
            prev = r
            continue
        out.append(f"{start}-{prev}" if prev > start else str(start))
        if r is not None:
            start = prev = r
    return ", ".join(out[:6]) + (" ..." if len(out) > 6 else "")


def repair_hint(group: CacheGroup) -> str:
    cache, vfm = group.path.parent, group.spec.get("vfm", "VFM")
    return (
        f"run `ava cache verify --repair {cache}`, then `ava cache extract --vfm {vfm} --data DIR "
        f"--cache {cache}` to recompute them"
    )


def _where(group: CacheGroup, name: str) -> str:
    return f"cache {group.path.parent}: array {name} of group {group.key} (vfm {group.spec.get('vfm')})"


def read_rows(
    group: CacheGroup, name: str, lo: int, hi: int, need: np.ndarray | None = None, out: np.ndarray | None = None
) -> np.ndarray:
    """Rows ``lo:hi`` of array ``name``, after checking that the rows in ``need`` (all of them by default; a
    boolean mask over ``lo:hi``) are on disk. Raises :class:`CacheDataError` naming the cache, array and rows
    when some are missing or do not decode. ``out``: a C-contiguous array of the rows' shape and the array's dtype,
    filled and returned (the rows are decoded straight into it where ava wrote the layout)."""
    rows = np.arange(lo, hi) if need is None else np.arange(lo, hi)[np.asarray(need, dtype=bool)]
    if len(rows):
        found = gaps(group, name, rows)
        if found:
            missing = sorted(r for g in found for r in g.rows)
            raise CacheDataError(
                f"{_where(group, name)}: row(s) {row_spans(missing)} are marked done but have no usable data ("
                f"{'; '.join(g.reason for g in found[:3])}{' ...' if len(found) > 3 else ''}); {repair_hint(group)}"
            )
    direct = _decoded(group, name, lo, hi, out)
    if direct is not None:
        return direct
    arr = group.array(name)
    try:
        if out is None:
            return np.asarray(arr[lo:hi])
        out[...] = arr[lo:hi]
        return out
    except (MemoryError, OSError):
        raise
    except Exception as e:  # zarr raises ValueError on a checksum mismatch, others on a torn or truncated file
        if store_outage(e) is not None:  # the store went away: no row is damaged
            raise
        _quiet_abandoned_reads()
        cause = " ".join(f"{type(e).__name__}: {e}".split())
        cause = cause if len(cause) <= 160 else cause[:157] + "..."
        bad = _undecodable(arr, lo, hi, array_files(group, name).layout.shard_rows) or list(range(lo, hi))
        raise CacheDataError(
            f"{_where(group, name)}: row(s) {row_spans(bad)} cannot be read, the data is damaged ({cause}); "
            f"{repair_hint(group)}"
        ) from None


def _decoded(group: CacheGroup, name: str, lo: int, hi: int, out: np.ndarray | None = None) -> np.ndarray | None:
    """Rows ``lo:hi`` decoded in the calling thread from the shard files (:func:`ava.cache.shards.decode_shard`),
    or None where Zarr must read them: a layout ava does not write, or a chunk that fails its checksum or does not
    decode (Zarr's read then names the rows at fault).

    Zarr would do the same work on its one event-loop thread for every reader of the process: 1.1-1.7 ms per
    SigLIP-sized row there, the ceiling of a fingerprint's reads on any number of cores (``benchmarks/bench_cache.py``).
    Object storage keeps Zarr's reads: its ranged reads ahead (:mod:`ava.cache.location`) are what a remote read
    waits on, not the decoding."""
    files = group.chunk_files.get(name)  # None: no row had to be on disk (``need``), and Zarr reads what there is
    if files is None or is_remote(group.path) or hi <= lo:
        return None
    enc = group.encoder(name)  # (the writers' encoder knows the layout: the same reads it back)
    if enc is None or not enc.sharded or not files.layout.readable_index:
        return None
    shape = (hi - lo, *enc.chunk_shape[1:])
    if out is None:
        out = np.empty(shape, dtype=enc.dtype)
    elif out.shape != shape or out.dtype != enc.dtype or not out.flags.c_contiguous:
        return None
    per = enc.rows_per_file
    for shard in range(lo // per, (hi - 1) // per + 1):
        first, stop = max(lo, shard * per), min(hi, (shard + 1) * per)
        target = out[first - lo : stop - lo]
        key = files.key(shard)
        size = files.files.get(key)
        if size is None:  # not needed (``need`` said so): read as Zarr reads a missing shard, the fill value
            target[...] = 0
            continue
        entries = files.entries(shard, size)
        if isinstance(entries, str):
            return None
        try:
            decode_shard(enc, files.folder / key, entries[first - shard * per : stop - shard * per], target)
        except (MemoryError, OSError):
            raise
        except Exception as e:  # noqa: BLE001 - a checksum or codec failure: Zarr's read raises it with the rows named
            if store_outage(e) is not None:
                raise
            return None
    return out


_ABANDONED = ("Task was destroyed but it is pending", "Task exception was never retrieved")


def _drop_abandoned(record: Any) -> bool:
    return not str(record.msg).startswith(_ABANDONED)


def _quiet_abandoned_reads() -> None:
    """Keep asyncio from logging Zarr's sibling reads of a chunk that failed to decode: Zarr raises the first
    failure and leaves the other reads of the same call running on its event loop; at exit asyncio logs each as
    "Task was destroyed but it is pending!" with its repr, lines after the one that says what is wrong."""
    import logging

    log = logging.getLogger("asyncio")
    if _drop_abandoned not in log.filters:
        log.addFilter(_drop_abandoned)


def _undecodable(arr: Any, lo: int, hi: int, shard_rows: int) -> list[int]:
    """The rows of ``lo:hi`` that fail to decode: shard by shard, then row by row in the shards that fail (only
    after a read failed, to name the rows)."""
    bad: list[int] = []
    start = lo
    while start < hi:  # (from shard boundary to boundary: a span starting inside a shard is not one shard's step)
        stop = min(hi, (start // shard_rows + 1) * shard_rows)
        if _fails(arr, start, stop):
            bad += [r for r in range(start, stop) if _fails(arr, r, r + 1)]
        start = stop
    return bad


def _fails(arr: Any, lo: int, hi: int) -> bool:
    try:
        arr[lo:hi]
    except (MemoryError, OSError):
        raise
    except Exception as e:
        if store_outage(e) is not None:
            raise
        return True
    return False
