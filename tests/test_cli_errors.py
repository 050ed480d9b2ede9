"""One line, no traceback: OSErrors, bad UTF-8, corrupt JSON / safetensors / cache metadata through `ava`'s main."""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path

import pytest

from ava.cli.main import main
from ava.errors import describe, remove_own_temp_files


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exc:
        main(args)
    err = capsys.readouterr().err
    return int(exc.value.code or 0), " ".join(err.split())


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.startswith("ava ")


def test_file_where_directory_expected(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, err = _run(["data", "synth", "--out", str(blocker / "ds"), "--per-ava", "2", "--ava", "color"], capsys)
    assert code == 2  # synth names the file above --out before it writes anything
    assert f"{blocker} is a file, not a directory" in err
    assert "Traceback" not in err
    assert not list(tmp_path.glob(".*.tmp"))
    from ava.errors import describe  # the OS's own ENOTDIR, where a command does not check first

    with pytest.raises(NotADirectoryError) as caught:
        (blocker / "ds").mkdir(parents=True)
    line = describe(caught.value)
    assert str(blocker) in line and "a file is where a directory is expected" in line


@pytest.mark.parametrize(
    ("content", "fragment"),
    [(b"\xff{", "not valid utf-8"), (b'{"head": ', "not valid JSON")],
)
def test_corrupt_run_json(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, fragment: str) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_bytes(content)
    code, err = _run(["head", "eval", "--run", str(run)], capsys)
    assert code != 0
    assert str(run / "run.json") in err and fragment in err
    assert "Traceback" not in err


def test_corrupt_cache_metadata(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "zarr.json").write_text('{"zarr_format": 3, "node_')
    code, err = _run(["cache", "ls", str(cache)], capsys)
    assert code != 0
    assert str(cache / "zarr.json") in err and "not valid JSON" in err


def test_truncated_safetensors_named(tmp_path: Path) -> None:
    import torch
    from safetensors.torch import load_file, save_file

    path = tmp_path / "w.safetensors"
    save_file({"w": torch.zeros(64)}, str(path))
    path.write_bytes(path.read_bytes()[:20])
    with pytest.raises(Exception) as exc:
        load_file(str(path))
    message = describe(exc.value)
    assert message is not None and str(path) in message and "safetensors" in message


def test_disk_full_leaves_no_temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ava.data.format import atomic_write_bytes

    real_fdopen = os.fdopen

    def full(fd: int, mode: str = "r") -> object:  # the temporary file fills the disk after one byte
        with real_fdopen(fd, mode) as f:
            f.write(b"{")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fdopen", full)
    with pytest.raises(OSError) as exc:
        atomic_write_bytes(tmp_path / "out.json", b"{}" * 10)
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []
    message = describe(exc.value)
    assert message is not None and "disk full" in message and "out.json" in message


def test_read_only_destination_message() -> None:
    e = OSError(errno.EROFS, os.strerror(errno.EROFS), "/mnt/ro/x")
    assert describe(e) == "/mnt/ro/x: read-only file system"


def test_own_temporaries_removed_others_kept(tmp_path: Path) -> None:
    mine = tmp_path / "a" / f".x.json.{os.getpid()}.tmp"
    other = tmp_path / "a" / ".x.json.1.tmp"
    mine.parent.mkdir()
    mine.write_text("1")
    other.write_text("2")
    assert remove_own_temp_files([tmp_path]) == [mine]
    assert not mine.exists() and other.exists()


def test_debug_shows_the_traceback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_bytes(b"\xff")
    monkeypatch.setenv("AVA_DEBUG", "1")
    with pytest.raises(UnicodeDecodeError):
        main(["head", "eval", "--run", str(run)])


def test_bug_gets_one_line_too(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import ava.cli.vfm as vfm_cli

    def broken(*_: object, **__: object) -> None:
        raise KeyError("boom")

    monkeypatch.setattr("ava.vfm.list_vfms", broken)
    assert vfm_cli  # the command imports list_vfms at call time
    code, err = _run(["vfm", "list"], capsys)
    assert code == 1 and "internal error: KeyError" in err and "AVA_DEBUG=1" in err


def test_python_dash_m_ava_is_the_cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """``python -m ava`` runs the same main as the ``ava`` script (in this process: ``runpy`` as ``-m`` does)."""
    import runpy

    monkeypatch.setattr(sys, "argv", ["ava", "--version"])
    with pytest.raises(SystemExit) as exc:
        runpy.run_module("ava", run_name="__main__")
    assert exc.value.code in (0, None)
    from ava import __version__

    assert __version__ in capsys.readouterr().out
