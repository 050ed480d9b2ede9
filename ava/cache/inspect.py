"""`ava cache ls|info|verify`: what a cache holds, a content digest, and an integrity check.

The content digest of a group is independent of row layout, shard size and the number of writers:
sha256 over the finished rows in sha256 order, each row contributing its image sha256 and the stored
bytes of every layer (values, then the scales of the scaled codecs). Two extractions of the same images with the
same spec give the same digest exactly when they stored the same bytes.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from typing import Any

import numpy as np

from ava.cache.chunks import read_rows
from ava.cache.integrity import Damage, describe, has_checksums, repair_group, rows_problem, scan_shards
from ava.cache.location import cache_path, outages_named
from ava.cache.pooling import pool_dim
from ava.cache.store import (
    ROWS_FILE,
    CacheGroup,
    disk_bytes,
    group_keys,
    key_fields,
    lost_groups,
    open_groups,
    spec_key,
)
from ava.errors import AvaError, store_outage

_SHA = re.compile(r"^[0-9a-f]{64}$")


def _groups(cache_dir: str | os.PathLike[str]) -> list[CacheGroup]:
    return open_groups(cache_dir)


def _shards(group: CacheGroup, progress: bool, what: str) -> Iterator[range]:
    from ava.progress import progress as progress_bar

    with progress_bar(progress, transient=True) as bar:  # on stderr: stdout keeps only the report
        task = bar.add_task(f"{what} {group.key}", total=group.num_shards())
        for shard in range(group.num_shards()):
            yield group.shard_rows(shard)
            bar.advance(task)


def _stored(group: CacheGroup, rows: range, done: np.ndarray) -> list[np.ndarray]:
    """The stored arrays of a run of rows, layer by layer (values, then scales); refused, naming them, when a done
    row is not on disk or does not decode (a digest of fill values would pass for a cache's content)."""
    names = [f"features/{la}" for la in group.layers]
    names = (
        [n for la, f in zip(group.layers, names, strict=True) for n in (f, f"scales/{la}")]
        if group.codec.has_scale
        else names
    )
    return [read_rows(group, name, rows.start, rows.stop, need=done[rows.start : rows.stop]) for name in names]


@outages_named(lambda group, **_: group.path)
def content_digest(group: CacheGroup, *, progress: bool = False) -> str:
    """sha256 of the finished rows' stored bytes, in sha256 order (see the module docstring)."""
    rows, done = group.rows(), group.done_mask()
    per_row: dict[str, bytes] = {}
    for rng in _shards(group, progress, "digest"):
        arrays = _stored(group, rng, done)
        for i, row in enumerate(rng):
            if done[row]:
                h = hashlib.sha256(rows[row].encode())
                for a in arrays:
                    h.update(np.ascontiguousarray(a[i]).tobytes())
                per_row[rows[row]] = h.digest()
    total = hashlib.sha256()
    for sha in sorted(per_row):
        total.update(per_row[sha])
    return total.hexdigest()


def group_summary(group: CacheGroup) -> dict[str, Any]:
    spec = group.spec
    n, done = len(group.rows()), int(group.done_mask().sum())
    size = disk_bytes(group.path)
    raw = done * len(group.layers) * group.num_tokens * group.dim * 2
    return {
        "key": group.key,
        "vfm": spec["vfm"],
        "codec": spec["codec"],
        "dtype": spec["dtype"],
        "layers": list(group.layers),
        "preprocess": spec.get("preprocess"),
        "num_tokens": group.num_tokens,
        "dim": group.dim,
        "random_weights": bool(spec.get("random_weights", False)),
        "rows": n,
        "rows_done": done,
        "shard_size": group.shard_size,
        "bytes": size,
        "ratio_to_fp16": round(size / raw, 4) if raw else None,
        "bytes_per_value": round(size / (raw / 2), 4) if raw else None,
    }


@outages_named(lambda cache_dir, **_: cache_dir)
def list_cache(cache_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """One summary per group (no digest: cheap)."""
    return [group_summary(g) for g in _groups(cache_dir)]


@outages_named(lambda cache_dir, **_: cache_dir)
def cache_info(cache_dir: str | os.PathLike[str], *, digest: bool = True, progress: bool = False) -> dict[str, Any]:
    """Per-group summaries with the content digest of each; ``spec`` is the group's full resolved spec."""
    groups = []
    for g in _groups(cache_dir):
        info = group_summary(g)
        info["digest"] = content_digest(g, progress=progress) if digest else None
        info["spec"] = g.spec
        groups.append(info)
    return {"cache": str(cache_dir), "bytes": disk_bytes(cache_path(cache_dir)), "groups": groups}


def _check_spec(group: CacheGroup) -> list[str]:
    problems = []
    spec = group.spec
    missing = [k for k in (*key_fields(spec), "vfm", "num_tokens", "dim") if k not in spec]
    if missing:
        return [f"spec lacks field(s) {missing}"]
    if group.attrs.get("auto_key") != spec_key(spec):
        problems.append(f"spec hash {spec_key(spec)} != recorded {group.attrs.get('auto_key')} (attrs edited?)")
    rows = group.rows()
    if len(set(rows)) != len(rows):
        problems.append("rows.json lists an image twice")
    bad = [r for r in rows if not _SHA.match(r)]
    if bad:
        problems.append(f"rows.json has {len(bad)} entries that are not sha256 hex, e.g. {bad[0]!r}")
    t, d = group.num_tokens, group.dim
    for name in group.array_names():
        try:
            arr = group.array(name)
        except Exception as e:  # a missing or unreadable array
            if store_outage(e) is not None:
                raise
            problems.append(f"array {name} cannot be opened: {e}")
            continue
        if arr.shape[0] < len(rows):
            problems.append(f"array {name} has {arr.shape[0]} rows, rows.json {len(rows)}")
        kind = name.split("/")[0]
        shapes = {"done": (), "features": group.codec.value_shape(t, d), "scales": group.codec.scale_shape(t, d)}
        want = shapes[kind] if kind in shapes else (pool_dim(d, name.split("/")[-1]),)
        if tuple(arr.shape[1:]) != want:
            what = f"view {name.split('/')[-1]} of dim {d}" if kind == "pooled" else f"tokens x dim {t} x {d}"
            problems.append(f"array {name} shape {arr.shape} does not match {what}")
        if name.startswith("features/") and str(arr.dtype) != group.codec.storage_dtype:
            problems.append(f"array {name} dtype {arr.dtype} != codec {group.codec.name} ({group.codec.storage_dtype})")
    return problems


def _check_values(group: CacheGroup, progress: bool) -> tuple[list[str], list[Damage], np.ndarray]:
    """NaN/inf in finished rows, every array chunk that fails to decode (checksum, torn or truncated file),
    and the done mask (a row of an unreadable done chunk counts as not done)."""
    rows = group.rows()
    bad: list[str] = []
    damaged: list[Damage] = []
    done = np.zeros(len(rows), dtype=bool)
    for rng, arrays, damage in scan_shards(group, _shards(group, progress, "verify")):
        damaged += damage
        if "done" not in arrays:
            continue
        mask = np.asarray(arrays["done"], dtype=bool)
        done[rng.start : rng.stop] = mask
        if not mask.any():
            continue
        for layer in group.layers:
            values, scale = arrays.get(f"features/{layer}"), arrays.get(f"scales/{layer}")
            if values is None or (group.codec.has_scale and scale is None):
                continue  # reported as damage
            finite = np.isfinite(group.codec.decode(values, scale)).reshape(len(rng), -1).all(axis=1)
            bad += [f"row {r} (image {rows[r]}) layer {layer} has NaN/inf" for r in np.asarray(rng)[mask & ~finite]]
    return [describe(group, d) for d in damaged] + bad, damaged, done


def _check_data(group: CacheGroup, data: str | os.PathLike[str], done: np.ndarray) -> list[str]:
    from ava.data.format import Dataset

    ds = Dataset(data)
    index = group.index()
    lost: dict[str, str] = {}
    for s in ds.samples():
        sha = s.image_sha256
        if sha not in lost and (sha not in index or not done[index[sha]]):
            lost[sha] = f"{s.ava}/{s.id}"
    if not lost:
        return []
    eg = ", ".join(f"{sid} (image {sha[:12]})" for sha, sid in list(lost.items())[:5])
    return [f"{len(lost)} image(s) of {data} are not in the cache or not done, e.g. {eg}"]


@outages_named(lambda cache_dir, **_: cache_dir)
def verify_cache(
    cache_dir: str | os.PathLike[str],
    *,
    data: str | os.PathLike[str] | None = None,
    progress: bool = False,
    repair: bool = False,
) -> dict[str, Any]:
    """Check every group: spec consistent, rows.json readable, every chunk of a done row on disk
    (:mod:`ava.cache.chunks`) and decoding (checksums), every indexed row done, all values finite, and (with ``data``)
    every image of the dataset present and done; folders of groups that lost their zarr.json are named.
    ``ok`` is False if any problem was found. With ``repair``, damaged rows are marked for re-extraction
    (``report["repaired"]`` rows per group; ``ava cache extract`` with the same options recomputes them)."""
    report: dict[str, Any] = {"cache": str(cache_dir), "groups": {}}
    try:
        groups = _groups(cache_dir)
    except AvaError as e:
        return {**report, "ok": False, "problems": [str(e)]}
    lost = [
        f"{name}: folder of a cache group without its zarr.json (Zarr cannot see it); `ava cache extract` of "
        "its VFM rebuilds it (every row recomputed)"
        for name in lost_groups(cache_dir)
    ]
    if not groups and not group_keys(cache_dir, incomplete=True):
        return {**report, "ok": False, "problems": lost or [f"{cache_dir} holds no cache group"]}
    for key in group_keys(cache_dir, incomplete=True):
        report["groups"][key] = {
            "vfm": None,
            "problems": ["group was cut off while being made (no spec); re-run the extraction or delete it"],
        }
    report["repaired"] = {}
    for g in groups:
        rows_bad = rows_problem(g)
        damaged = [Damage(ROWS_FILE, [], [], rows_bad)] if rows_bad else []
        problems = [describe(g, d) for d in damaged] or _check_spec(g)
        if not problems:
            found, damaged, done = _check_values(g, progress)
            problems += found
            not_done = ~done
            for d in damaged:
                not_done[[r for r in d.rows if r < len(not_done)]] = False  # counted once, as damage
            if not_done.any():
                eg = ", ".join(g.rows()[r][:12] for r in np.flatnonzero(not_done)[:5])
                problems.append(f"{int(not_done.sum())} of {len(done)} rows are not done, e.g. images {eg}")
            if data is not None:
                problems += _check_data(g, data, done)
            if not has_checksums(g):
                report.setdefault("notes", []).append(
                    f"{g.key}: written without chunk checksums (before ava stored them): a flipped byte in it "
                    "cannot be found; re-extract into a new cache to get them"
                )
        if repair and damaged:
            report["repaired"][g.key] = repair_group(g, damaged)
        report["groups"][g.key] = {"vfm": g.spec.get("vfm"), "problems": problems}
    report["problems"] = [f"{k}: {p}" for k, v in report["groups"].items() for p in v["problems"]] + lost
    report["ok"] = not report["problems"]
    return report
