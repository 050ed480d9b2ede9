"""What the soak found left behind, as tests at a known point: a pull into a disk that fills leaves no temporary
file; the temporaries a writer killed mid-write left in a group (``.NAME.<id>.partial``, ``.NAME.<pid>.tmp``) are
removed by the next job that takes the group (an extraction's resume, a copy into it), which then has the digest of
an undisturbed cache; and those a training killed mid-write left in its run directory go with the next training
there, while a live writer's stay."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ava.cache import ExtractConfig, content_digest, extract, open_cache
from ava.cache.transfer import copy_cache
from ava.errors import AvaError
from tests.helpers import make_dataset, small_filesystem


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(data, its pixels cache)."""
    root = tmp_path_factory.mktemp("leftovers")
    data = make_dataset(root / "data", n_images=8)
    extract(ExtractConfig(vfm="pixels", data=str(data), cache=str(root / "cache"), shard_size=4, progress=False))
    return data, root / "cache"


def _temporaries(root: Path) -> list[Path]:
    return [p for p in root.rglob(".*") if p.name.endswith((".partial", ".tmp"))]


def _plant(group: Path) -> list[Path]:
    """The files a writer killed mid-write leaves: a shard's and a text file's temporaries."""
    planted = [group / "features" / "-1" / "c" / ".0.3f2a.partial", group / ".rows.json.999999.tmp"]
    for p in planted:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"half")
    return planted


def test_a_pull_into_a_full_disk_leaves_no_temporary(made: tuple[Path, Path], tmp_path: Path) -> None:
    _, cache = made
    size = sum(p.stat().st_size for p in cache.rglob("*") if p.is_file())
    with small_filesystem(tmp_path / "small", size // 2) as small:
        with pytest.raises((AvaError, OSError)):
            copy_cache(cache, small / "pulled", verify=False)
        assert _temporaries(small) == []
    shutil.rmtree(tmp_path / "small", ignore_errors=True)


def test_a_killed_writers_temporaries_go_with_the_next_job(made: tuple[Path, Path], tmp_path: Path) -> None:
    data, cache = made
    want = content_digest(open_cache(cache, "pixels").group)
    resumed = tmp_path / "resumed"
    shutil.copytree(cache, resumed)
    group = open_cache(resumed, "pixels").group.path
    _plant(group)
    extract(ExtractConfig(vfm="pixels", data=str(data), cache=str(resumed), shard_size=4, progress=False))
    assert _temporaries(resumed) == [] and content_digest(open_cache(resumed, "pixels").group) == want
    copied = tmp_path / "copied"
    copy_cache(cache, copied)
    _plant(copied / group.name)
    copy_cache(cache, copied)  # a copy resumed into the same place
    assert _temporaries(copied) == [] and content_digest(open_cache(copied, "pixels").group) == want


def test_a_killed_trainings_temporaries_go_with_the_next_training(made: tuple[Path, Path], tmp_path: Path) -> None:
    from ava.api import train_head

    data, cache = made
    run = tmp_path / "run"
    options = {"vfm": "pixels", "data": str(data), "cache": str(cache), "out": str(run), "progress": False}
    first = train_head("probe-linear", **options).results
    ended = subprocess.Popen(["true"])
    ended.wait()  # a writer that is gone, as a killed one is
    dead = [run / f".run.json.{ended.pid}.tmp", run / "abilities" / f".color.safetensors.{ended.pid}.tmp"]
    live = run / "abilities" / f".counting.safetensors.{os.getpid()}.tmp"  # a writer still running: left alone
    for p in [*dead, live]:
        p.write_bytes(b"half")
    again = train_head("probe-linear", **options).results
    assert _temporaries(run) == [live]
    assert again is not None and first is not None and again["abilities"] == first["abilities"]


@pytest.mark.parametrize(
    ("name", "pid"),
    [
        (".run.json.4242.tmp", 4242),
        (".out.synth-77.tmp", 77),
        (".data.options-9.tmp", 9),
        (".0.3f2a.partial", None),  # a shard's temporary: its group's job removes it
        (".step-00000010.3f2a9c1e.tmp", None),  # no pid in it
        ("run.json.4242.tmp", None),  # not hidden: not one of ava's temporaries
        (".x.0.tmp", None),
    ],
)
def test_the_writer_of_a_temporary_is_read_from_its_name(name: str, pid: int | None) -> None:
    from ava.errors import writer_pid

    assert writer_pid(name) == pid


def test_only_dead_writers_temporaries_are_removed(tmp_path: Path) -> None:
    from ava.errors import remove_dead_temp_files

    ended = subprocess.Popen(["true"])
    ended.wait()
    dead = [tmp_path / f".a.json.{ended.pid}.tmp", tmp_path / "x" / f".b.synth-{ended.pid}.tmp"]
    kept = [
        tmp_path / f".c.json.{os.getpid()}.tmp",
        tmp_path / "c.json",
        tmp_path / "x" / "y" / "z" / "w" / dead[0].name,
    ]
    for p in [*dead, *kept]:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"")
    assert sorted(remove_dead_temp_files([tmp_path], max_depth=3)) == sorted(dead)
    assert all(p.exists() for p in kept)  # a live writer's, a file of the run, one deeper than asked
