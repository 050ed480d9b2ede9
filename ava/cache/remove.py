"""`ava cache rm` / `ava cache gc`: remove whole cache groups, from a local cache or one in object storage.

A group is removed whole (its metadata first, so it stops being a group at once, then every file or object under
it), and only under its claim (:func:`ava.cache.lease.claim_group`: the ``flock`` or lease an extraction holds for
its whole job): a group that another process holds is never removed. ``rm`` removes the groups named, all or none
(an unknown key, or a held group, refuses the whole command, naming it). ``gc`` removes what no one can use:

- groups cut off while being made (a ``zarr.json`` without a spec: ``ava cache extract`` rebuilds them) and
  folders that lost their ``zarr.json`` (Zarr no longer sees them);
- with ``runs``: complete groups that no run directory under those paths refers to (``run.json``'s ``cache_key``).
  A group being extracted right now is held, so it is kept (and said to be).

Both find what they would remove, pass that list to ``confirm`` (the CLI prints it and asks, unless ``--yes``), and
remove it only on a yes.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ava.cache.lease import LEASE_FILE, claim_group
from ava.cache.location import CachePath, cache_path, is_remote, outages_named, total_bytes
from ava.cache.store import group_keys, lost_groups, open_groups, open_root
from ava.errors import AvaError
from ava.jsonfile import read_json


@dataclass
class Removal:
    """A group to remove: its key, where it is, the VFM it holds (None without a spec), its bytes, and why."""

    key: str
    path: str
    vfm: str | None
    bytes: int
    why: str
    held: str | None = None  # why it cannot be removed now: another job holds it

    def line(self) -> str:
        from ava.cache.plan import size

        what = f"{self.vfm}, " if self.vfm else ""
        return f"{self.key} ({what}{size(self.bytes)}): {self.why}"


@dataclass
class RemoveResult:
    """What ``rm``/``gc`` found (``planned``), removed (keys), and kept because another job holds it (``held``)."""

    cache: str
    planned: list[Removal] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    held: list[Removal] = field(default_factory=list)
    confirmed: bool = False

    @property
    def bytes(self) -> int:
        return sum(r.bytes for r in self.planned if r.key in self.removed)


Confirm = Callable[[list[Removal]], bool]


def _found(cache: str | os.PathLike[str]) -> dict[str, Removal]:
    """Every group of the cache (complete, cut off while being made, lost its zarr.json), keyed by name."""
    root = cache_path(cache)
    open_root(cache, create=False)  # not a cache: said as such
    out: dict[str, Removal] = {}
    for g in open_groups(cache):
        out[g.key] = Removal(g.key, str(g.path), g.spec.get("vfm"), total_bytes(g.path), "")
    for key in group_keys(cache, incomplete=True):
        out[key] = Removal(
            key,
            str(root / key),
            None,
            total_bytes(root / key),
            "cut off while being made (no spec; `ava cache extract` rebuilds it)",
        )
    for key in lost_groups(cache):
        out[key] = Removal(
            key, str(root / key), None, total_bytes(root / key), "lost its zarr.json (Zarr no longer sees it)"
        )
    return out


def _busy(key: str) -> str:
    return f"cache group {key} is held by another job (an `ava cache extract` writing it); not removed"


def _held(root: CachePath, key: str) -> str | None:
    """Why group ``key`` cannot be removed now (another job holds its claim), or None (its claim is free)."""
    try:
        claim_group(root / key, _busy(key)).close()
    except AvaError as e:
        return str(e)
    return None


def _delete(root: CachePath, key: str) -> None:
    """Remove group ``key`` whole, under its claim: its metadata first (it stops being a group), then the rest, the
    claim last (released, and its file or lease object gone with the group)."""
    path = root / key
    with claim_group(path, _busy(key)):  # a lease deletes its object when it still holds it
        if is_remote(path):
            fs = path.fs  # type: ignore[union-attr]
            found = [f for f in fs.find(path.path)]  # type: ignore[union-attr]
            meta = f"{path.path}/zarr.json"  # type: ignore[union-attr]
            if meta in found:
                fs.rm_file(meta)
            rest = [f for f in found if f != meta and not f.endswith("/" + LEASE_FILE)]
            if rest:
                fs.rm(rest)
        else:
            (path / "zarr.json").unlink(missing_ok=True)  # type: ignore[operator]
            shutil.rmtree(path)  # (the lock file with it: the claim's descriptor stays valid until closed)


def _remove(
    cache: str | os.PathLike[str], planned: list[Removal], confirm: Confirm | None, result: RemoveResult
) -> RemoveResult:
    result.planned = planned
    if not planned:
        return result
    result.confirmed = True if confirm is None else bool(confirm(planned))
    if not result.confirmed:
        return result
    root = cache_path(cache)
    for r in planned:
        try:
            _delete(root, r.key)
        except AvaError as e:  # taken since it was listed: kept, said
            r.held = str(e)
            result.held.append(r)
            continue
        result.removed.append(r.key)
    return result


@outages_named(lambda cache, *_, **__: cache)
def remove_groups(cache: str | os.PathLike[str], keys: list[str], *, confirm: Confirm | None = None) -> RemoveResult:
    """Remove the groups ``keys`` of ``cache`` (``ava cache rm``): all of them, or none when a key is unknown or a
    group is held by another job (an AvaError names it). ``confirm`` gets the list first; no removal without a yes
    (None: no question)."""
    if not keys:
        raise AvaError("ava cache rm: give the key(s) of the group(s) to remove (`ava cache ls CACHE` lists them)")
    found = _found(cache)
    unknown = [k for k in dict.fromkeys(keys) if k not in found]
    if unknown:
        known = ", ".join(f"{k} ({r.vfm or 'no spec'})" for k, r in sorted(found.items())) or "none"
        raise AvaError(f"{cache}: no cache group {', '.join(map(repr, unknown))}; groups: {known}; nothing removed")
    planned = [found[k] for k in dict.fromkeys(keys)]
    root = cache_path(cache)
    for r in planned:
        r.why = r.why or "asked"
        held = _held(root, r.key)
        if held:
            raise AvaError(f"{held}; nothing removed")
    return _remove(cache, planned, confirm, RemoveResult(str(cache)))


def referenced_keys(runs: list[str | os.PathLike[str]]) -> set[str]:
    """The cache keys that the run directories under ``runs`` were trained on (every ``run.json`` below each path).
    A path with no run directory under it is refused (a typo must not make every group unreferenced)."""
    keys: set[str] = set()
    for given in runs:
        path = Path(given)
        if not path.exists():
            raise AvaError(f"--runs {given}: no such directory")
        files = [path / "run.json"] if (path / "run.json").is_file() else sorted(path.rglob("run.json"))
        if not files:
            raise AvaError(
                f"--runs {given}: no run directory (run.json) under it; give the --out of `ava fingerprint` "
                "or `ava head train`, or a run directory"
            )
        for f in files:
            keys |= {k for k in _cache_keys(f) if k}
    return keys


def _cache_keys(run_json: Path) -> list[str]:
    """``cache_key`` of a run.json (and of the per-ability blocks some heads keep); refused when unreadable."""
    try:
        run: Any = read_json(run_json)
    except (OSError, ValueError) as e:
        raise AvaError(f"{run_json}: not a readable run.json ({e}); nothing removed") from None
    if not isinstance(run, dict):
        raise AvaError(f"{run_json}: a JSON {type(run).__name__}, not a run.json; nothing removed")
    found = [run.get("cache_key")]
    for value in run.values():  # nested run blocks (per-ability LLM heads record theirs inside)
        if isinstance(value, dict):
            found.append(value.get("cache_key"))
    return [str(k) for k in found if isinstance(k, str)]


@outages_named(lambda cache, *_, **__: cache)
def collect_garbage(
    cache: str | os.PathLike[str], runs: list[str | os.PathLike[str]] | None = None, *, confirm: Confirm | None = None
) -> RemoveResult:
    """Remove the groups of ``cache`` that no one can use (``ava cache gc``): those cut off while being made or
    lost, and with ``runs`` the complete groups that no run under those paths refers to. Groups held by another
    job are kept (``held``). ``confirm`` gets the list first; no removal without a yes (None: no question)."""
    referenced = referenced_keys(runs) if runs else None
    found = _found(cache)
    root = cache_path(cache)
    result = RemoveResult(str(cache))
    planned = []
    for key, r in sorted(found.items()):
        if not r.why:  # a complete group
            if referenced is None or key in referenced:
                continue
            r.why = f"no run under {', '.join(map(str, runs or []))} refers to it"
        held = _held(root, key)
        if held:
            r.held = held
            result.held.append(r)
            continue
        planned.append(r)
    return _remove(cache, planned, confirm, result)
