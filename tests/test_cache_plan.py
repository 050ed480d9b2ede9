"""The size of an extraction before its first byte (ava.cache.plan): the estimate against what is written, the
refusal on a real small filesystem (a tmpfs mounted for the test), --force, --dry-run, and the docs' size table."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import torch

from ava.cache import content_digest, open_cache, verify_cache
from ava.cache.location import total_bytes
from ava.cache.plan import benchmark_sizes, group_bytes, size
from ava.errors import AvaError
from tests.helpers import PAGE, REPO, extract_cache, small_filesystem

torch.set_num_threads(1)


def _resize(where: Path, nbytes: int) -> None:
    subprocess.run(["mount", "-o", f"remount,size={-(-nbytes // PAGE) * PAGE}", str(where)], check=True)


def _plan(data: Path, tmp_path: Path, vfm: str = "random-vit", codec: str = "fp16") -> dict:
    """A dry run into an empty directory of ``tmp_path``'s filesystem: the plan of a new group (nothing written)."""
    out = extract_cache(data, tmp_path / "dry", vfm, codec=codec, dry_run=True)
    assert out["dry_run"] and out["extracted"] == 0 and not (tmp_path / "dry").exists()
    return out["plan"]


def _disk_usage(folder: Path) -> int:
    """Bytes the files under ``folder`` take on their filesystem (whole blocks), what the free space pays."""
    return sum(p.stat().st_blocks * 512 for p in folder.rglob("*") if p.is_file())


@pytest.mark.parametrize(
    ("vfm", "codec"),
    [
        ("pixels", "fp16"),
        ("pixels", "bf16"),
        ("pixels", "int8"),
        ("pixels", "int4"),
        ("random-vit", "fp16"),
        ("random-vit", "int4"),
    ],
)
def test_the_estimate_bounds_what_is_written_and_is_close_for_features_that_do_not_compress(
    cache_data: Path, tmp_path: Path, vfm: str, codec: str
) -> None:
    summary = extract_cache(cache_data, tmp_path / "c", vfm, codec=codec)
    plan = summary["plan"]
    assert plan["todo"] == 10 and not plan["exists"] and plan["codec"] == codec and plan["fits"]
    written, used = total_bytes(tmp_path / "c"), _disk_usage(tmp_path / "c")
    assert written <= used <= plan["bytes"]["total"], (written, used, plan["bytes"])
    if (vfm, codec) == ("random-vit", "fp16"):  # random ViT features hardly compress: the bound is tight
        assert plan["bytes"]["total"] <= 1.1 * used, (used, plan["bytes"])
    again = extract_cache(cache_data, tmp_path / "c", vfm, codec=codec)
    assert again["plan"]["exists"] and again["plan"]["todo"] == 0 and again["plan"]["bytes"]["total"] == 0


def test_smaller_codecs_plan_fewer_bytes(cache_data: Path, tmp_path: Path) -> None:
    by_codec = _plan(cache_data, tmp_path)["by_codec"]
    assert by_codec["int4"] < by_codec["int8"] < by_codec["fp16"] == by_codec["bf16"]


def test_a_cache_that_does_not_fit_is_refused_before_its_first_byte_naming_the_codecs_that_fit(
    cache_data: Path, tmp_path: Path
) -> None:
    plans = {c: _plan(cache_data, tmp_path, codec=c) for c in ("fp16", "int8", "int4")}
    need = {c: p["bytes"]["total"] for c, p in plans.items()}
    room = (need["int4"] + need["int8"]) // 2  # int4 fits, int8 and fp16 do not
    with small_filesystem(tmp_path / "small", room) as small:
        with pytest.raises(AvaError) as e:
            extract_cache(cache_data, small / "cache", "random-vit")
        line = str(e.value)
        assert "\n" not in line and f"writes up to {size(need['fp16'])}" in line
        assert re.search(rf"but {small} has [0-9.]+ kB free", line) and "codecs that would fit: int4" in line
        assert "int8" not in line.split("fit:")[1] and "--force" in line
        assert list(small.iterdir()) == []  # not a byte: no store, no group
        summary = extract_cache(cache_data, small / "cache", "random-vit", codec="int4")  # the codec it named fits
        assert summary["extracted"] == 10 and verify_cache(small / "cache")["ok"]


def test_force_writes_what_compresses_below_the_estimate(cache_data: Path, tmp_path: Path) -> None:
    """Pixel features compress: a cache refused by its raw size fits with --force, whole and sound."""
    need = _plan(cache_data, tmp_path, vfm="pixels")["bytes"]["total"]
    with small_filesystem(tmp_path / "small", int(0.85 * need)) as small:
        with pytest.raises(AvaError, match="--force writes anyway"):
            extract_cache(cache_data, small / "cache", "pixels")
        summary = extract_cache(cache_data, small / "cache", "pixels", force=True)
        assert summary["extracted"] == 10 and summary["plan"]["fits"] is False
        assert verify_cache(small / "cache")["ok"]


@pytest.mark.slow
def test_force_on_a_disk_that_fills_keeps_the_shards_written_and_resumes(cache_data: Path, tmp_path: Path) -> None:
    """--force where the features do not fit: the disk fills (ENOSPC from the kernel), the shards written before it
    stay done, and after the filesystem grows the run finishes with the bytes of a run that had room."""
    roomy = extract_cache(cache_data, tmp_path / "roomy", "random-vit")
    need = roomy["plan"]["bytes"]["total"]
    with small_filesystem(tmp_path / "small", need // 2) as small:
        with pytest.raises(OSError, match="No space left"):
            extract_cache(cache_data, small / "cache", "random-vit", force=True)
        _resize(small, 2 * need)
        again = extract_cache(cache_data, small / "cache", "random-vit")
        assert again["already_done"] + again["extracted"] == 10 and again["already_done"] > 0
        assert verify_cache(small / "cache")["ok"]
        assert content_digest(open_cache(small / "cache", "random-vit").group) == content_digest(
            open_cache(tmp_path / "roomy", "random-vit").group
        )


def test_dry_run_prints_the_plan_and_writes_nothing_in_an_existing_cache(cache_data: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from ava.cli.main import app

    extract_cache(cache_data, tmp_path / "c", "random-vit", ava=["counting"])  # 5 of the 10 images
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "c").rglob("*")}
    result = CliRunner().invoke(
        app,
        [
            "cache",
            "extract",
            "--vfm",
            "random-vit",
            "--data",
            str(cache_data),
            "--cache",
            str(tmp_path / "c"),
            "--codec",
            "fp16",
            "--device",
            "cpu",
            "--shard-size",
            "4",
            "--dry-run",
        ],
    )
    assert result.exit_code == 0, result.output
    out = result.output
    assert "existing group, 5 of 10 rows done" in out and "5 row(s) to write x 1 layer(s) x 196 tokens x 192 dim" in out
    assert "x 2 byte/value" in out and "free space at" in out and "dry run: nothing written" in out
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "c").rglob("*")} == before


def test_the_docs_table_is_the_estimators() -> None:
    """docs/cache-size.md's table equals :func:`benchmark_sizes` (regenerate it with its command when this fails)."""
    from ava.cache.plan import OFFICIAL_IMAGES, size_table

    text = (REPO / "docs" / "cache-size.md").read_text()
    assert size_table() in text
    siglip = next(r for r in benchmark_sizes() if r["vfm"] == "siglip2")
    assert siglip["fp16"]["tokens"] == OFFICIAL_IMAGES * 729 * 1152 * 2  # the issue's ~366 GB
    assert round(siglip["int4"]["tokens"] / (729 * 1152 * OFFICIAL_IMAGES), 4) == 0.5312
    assert group_bytes("int4", 1, 729, 1152)["tokens"] == 729 * 1152 // 2
