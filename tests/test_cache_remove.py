"""`ava cache rm` / `gc` (ava.cache.remove): whole groups removed after a yes, unknown keys refused, a group that
another process holds never removed, gc's cut-off, lost and unreferenced groups; locally and in object storage."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from ava.cache import collect_garbage, open_cache, remove_groups, verify_cache
from ava.cache.location import cache_path
from ava.cli.main import app
from ava.errors import AvaError
from tests.helpers import REPO, extract_cache, objects

torch.set_num_threads(1)
runner = CliRunner()

# A child that holds a group's claim (what an extraction holds for its whole job) until its stdin closes; it writes
# argv[3] once it holds it: the test acts at that known point.
HOLD = """
import sys, pathlib
from ava.cache.lease import claim_group
from ava.cache.location import cache_path
claim = claim_group(cache_path(sys.argv[1]) / sys.argv[2], "busy")
pathlib.Path(sys.argv[3]).write_text("held")
sys.stdin.read()
claim.close()
"""


def _two_groups(data: Path, cache: str | Path) -> tuple[str, str]:
    fp16, int4 = (extract_cache(data, cache, "pixels", codec=codec)["key"] for codec in ("fp16", "int4"))
    return fp16, int4


def _keys(cache: str | Path) -> list[str]:
    from ava.cache import list_cache

    return sorted(g["key"] for g in list_cache(cache))


class _Holder:
    """A child process holding group ``key``'s claim, from the moment it says so until :meth:`release`."""

    def __init__(self, cache: str | Path, key: str, tmp: Path) -> None:
        ready = tmp / f"held-{key}"
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLD, str(cache), key, str(ready)],
            stdin=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
        )
        deadline = time.monotonic() + 120
        while not ready.exists():  # the child's own signal that it holds the claim
            if self.proc.poll() is not None:
                raise AssertionError(f"the holder exited: {self.proc.stderr.read()}")  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "the holder never took the claim"
            time.sleep(0.02)

    def release(self) -> None:
        self.proc.stdin.close()  # type: ignore[union-attr]
        assert self.proc.wait(timeout=120) == 0


def test_rm_asks_then_removes_only_the_named_group(cache_data_6: Path, tmp_path: Path) -> None:
    cache = tmp_path / "c"
    fp16, int4 = _two_groups(cache_data_6, cache)
    no = runner.invoke(app, ["cache", "rm", str(cache), int4], input="n\n")
    assert no.exit_code == 1 and f"{int4} (pixels, " in no.output and "remove them?" in no.output
    assert "nothing removed" in no.output and _keys(cache) == sorted([fp16, int4])
    yes = runner.invoke(app, ["cache", "rm", str(cache), int4], input="y\n")
    assert yes.exit_code == 0, yes.output
    assert f"removed 1 group(s) from {cache}" in yes.output and int4 in yes.output
    assert not (cache / int4).exists() and _keys(cache) == [fp16]
    left = open_cache(cache, "pixels")
    assert verify_cache(cache)["ok"] and left.read(left.group.rows()).shape[0] == 6


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nope"], "no cache group 'nope'; groups: "),
        (["{fp16}", "nope"], "no cache group 'nope'"),  # one unknown key: none removed, the known one neither
        (["{fp16}", "{int4}", "also-not"], "no cache group 'also-not'"),
    ],
)
def test_rm_of_an_unknown_key_removes_nothing(
    cache_data_6: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    cache = tmp_path / "c"
    fp16, int4 = _two_groups(cache_data_6, cache)
    args = [a.format(fp16=fp16, int4=int4) for a in args]
    result = runner.invoke(app, ["cache", "rm", str(cache), *args, "--yes"])
    assert isinstance(result.exception, AvaError)  # the CLI's main prints it in one line and exits 2
    line = str(result.exception)
    assert message in line and "\n" not in line and "nothing removed" in line and fp16 in line
    assert _keys(cache) == sorted([fp16, int4])


def test_a_held_group_is_refused_by_rm_and_kept_by_gc(cache_data_6: Path, tmp_path: Path) -> None:
    """The claim taken here as an extraction takes it (a second ``flock`` on the lock file conflicts with it)."""
    from ava.cache.lease import claim_group

    cache = tmp_path / "c"
    fp16, int4 = _two_groups(cache_data_6, cache)
    with claim_group(cache / int4, "busy"):
        result = runner.invoke(app, ["cache", "rm", str(cache), int4, "--yes"])
        assert isinstance(result.exception, AvaError) and f"held by pid {os.getpid()}" in str(result.exception)
        gc = runner.invoke(app, ["cache", "gc", str(cache), "--runs", str(_runs(tmp_path, fp16)), "--yes"])
        assert gc.exit_code == 0, gc.output
        assert f"kept {int4}: cache group {int4} is held by another job" in gc.output
        assert "nothing to remove" in gc.output
    assert _keys(cache) == sorted([fp16, int4])


def _runs(tmp_path: Path, *keys: str) -> Path:
    """A folder of run directories, one per key, each with the run.json a head writes (``cache_key``)."""
    runs = tmp_path / "runs"
    for i, key in enumerate(keys):
        (runs / f"knn-{i}").mkdir(parents=True)
        (runs / f"knn-{i}" / "run.json").write_text(json.dumps({"head": "knn", "vfm": "pixels", "cache_key": key}))
    return runs


@pytest.mark.slow
def test_rm_and_gc_never_remove_a_group_another_process_holds(cache_data_6: Path, tmp_path: Path) -> None:
    cache = tmp_path / "c"
    fp16, int4 = _two_groups(cache_data_6, cache)
    holder = _Holder(cache, int4, tmp_path)
    try:
        with pytest.raises(
            AvaError,
            match=rf"cache group {int4} is held by another job .*held by pid "
            rf"{holder.proc.pid}\); nothing removed",
        ):
            remove_groups(cache, [fp16, int4])
        assert _keys(cache) == sorted([fp16, int4])  # all or none: fp16 is still there
        # neither group is referenced: fp16 goes, int4 is held
        result = collect_garbage(cache, [_runs(tmp_path, "someone-else")])
        assert result.removed == [fp16] and [r.key for r in result.held] == [int4]
        assert str(holder.proc.pid) in (result.held[0].held or "")
        assert _keys(cache) == [int4]
    finally:
        holder.release()
    assert remove_groups(cache, [int4]).removed == [int4] and _keys(cache) == []


def _cut_off(cache: Path | str, key: str) -> None:
    """A group as a killed ``create_group`` leaves it: the Zarr group made, its spec never written."""
    import zarr

    from ava.cache.location import zarr_store

    zarr.open_group(zarr_store(cache_path(cache) / key, read_only=False), mode="a")


def test_gc_removes_cut_off_and_lost_groups_and_with_runs_the_unreferenced(cache_data_6: Path, tmp_path: Path) -> None:
    from ava.cache.store import CacheGroup

    cache = tmp_path / "c"
    fp16, int4 = _two_groups(cache_data_6, cache)
    half = CacheGroup.open(cache, fp16, writable=True)
    half.done[0:4] = False  # a half-written group (a killed run's uncommitted shard): resumable, so kept
    _cut_off(cache, "cut")
    lost = cache / "lost"
    lost.mkdir()
    (lost / "rows.json").write_text("[]")  # a group's data whose zarr.json is gone
    runs = _runs(tmp_path, fp16)
    (runs / "sweep").mkdir()  # a folder of a sweep that is no run: ignored
    without = runner.invoke(app, ["cache", "gc", str(cache), "--yes"])
    assert without.exit_code == 0, without.output
    assert "cut (" in without.output and "cut off while being made" in without.output
    assert "lost (" in without.output and "lost its zarr.json" in without.output
    assert not (cache / "cut").exists() and not lost.exists() and _keys(cache) == sorted([fp16, int4])
    with_runs = runner.invoke(app, ["cache", "gc", str(cache), "--runs", str(runs), "--yes"])
    assert with_runs.exit_code == 0, with_runs.output
    assert f"{int4} (pixels, " in with_runs.output and f"no run under {runs} refers to it" in with_runs.output
    assert _keys(cache) == [fp16]
    again = runner.invoke(app, ["cache", "gc", str(cache), "--runs", str(runs), "--yes"])
    assert again.exit_code == 0 and "nothing to remove" in again.output
    resumed = extract_cache(cache_data_6, cache, "pixels", codec="fp16")["key"]
    assert resumed == fp16 and verify_cache(cache)["ok"]  # the half-written group resumed


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda tmp: tmp / "missing", "no such directory"),
        (lambda tmp: (tmp / "empty").mkdir() or tmp / "empty", "no run directory (run.json) under it"),
        (
            lambda tmp: (tmp / "bad").mkdir() or (tmp / "bad" / "run.json").write_text("[1, 2]") and tmp / "bad",
            "a JSON list, not a run.json; nothing removed",
        ),
        (
            lambda tmp: (
                (tmp / "torn").mkdir() or (tmp / "torn" / "run.json").write_text('{"cache_key": ') and tmp / "torn"
            ),
            "not a readable run.json",
        ),
    ],
)
def test_gc_refuses_runs_it_cannot_read_and_removes_nothing(
    cache_data_6: Path, tmp_path: Path, make, message: str
) -> None:
    cache = tmp_path / "c"
    keys = sorted(_two_groups(cache_data_6, cache))
    with pytest.raises(AvaError, match=message.replace("(", r"\(").replace(")", r"\)")):
        collect_garbage(cache, [make(tmp_path)])
    assert _keys(cache) == keys


@pytest.mark.slow
def test_rm_and_gc_in_object_storage(cache_data_6: Path, s3_url: str) -> None:
    from ava.cache.lease import claim_group

    fp16, int4 = _two_groups(cache_data_6, s3_url)
    _cut_off(s3_url, "cut")
    assert any(k.startswith(f"{int4}/") for k in objects(s3_url))
    with claim_group(cache_path(s3_url) / int4, "busy"):  # a live job's lease
        with pytest.raises(AvaError, match=f"cache group {int4} is held by another job .*lease .* held by pid"):
            remove_groups(s3_url, [int4])
        kept = collect_garbage(s3_url)
        assert kept.removed == ["cut"] and kept.held == []  # held groups are complete: gc without --runs keeps them
    result = runner.invoke(app, ["cache", "rm", s3_url, int4, "--yes"])
    assert result.exit_code == 0, result.output
    left = objects(s3_url)
    assert not any(k.startswith((f"{int4}/", "cut/")) for k in left)  # every object, the lease's included
    assert any(k.startswith(f"{fp16}/") for k in left) and _keys(s3_url) == [fp16]
    reader = open_cache(s3_url, "pixels")
    assert np.isfinite(reader.read(reader.group.rows())).all()
