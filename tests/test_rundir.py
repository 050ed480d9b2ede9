"""Run directories belong to one run (ava.heads.rundir): refusal, lock, --force swap, and a kill mid-swap-run."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ava.heads.rundir import RunDirError, claim_run, differing_fields
from ava.locking import JobLock, LockBusyError

REPO = Path(__file__).resolve().parents[1]


def tree_digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


@pytest.fixture(scope="module")
def pixels_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(data, cache, a finished kNN run) on a tiny synthetic colour set through the real `pixels` cache."""
    from ava.cache import ExtractConfig, extract
    from ava.heads.knn import KNNConfig
    from ava.heads.knn.train import train
    from ava.synth import SynthConfig, generate

    root = tmp_path_factory.mktemp("rundir")
    data, cache = root / "data", root / "cache"
    generate(SynthConfig(out=str(data), per_ava=10, ava=["color"], size=64, workers=1), progress=False)
    extract(ExtractConfig(vfm="pixels", data=str(data), cache=str(cache), device="cpu", progress=False))
    run = root / "run"
    train(KNNConfig(vfm="pixels", data=str(data), cache=str(cache), out=str(run), progress=False, k=[1]))
    return data, cache, run


def test_claim_refuses_other_runs_and_names_the_field(tmp_path: Path) -> None:
    from ava.heads.knn import KNNConfig

    out = tmp_path / "r"
    cfg = KNNConfig(vfm="a", data="d", cache="c", out=str(out))
    with claim_run(out, "knn", cfg) as where:
        assert where == out
        out.mkdir(exist_ok=True)
        (out / "config.json").write_text(json.dumps({**cfg.__dict__}))
        (out / "run.json").write_text(json.dumps({"head": "knn"}))
    assert differing_fields(out, "knn", cfg) == []
    assert differing_fields(out, "knn", KNNConfig(vfm="a", data="d", cache="c", out=str(out), device="cuda")) == []
    other = KNNConfig(vfm="b", data="d", cache="c", out=str(out))
    with pytest.raises(RunDirError, match=r"vfm \('a' -> 'b'\).*--force"), claim_run(out, "knn", other):
        pass
    with pytest.raises(RunDirError, match=r"head \('knn' -> 'probe-linear'\)"), claim_run(out, "probe-linear", cfg):
        pass
    with JobLock(out / ".lock", "busy"), pytest.raises(LockBusyError, match="another training"):  # noqa: SIM117
        with claim_run(out, "knn", cfg):
            pass
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(RunDirError, match="holds no ava run"), claim_run(tmp_path / "mine", "knn", cfg, force=True):
        pass
    assert [p.name for p in (tmp_path / "mine").iterdir()] == ["notes.txt"]  # nothing deleted, nothing written


def test_force_swaps_whole_and_an_error_keeps_the_old(tmp_path: Path) -> None:
    from ava.heads.knn import KNNConfig

    out = tmp_path / "r"
    out.mkdir()
    (out / "config.json").write_text(json.dumps({"vfm": "a"}))
    (out / "old-weights").write_text("old")
    cfg = KNNConfig(vfm="b", out=str(out), force=True)
    with pytest.raises(ValueError), claim_run(out, "knn", cfg, force=True) as where:
        (where / "half").write_text("new")
        raise ValueError("killed")
    assert sorted(p.name for p in out.iterdir()) == [".lock", "config.json", "old-weights"]
    with claim_run(out, "knn", cfg, force=True) as where:
        assert where != out and not (where / "half").exists()  # the leftover staging dir was cleared
        (where / "config.json").write_text(json.dumps({"vfm": "b", "out": str(where)}))
    assert json.loads((out / "config.json").read_text()) == {"vfm": "b", "out": str(out)}
    assert not (out / "old-weights").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["r"]


def test_a_training_that_fails_before_writing_leaves_no_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ava head train` on a dataset that is not there: the error names it, and --out is not left holding only its
    lock (the README's next command, `ava report runs/*`, then failed on that directory). A directory that was there
    before, or that the failed run wrote into, is kept."""
    from ava.cli.main import main

    out = tmp_path / "runs" / "knn-x"
    args = [
        "head",
        "train",
        "--head",
        "knn",
        "--vfm",
        "pixels",
        "--data",
        str(tmp_path / "nodata"),
        "--cache",
        str(tmp_path / "cache"),
        "--out",
        str(out),
    ]
    with pytest.raises(SystemExit) as exit_:
        main(args)
    assert exit_.value.code == 2 and "dataset.json is missing" in capsys.readouterr().err
    assert not out.exists() and (tmp_path / "runs").is_dir()
    out.mkdir()  # made by the user: kept (empty, without the failed run's lock)
    with pytest.raises(SystemExit):
        main(args)
    assert out.is_dir() and list(out.iterdir()) == []
    from ava.heads.knn import KNNConfig

    fresh = tmp_path / "fresh"
    with pytest.raises(ValueError), claim_run(fresh, "knn", KNNConfig(out=str(fresh))):
        (fresh / "config.json").write_text("{}")  # a run begun: resumable, kept
        raise ValueError("killed")
    assert sorted(p.name for p in fresh.iterdir()) == [".lock", "config.json"]


def test_a_lock_removed_by_its_holder_is_taken_where_the_file_is_now(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job that opened the lock file just before its holder removed it (JobLock.remove) locks the file at the path
    now, not the removed one, which a third job would not see: one holder at a time."""
    import fcntl

    path = tmp_path / "r" / ".lock"
    holder = JobLock(path, "busy")
    real, calls = fcntl.flock, []

    def flock(handle, op):  # noqa: ANN001, ANN202 - the holder removes the file between this job's open and flock
        calls.append(op)
        if len(calls) == 1:
            holder.remove()
        return real(handle, op)

    monkeypatch.setattr(fcntl, "flock", flock)
    second = JobLock(path, "busy")
    monkeypatch.setattr(fcntl, "flock", real)
    assert len(calls) == 2 and path.exists()  # it took the file made anew
    with pytest.raises(LockBusyError, match="busy"):
        JobLock(path, "busy")  # a third job: busy, not a second holder
    second.close()
    JobLock(path, "busy").close()


def test_forked_child_does_not_keep_the_lock(tmp_path: Path) -> None:
    """A worker forked while the lock is held (a DataLoader worker, say) and orphaned does not hold it."""
    lock = JobLock(tmp_path / ".x.lock", "busy")
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child outlives the parent's lock
        os.write(ready_w, b"1")  # the at-fork handlers have run by now
        time.sleep(30)
        os._exit(0)
    try:
        assert os.read(ready_r, 1) == b"1"
        lock.close()
        JobLock(tmp_path / ".x.lock", "busy").close()  # free at once, though the child still runs
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


# A child running `ava ARGS...` that, on its first ability's fit, writes the file argv[1] and waits to be killed.
HOLD_AT_FIT = """
import sys, threading
from pathlib import Path
from ava.heads import ability_runs
READY = Path(sys.argv[1])
def hold(self, *a, **k):
    READY.write_text("fitting")
    threading.Event().wait()
ability_runs.AbilityRun.fit = hold
from ava.cli.main import main
sys.argv = ["ava", *sys.argv[2:]]
main()
"""


@pytest.mark.slow
def test_kill_during_forced_retrain_leaves_the_old_run(pixels_run: tuple[Path, Path, Path]) -> None:
    """SIGKILL a `--force` re-train of another head while it writes: --out is still the old run, byte for byte,
    and the next training clears the leftover and swaps the new run in whole."""
    data, cache, run = pixels_run
    before = tree_digest(run)
    stage = run.with_name(f".{run.name}.new")
    args = [
        "head",
        "train",
        "--head",
        "probe-linear",
        "--vfm",
        "pixels",
        "--data",
        str(data),
        "--cache",
        str(cache),
        "--out",
        str(run),
        "--device",
        "cpu",
        "--force",
    ]
    ready = run.with_name("child-is-training")
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    # the child stops at a known point: its first ability's fit, with the new run staged beside the old one
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD_AT_FIT, str(ready), *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    while not ready.exists() and proc.poll() is None:
        time.sleep(0.005)
    killed_mid_run = proc.poll() is None
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert killed_mid_run, proc.stderr.read().decode() if proc.stderr else ""
    assert (stage / "config.json").exists()  # it was writing the new run
    assert tree_digest(run) == before  # the old kNN run, untouched
    from ava.heads.probe import ProbeConfig
    from ava.heads.probe.train import train

    cfg = ProbeConfig(vfm="pixels", data=str(data), cache=str(cache), out=str(run), device="cpu", progress=False)
    with pytest.raises(RunDirError, match=r"head \('knn' -> 'probe-linear'\)"):
        train(cfg)
    assert tree_digest(run) == before
    train(dataclasses.replace(cfg, force=True))
    assert json.loads((run / "run.json").read_text())["head"] == "probe-linear"
    assert json.loads((run / "config.json").read_text())["out"] == str(run)
    assert not (run / "knn.json").exists() and not stage.exists()
