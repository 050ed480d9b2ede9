"""Find damaged cache data by name, and mark it for re-extraction.

New groups store every chunk with a CRC-32C checksum (Zarr v3's ``crc32c`` codec after zstd, see
:meth:`ava.cache.codecs.Codec.compressors`); each shard's index carries one too (Zarr's default). So a flipped
byte, a truncated shard file or a garbage ``done`` chunk fails to decode instead of returning wrong values. Data
that is not there at all (a deleted or empty shard file, a shard whose index lists no chunk for a row) would read as
zeros: rows marked done are checked to be on disk first (:mod:`ava.cache.chunks`).
:func:`scan_group` reads every array of a group shard by shard and, where a shard fails, row by row, and
names what is damaged: the array, the shard or row, and the image of each row. :func:`repair_group` then
marks those rows not done (first) and clears the damaged bytes (then), so that re-running
``ava cache extract`` with the same options recomputes exactly those rows. A ``rows.json`` that cannot be
read loses the row -> image map of the whole group: every row is marked for re-extraction.

Groups written before checksums were added are still read; a flipped byte in them cannot be found, and
``verify`` says so.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ava.cache.chunks import gaps, row_spans
from ava.cache.lease import claim_group
from ava.cache.location import write_text_atomic
from ava.cache.store import ROWS_FILE, CacheGroup
from ava.errors import store_outage
from ava.jsonfile import read_json


@dataclass
class Damage:
    """What is damaged in one array (or in rows.json): rows to re-extract, shards whose file is unreadable."""

    array: str
    rows: list[int] = field(default_factory=list)
    shards: list[int] = field(default_factory=list)  # whole shard files to delete (index or file unreadable)
    reason: str = ""


def rows_problem(group: CacheGroup) -> str | None:
    """Why ``rows.json`` cannot be used (not JSON, not a list of strings), or None."""
    path = group.path / ROWS_FILE
    try:
        rows = read_json(path, encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        if store_outage(e) is not None:  # the store, not the file: nothing to repair
            raise
        return f"{path} cannot be read ({type(e).__name__}: {e})"
    if not isinstance(rows, list) or not all(isinstance(r, str) for r in rows):
        return f"{path} is not a list of image sha256"
    return None


def has_checksums(group: CacheGroup) -> bool:
    """Whether the group's feature arrays store a CRC-32C per chunk (groups made before it do not)."""
    meta = read_json(group.path / f"features/{group.layers[0]}" / "zarr.json")
    codecs = meta.get("codecs", [])
    if codecs and codecs[0].get("name") == "sharding_indexed":
        codecs = codecs[0].get("configuration", {}).get("codecs", [])
    return any(c.get("name") == "crc32c" for c in codecs)


def _read(arr: Any, lo: int, hi: int) -> tuple[np.ndarray | None, str | None]:
    try:
        return np.asarray(arr[lo:hi]), None
    except Exception as e:  # zarr raises ValueError on a checksum mismatch, others on a torn or truncated file
        if store_outage(e) is not None:  # an unreachable store is no damage: nothing may be repaired for it
            raise
        return None, f"{type(e).__name__}: {e}"


def scan_shards(
    group: CacheGroup, shards: Iterator[range]
) -> Iterator[tuple[range, dict[str, np.ndarray], list[Damage]]]:
    """Per shard: the rows' range, the arrays that decoded (by name), and the damage found in the others."""
    names = group.array_names()
    arrays = {name: group.array(name) for name in names}
    for rng in shards:
        if not len(rng):
            continue
        shard = rng.start // group.shard_size
        good: dict[str, np.ndarray] = {}
        damage: list[Damage] = []
        for name, arr in arrays.items():
            if name != "done" and "done" in good:  # done rows whose data is not on disk (read as zeros)
                done_rows = np.asarray(rng)[np.asarray(good["done"], dtype=bool)]
                absent = gaps(group, name, done_rows) if len(done_rows) else []
                damage += [
                    Damage(
                        name,
                        g.rows,
                        [shard] if g.whole else [],
                        f"{g.reason}, though row(s) {row_spans(g.rows)} are marked done",
                    )
                    for g in absent
                ]
                if any(g.whole for g in absent):
                    continue
            values, error = _read(arr, rng.start, rng.stop)
            if values is not None:
                if not any(d.array == name for d in damage):  # rows without chunks read as zeros: not good
                    good[name] = values
                continue
            if name == "done":  # one chunk per shard: all its rows are unknown
                damage.append(Damage(name, list(rng), [], f"done chunk {shard} cannot be read ({error})"))
                continue
            bad = [r for r in rng if _read(arr, r, r + 1)[1] is not None]
            whole = len(bad) == len(rng)
            reason = (
                f"shard {shard} (rows {rng.start}-{rng.stop - 1}) cannot be read ({error})"
                if whole
                else f"row(s) {', '.join(map(str, bad[:8]))} fail their checksum ({error})"
            )
            damage.append(Damage(name, bad, [shard] if whole else [], reason))
        yield rng, good, damage


def scan_group(group: CacheGroup) -> list[Damage]:
    """Every damaged part of ``group`` (empty when all its data decodes)."""
    problem = rows_problem(group)
    if problem is not None:
        return [Damage(ROWS_FILE, [], [], problem)]
    shards = (group.shard_rows(s) for s in range(group.num_shards()))
    return [d for _, _, damage in scan_shards(group, shards) for d in damage]


def describe(group: CacheGroup, damage: Damage) -> str:
    """One line naming the array, the damage and the images of the rows."""
    if damage.array == ROWS_FILE:
        return f"{damage.reason}: every row must be re-extracted (`ava cache verify --repair`)"
    rows = group.rows()
    images = ", ".join(rows[r][:12] for r in damage.rows[:5] if r < len(rows))
    return f"array {damage.array}: {damage.reason}; image(s) {images}{' ...' if len(damage.rows) > 5 else ''}"


def _shard_file(group: CacheGroup, array: str, shard: int) -> Any:
    arr = group.array(array)
    key = arr.metadata.encode_chunk_key((shard,) + (0,) * (len(arr.shape) - 1))
    return group.path / array / key


def group_lock(group: CacheGroup, busy: str) -> Any:
    """The group's job lock: ``flock`` on a local disk, a lease object in object storage (:mod:`ava.cache.lease`)."""
    return claim_group(group.path, busy)


def repair_group(group: CacheGroup, damage: list[Damage]) -> int:
    """Mark the damaged rows not done, then clear their bytes; returns how many rows need re-extraction.

    Holds the group's extraction lock, so no ``ava cache extract`` writes the group meanwhile."""
    if not damage:
        return 0
    writable = CacheGroup(group.path, group.key, group.attrs, writable=True)
    with group_lock(
        group, f"an `ava cache extract` is writing cache group {group.key}; repair it once that has finished"
    ):
        if any(d.array == ROWS_FILE for d in damage):
            n = writable.done.shape[0]
            writable.done[:] = False  # first: no row stays done without its image
            write_text_atomic(group.path / ROWS_FILE, "[]")  # extraction indexes every image again
            return n
        rows = sorted({r for d in damage for r in d.rows})
        done = writable.done
        for d in damage:  # a garbage done chunk is rewritten whole
            if d.array == "done":
                done[min(d.rows) : max(d.rows) + 1] = False
        for r in rows:
            done[r] = False
        for d in damage:
            if d.array == "done":
                continue
            for shard in d.shards:
                _shard_file(writable, d.array, shard).unlink(missing_ok=True)  # reads as fill values again
            arr = writable.array(d.array)
            for r in d.rows:
                if r // writable.shard_size not in d.shards:
                    arr[r : r + 1] = arr.fill_value  # rewrites that chunk only: the others are not decoded
        return len(rows)
