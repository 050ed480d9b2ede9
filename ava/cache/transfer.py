"""`ava cache push` / `ava cache pull`: copy a feature cache between a local directory and object storage.

Any two cache locations work (local or fsspec URL, :mod:`ava.cache.location`). The copy is resumable and never
leaves a half-committed group at the destination:

1. data objects (token shards, scales, pooled views) first;
2. then each group's ``done`` chunks (the shards' commit markers: a reader trusts only the rows they mark);
3. then ``rows.json`` and the arrays' metadata, then the group's ``zarr.json`` (a group without it is invisible),
   then the root's: so a reader of the destination sees a group only once everything it points to is there.

Only what differs is sent: an object already at the destination with the same size and the same MD5 is skipped
(an object store's listing gives the MD5 as the ETag of a single-PUT object, so comparing costs no request there;
a local file is hashed), so a resumed copy sends what is missing and a copy of an unchanged cache sends nothing.

Each destination group is held (``flock`` locally, a lease in object storage) while it is written, so an
extraction into it is refused meanwhile. Before anything is copied, a group of the same key holding another spec's
features is refused, and so is one holding features of other images (another dataset's cache: its rows are not the
start of the source's), unless ``force``, which deletes that destination group first. At the end the content digest
of every group (:func:`ava.cache.inspect.content_digest`) is computed on both sides and must be equal.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ava.cache.location import CachePath, RemotePath, cache_path, is_remote, outages_named, probe
from ava.cache.shards import remove_partials, write_file
from ava.cache.store import CacheError, open_groups, open_root, spec_diff

HIDDEN = (".extract.lock", ".extract.lease", ".ava-probe")


def _all_files(root: CachePath) -> dict[str, tuple[int, str | None]]:
    """Every file under ``root`` (metadata included, locks, leases and temporaries not): relative key -> (size, the
    MD5 its listing gives, else None)."""
    if isinstance(root, RemotePath):
        try:
            found = root.fs.find(root.path, detail=True)
        except FileNotFoundError:
            return {}
        prefix = root.path.rstrip("/") + "/"
        items = (
            (name[len(prefix) :], (int(i.get("size") or 0), _listed_md5(i)))
            for name, i in found.items()
            if name.startswith(prefix) and i.get("type") != "directory"
        )
    else:
        items = ((p.relative_to(root).as_posix(), (p.stat().st_size, None)) for p in root.rglob("*") if p.is_file())
    return {rel: info for rel, info in items if not any(part.startswith(".") for part in rel.split("/"))}


def _listed_md5(info: dict[str, Any]) -> str | None:
    """The MD5 an object store's listing gives: S3's ETag of a single-PUT object (a multipart one has a ``-N``
    suffix and is no MD5), GCS's base64 ``md5Hash``."""
    etag = str(info.get("ETag") or info.get("etag") or "").strip('"')
    if len(etag) == 32 and all(c in "0123456789abcdef" for c in etag.lower()):
        return etag.lower()
    if md5 := info.get("md5Hash"):
        try:
            return base64.b64decode(md5).hex()
        except ValueError:
            return None
    return None


def _md5(root: CachePath, rel: str, listed: str | None) -> str:
    if listed is not None:
        return listed
    path = root / rel
    if isinstance(path, RemotePath):
        return hashlib.md5(path.read_bytes(), usedforsecurity=False).hexdigest()
    with open(path, "rb") as f:
        return hashlib.file_digest(f, lambda: hashlib.md5(usedforsecurity=False)).hexdigest()


def _differs(
    src: CachePath, dst: CachePath, rel: str, here: tuple[int, str | None], there: tuple[int, str | None] | None
) -> bool:
    """Whether ``rel`` must be sent: missing at the destination, or another size or MD5 there."""
    if there is None or here[0] != there[0]:
        return True
    return _md5(src, rel, here[1]) != _md5(dst, rel, there[1])


def _phase(rel: str) -> int:
    """Order of copying: data, commit markers, rows.json and array metadata, group metadata, root metadata."""
    parts = rel.split("/")
    if rel == "zarr.json":
        return 4
    if len(parts) == 2 and parts[1] == "zarr.json":
        return 3
    if parts[-1] == "zarr.json" or parts[-1] == "rows.json":
        return 2
    if len(parts) > 1 and parts[1] == "done":
        return 1
    return 0


def _check_specs(src: CachePath, dst: CachePath, force: bool) -> tuple[list[Any], list[str]]:
    """The source's groups, and those of their keys the destination holds for other images (replaced only with
    ``force``); refuses a destination group of the same key that holds another spec's features."""
    groups = open_groups(src)
    if not (dst / "zarr.json").is_file():
        return groups, []
    open_root(dst, create=False)  # an ava cache of a version this ava reads
    there = {g.key: g for g in open_groups(dst)}
    replaced = []
    for g in groups:
        other = there.get(g.key)
        if other is None:
            continue
        if spec_diff(other.spec, g.spec):
            diff = "; ".join(spec_diff(other.spec, g.spec)[:3])
            raise CacheError(
                f"{dst}: cache group {g.key!r} holds features of another spec than {src}'s ({diff}); "
                "copy into another location"
            )
        if (why := _other_images(g.rows(), other.rows())) is not None:
            if not force:
                raise CacheError(
                    f"{dst}: cache group {g.key!r} ({g.spec.get('vfm')}) holds features of other images "
                    f"than {src}'s ({why}): another dataset's cache, which the copy would replace; give "
                    "--force to replace it, or copy into another location"
                )
            replaced.append(g.key)
    return groups, replaced


def _other_images(mine: list[str], theirs: list[str]) -> str | None:
    """Why a destination group's rows are not an earlier state of the source's (a resumed or updated copy: the
    source's rows begin with them), or None when they are."""
    if len(theirs) > len(mine):
        return f"{len(theirs)} rows there, {len(mine)} here"
    bad = next((i for i, (a, b) in enumerate(zip(mine, theirs, strict=False)) if a != b), None)
    return None if bad is None else f"row {bad} is image {theirs[bad][:12]} there, {mine[bad][:12]} here"


def _delete_group(dst: CachePath, key: str) -> None:
    """Remove a destination group's files, its ``zarr.json`` first (readers stop seeing it); the lock or lease this
    copy holds on it stays."""
    (dst / key / "zarr.json").unlink(missing_ok=True)
    for rel in _all_files(dst / key):
        (dst / key / rel).unlink(missing_ok=True)


def _locks(dst: CachePath, keys: list[str]) -> contextlib.ExitStack:
    from ava.cache.integrity import group_lock
    from ava.cache.store import CacheGroup

    stack = contextlib.ExitStack()
    try:
        for key in keys:
            stub = CacheGroup(dst / key, key, {})
            stack.enter_context(
                group_lock(stub, f"another job is writing cache group {key} of {dst}; copy once it has finished")
            )
    except BaseException:
        stack.close()
        raise
    return stack


@outages_named(lambda src, dst, **_: (src, dst))
def copy_cache(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    threads: int = 8,
    verify: bool = True,
    progress: bool = False,
    force: bool = False,
) -> dict[str, Any]:
    """Copy cache ``src`` to ``dst`` (resumable, only what differs; see the module docstring). ``force`` replaces a
    destination group that holds another dataset's features. Returns what was copied, skipped (identical there),
    the bytes, seconds and throughput, the groups replaced, and each group's digest on both sides."""
    s, d = cache_path(src), cache_path(dst)
    probe(s, write=False)
    probe(d, write=True)
    if s == d or (not is_remote(s) and not is_remote(d) and Path(s).resolve() == Path(d).resolve()):
        raise CacheError(f"{src} and {dst} are the same cache")
    groups, replaced = _check_specs(s, d, force)
    t0 = time.perf_counter()
    with _locks(d, [g.key for g in groups]):
        for key in replaced:
            _delete_group(d, key)
        for g in groups:  # what a copy killed mid-write left (this copy holds the groups now)
            remove_partials(d / g.key)
        have = _all_files(d)
        files = _all_files(s)
        with ThreadPoolExecutor(max(1, threads)) as pool:  # hashing reads files: in parallel, as the copy does
            send = list(pool.map(lambda rel: _differs(s, d, rel, files[rel], have.get(rel)), files))
        todo = [(rel, info[0]) for (rel, info), differs in zip(files.items(), send, strict=True) if differs]
        copied = {"files": 0, "bytes": 0}

        def one(item: tuple[str, int]) -> None:
            rel, _ = item
            data = (s / rel).read_bytes()
            write_file(d / rel, [data])  # type: ignore[operator]
            copied["files"] += 1
            copied["bytes"] += len(data)

        from ava.progress import progress as progress_bar

        with progress_bar(progress, transient=True) as bar, ThreadPoolExecutor(max(1, threads)) as pool:
            task = bar.add_task(f"copy {s} -> {d}", total=len(todo))
            for phase in range(5):  # a phase starts once the one before it is all written
                for _ in pool.map(one, [item for item in todo if _phase(item[0]) == phase]):
                    bar.advance(task)
    seconds = time.perf_counter() - t0
    report: dict[str, Any] = {
        "src": str(s),
        "dst": str(d),
        "files": len(files),
        "copied": copied["files"],
        "skipped": len(files) - len(todo),
        "bytes": copied["bytes"],
        "seconds": round(seconds, 3),
        "mb_per_s": round(copied["bytes"] / 1e6 / seconds, 1) if seconds > 0 else None,
        "replaced": replaced,
        "groups": {},
    }
    if verify:
        report["groups"] = verify_copy(s, d, [g.key for g in groups], progress=progress)
    return report


def verify_copy(src: CachePath, dst: CachePath, keys: list[str], *, progress: bool = False) -> dict[str, str]:
    """Each group's content digest, equal on both sides (else a one-line error naming the group)."""
    from ava.cache.inspect import content_digest
    from ava.cache.store import CacheGroup

    digests = {}
    for key in keys:
        a = content_digest(CacheGroup.open(src, key), progress=progress)
        b = content_digest(CacheGroup.open(dst, key), progress=progress)
        if a != b:
            raise CacheError(
                f"{dst}: group {key} does not match {src} after the copy (digest {b[:16]} != "
                f"{a[:16]}); run the copy again (it resumes)"
            )
        digests[key] = a
    return digests
