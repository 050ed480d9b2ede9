"""What the soak found left behind, as tests at a known point: a pull into a disk that fills leaves no temporary
file, and the temporaries a writer killed mid-write left in a group (``.NAME.<id>.partial``, ``.NAME.<pid>.tmp``) are
removed by the next job that takes the group (an extraction's resume, a copy into it), which then has the digest of
an undisturbed cache."""

from __future__ import annotations

import shutil
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
