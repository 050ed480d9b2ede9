"""A cache array's shard, encoded to the bytes Zarr stores for it, in the calling thread, and stored in one write;
and its rows decoded from those bytes, in the calling thread too.

Zarr (3.x) runs every codec call of every array through one event-loop thread per process: the per-chunk merge, the
empty-chunk check, the CRC-32C and the assembly of a shard all wait their turn there, however many writer threads hand
it shards. At SigLIP's shapes that thread alone took longer per image than a GPU's forward pass. So extraction's writer
threads encode their own shards here and write each file once: the compressor (numcodecs' Blosc or Zstd, which release
the GIL off the main thread) and the CRC-32C (google_crc32c, the library Zarr uses) run in the writer thread that owns
the shard.

The bytes are Zarr's: :class:`ArrayEncoder` is built from the array's own metadata and knows exactly the layouts
:mod:`ava.cache.store` creates (a sharding codec with ``bytes`` + ``blosc``/``zstd`` + ``crc32c`` inside, a
``bytes`` + ``crc32c`` index at the end; or, unsharded, ``bytes`` + ``blosc``/``zstd`` + ``crc32c``). Any other
layout gives ``None`` and the caller writes through Zarr. Every chunk is stored (Zarr's ``write_empty_chunks``): a
done row whose all-zero chunk were left out would read as missing (:mod:`ava.cache.chunks`). A test compares the
files with those Zarr writes for full, partial and last shards.

Reads met the same thread (1.1-1.7 ms per SigLIP-sized row of a fingerprint's token reads), so :func:`decode_shard`
reads the rows of the sharded layout in the calling thread: each stored chunk's bytes read where they lie, its
CRC-32C checked and decompressed straight into the caller's array. Zarr stays the reference: a test reads every
layout and codec both ways.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ava.cache.location import CachePath, RemotePath

_EMPTY = 2**64 - 1  # the sharding index's mark of a chunk that is not stored


def _compressor(codec: dict[str, Any]) -> Any | None:
    """The numcodecs compressor of a Zarr v3 bytes-to-bytes codec's metadata, or None for one not known here."""
    name, config = codec.get("name"), codec.get("configuration") or {}
    if name == "blosc":
        from numcodecs import Blosc

        shuffle = {"noshuffle": Blosc.NOSHUFFLE, "shuffle": Blosc.SHUFFLE, "bitshuffle": Blosc.BITSHUFFLE}
        if config.get("shuffle") not in shuffle:
            return None
        return Blosc(
            cname=config["cname"],
            clevel=int(config["clevel"]),
            shuffle=shuffle[config["shuffle"]],
            blocksize=int(config.get("blocksize", 0)),
            typesize=int(config["typesize"]),
        )
    if name == "zstd":
        from numcodecs import Zstd

        return Zstd(level=int(config.get("level", 0)), checksum=bool(config.get("checksum", False)))
    return None


def _chunk_codecs(codecs: list[dict[str, Any]]) -> Any | None:
    """``[bytes(little), blosc|zstd, crc32c]`` -> its compressor, else None."""
    if len(codecs) != 3 or codecs[0].get("name") != "bytes" or codecs[2].get("name") != "crc32c":
        return None
    if (codecs[0].get("configuration") or {}).get("endian", "little") != "little":
        return None
    return _compressor(codecs[1])


def _crc32c(data: Any) -> bytes:
    import google_crc32c

    return int(google_crc32c.value(data)).to_bytes(4, "little")


@dataclass(frozen=True)
class ArrayEncoder:
    """The encoder of one array's chunks and shard files, as Zarr writes them (see the module doc)."""

    compressor: Any
    dtype: np.dtype
    rows_per_file: int  # rows of the array in one stored file (a shard's chunks, or an unsharded chunk)
    chunk_shape: tuple[int, ...]  # one chunk's shape (unsharded: the file's)
    sharded: bool
    encode_key: Any  # the array's chunk key encoding: file coordinates -> "c/<i>/0/0"
    ndim: int

    @classmethod
    def of(cls, arr: Any) -> ArrayEncoder | None:
        """The encoder of the Zarr array ``arr``, or None when its layout is not one this module writes."""
        meta = arr.metadata
        if getattr(meta, "zarr_format", None) != 3 or not np.dtype(arr.dtype).isnative:
            return None
        codecs = [c.to_dict() for c in meta.codecs]
        dtype = np.dtype(arr.dtype)
        if len(codecs) == 1 and codecs[0].get("name") == "sharding_indexed":
            config = codecs[0].get("configuration") or {}
            index = config.get("index_codecs") or []
            chunk = tuple(int(c) for c in config.get("chunk_shape") or ())
            shard = tuple(int(c) for c in meta.chunk_grid.chunk_shape)
            if (
                [c.get("name") for c in index] != ["bytes", "crc32c"]
                or config.get("index_location") != "end"
                or (index[0].get("configuration") or {}).get("endian", "little") != "little"
                or len(chunk) != len(shard)
                or chunk[0] != 1
                or chunk[1:] != shard[1:]
            ):
                return None  # one row per chunk, the whole row: the layout ava.cache.store creates
            compressor = _chunk_codecs(config.get("codecs") or [])
            return (
                None
                if compressor is None
                else cls(compressor, dtype, shard[0], chunk, True, meta.encode_chunk_key, len(shard))
            )
        compressor = _chunk_codecs(codecs)
        shape = tuple(int(c) for c in meta.chunk_grid.chunk_shape)
        return (
            None
            if compressor is None
            else cls(compressor, dtype, shape[0], shape, False, meta.encode_chunk_key, len(shape))
        )

    def chunk_bytes(self, values: np.ndarray) -> bytes:
        """One chunk's stored bytes: its values as raw little-endian bytes in C order (Zarr's ``bytes`` codec),
        compressed as Zarr's codec compresses that byte string, then the CRC-32C of the result."""
        raw = np.ascontiguousarray(values, dtype=self.dtype).reshape(-1).view(np.uint8)
        data = self.compressor.encode(raw)
        return bytes(data) + _crc32c(data)

    def shard_parts(self, chunks: Sequence[np.ndarray | bytes]) -> list[bytes]:
        """A sharded array's file of ``len(chunks)`` rows (fewer than :attr:`rows_per_file` in the array's last
        shard: the rest of its index marks no chunk): each row's chunk (its values, or its stored bytes as they are),
        then the index of (offset, length) pairs and its CRC-32C. Parts in file order."""
        parts = [c if isinstance(c, bytes) else self.chunk_bytes(c) for c in chunks]
        lengths = np.array([len(p) for p in parts], dtype="<u8")
        index = np.full((self.rows_per_file, 2), _EMPTY, dtype="<u8")
        index[: len(parts), 0] = np.cumsum(lengths) - lengths
        index[: len(parts), 1] = lengths
        table = index.tobytes()
        return [*parts, table + _crc32c(table)]

    def chunk_parts(self, block: np.ndarray) -> list[bytes]:
        """An unsharded array's file holding ``block``'s rows (fewer than :attr:`rows_per_file` at the array's end:
        padded to the chunk's shape with the fill value, zero, as Zarr stores an edge chunk)."""
        if block.shape[0] < self.rows_per_file:
            full = np.zeros(self.chunk_shape, dtype=self.dtype)
            full[: block.shape[0]] = block
            block = full
        return [self.chunk_bytes(block)]

    def key(self, file: int) -> str:
        """The store key of the ``file``-th stored file (shard or chunk) of the array."""
        return self.encode_key((file,) + (0,) * (self.ndim - 1))


def stored_chunks(entries: np.ndarray) -> np.ndarray:
    """Which chunks a shard index's (offset, length) pairs [chunks, 2] list as stored (a mask)."""
    return ~((entries[:, 0] == _EMPTY) & (entries[:, 1] == _EMPTY)) & (entries[:, 1] > 0)


def decode_shard(enc: ArrayEncoder, path: Path, entries: np.ndarray, out: np.ndarray) -> None:
    """Decode consecutive rows of one local shard file into ``out`` (``len(entries)`` rows, C-contiguous, the
    array's dtype): ``entries`` are the rows' (offset, length) pairs from the shard's index. The stored chunks are read
    one by one, each straight into the ``bytes`` that google_crc32c and the compressor take (no copy); a chunk
    the index does not list is the fill value (zero), as Zarr reads it. Raises ValueError on a checksum mismatch or a
    chunk that does not decode to one row. (Objects in a store are read by Zarr: :func:`ava.cache.chunks.read_rows`.)

    Why chunk by chunk: the rows' bytes read in one piece (~100 MB for a shard of SigLIP-sized rows) were a fresh
    allocation each time, its every 4 KB page faulted in and zeroed by the kernel, then given back. That was half a
    read's page faults and a large share of its CPU; a chunk's bytes (one row) are small
    enough for the allocator to reuse."""
    stored = stored_chunks(entries)
    if not stored.any():
        out[...] = 0
        return
    row_bytes = out[0].nbytes
    with open(path, "rb", buffering=0) as f:  # unbuffered: each read is one system call into a new ``bytes``
        for i, (offset, length) in enumerate(entries.tolist()):
            if not stored[i]:
                out[i] = 0
                continue
            f.seek(offset)
            data, crc = f.read(length - 4), f.read(4)
            if len(data) != length - 4 or _crc32c(data) != crc:
                raise ValueError(f"{path}: chunk {i} fails its checksum")
            target = out[i].reshape(-1).view(np.uint8)
            if enc.compressor.decode(data, out=target).nbytes != row_bytes:
                raise ValueError(f"{path}: chunk {i} does not decode to one row")


def write_file(path: CachePath, parts: Sequence[Any]) -> None:
    """Store ``parts`` as the file at ``path`` in one step: a local file is written beside it and renamed over it
    (as Zarr's local store does: a reader sees the old file or the new one); an object is one PUT."""
    if isinstance(path, RemotePath):
        path.write_bytes(b"".join(bytes(p) for p in parts))
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.partial")  # hidden: listings skip it (location.py)
    try:
        with open(tmp, "wb") as f:
            for part in parts:  # no join: a shard is ~100 MB at SigLIP's shapes, written as it is
                f.write(part)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def remove_partials(folder: CachePath) -> list[Path]:
    """Delete the temporaries that writers killed mid-write left under a local group ``folder`` (``.NAME.<id>.partial``
    of :func:`write_file`, ``.NAME.<pid>.tmp`` of an atomic text write); returns them. Only a job that holds the
    group's lock calls it, so no file another writer is still writing is removed. An object store has none."""
    if isinstance(folder, RemotePath):
        return []
    removed = []
    for here, _, files in os.walk(folder):
        for name in files:
            if name.startswith(".") and name.endswith((".partial", ".tmp")):
                path = Path(here) / name
                path.unlink(missing_ok=True)
                removed.append(path)
    return removed
