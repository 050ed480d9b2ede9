"""`ava cache extract|ls|info|verify` through typer's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from ava.cache import content_digest, open_cache
from ava.cache.store import CacheGroup
from ava.cli.main import app
from tests._cache_fixtures import corrupt_image, make_dataset

runner = CliRunner(env={"COLUMNS": "200"})
VFM = "tiny-siglip"


@pytest.fixture(scope="module")
def extracted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("cache-cli")
    data = make_dataset(root / "data", n_images=6)
    args = [
        "cache",
        "extract",
        "--vfm",
        VFM,
        "--data",
        str(data),
        "--cache",
        str(root / "c"),
        "--layers",
        "-2,-1",
        "--batch-size",
        "2",
        "--shard-size",
        "4",
        "--device",
        "cpu",
        "--quiet",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "6 extracted" in result.output
    return data, root / "c"


def test_ls_and_info(extracted: tuple[Path, Path]) -> None:
    data, cache = extracted
    result = runner.invoke(app, ["cache", "ls", str(cache)])
    assert result.exit_code == 0 and VFM in result.output and "6/6" in result.output
    result = runner.invoke(app, ["cache", "info", str(cache), "--json"])
    assert result.exit_code == 0, result.output
    info = json.loads(result.output)
    (group,) = info["groups"]
    assert group["vfm"] == VFM and group["rows_done"] == 6 and group["layers"] == [-2, -1]
    assert group["codec"] == "fp16" and group["bytes"] > 0 and group["ratio_to_fp16"] > 0
    assert group["digest"] == content_digest(open_cache(cache, VFM).group)
    assert group["spec"]["identity"]["model_class"] == "SiglipVisionModel"


def test_verify_passes_then_fails_on_a_missing_row(extracted: tuple[Path, Path], tmp_path: Path) -> None:
    import shutil

    data, cache = extracted
    result = runner.invoke(app, ["cache", "verify", str(cache), "--data", str(data), "-q"])
    assert result.exit_code == 0, result.output
    copy = tmp_path / "c"
    shutil.copytree(cache, copy)
    group = CacheGroup.open(copy, open_cache(copy, VFM).key, writable=True)
    done = group.done_mask()
    done[1] = False
    group.done[: len(done)] = done
    result = runner.invoke(app, ["cache", "verify", str(copy), "--data", str(data), "-q"])
    assert result.exit_code == 1 and "not done" in result.output


def test_verify_finds_nan_and_images_missing_from_the_data(extracted: tuple[Path, Path], tmp_path: Path) -> None:
    import shutil

    data, cache = extracted
    copy = tmp_path / "c"
    shutil.copytree(cache, copy)
    group = CacheGroup.open(copy, open_cache(copy, VFM).key, writable=True)
    block = group.features(-1)[0:4]
    block[2, 0, 0] = np.nan
    group.features(-1)[0:4] = block
    bigger = make_dataset(tmp_path / "data", n_images=7, seed=1)  # other images
    result = runner.invoke(app, ["cache", "verify", str(copy), "--data", str(bigger), "-q"])
    out = " ".join(result.output.split())  # undo rich's line wrapping
    assert result.exit_code == 1
    assert "row 2" in out and "layer -1 has NaN/inf" in out and "7 image(s)" in out and "counting/n0" in out


def test_extract_exits_1_naming_a_corrupt_image(tmp_path: Path) -> None:
    data = make_dataset(tmp_path / "data", n_images=3)
    corrupt_image(data, "c1")
    args = [
        "cache",
        "extract",
        "--vfm",
        "pixels",
        "--data",
        str(data),
        "--cache",
        str(tmp_path / "c"),
        "--quiet",
        "--device",
        "cpu",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 1 and "color/c1" in result.output and "2 extracted" in result.output


def test_bad_options_are_user_errors(tmp_path: Path) -> None:
    from ava.errors import AvaError

    data = make_dataset(tmp_path / "data", n_images=2)
    base = ["cache", "extract", "--vfm", "pixels", "--data", str(data), "--cache", str(tmp_path / "c"), "-q"]
    for extra, match in [
        (["--codec", "int3"], "int4"),  # unknown; the message lists the codecs
        (["--split", "val"], "train"),
        (["--layers", "x"], "-2"),
        (["--dtype", "fp8"], "bf16"),
    ]:
        result = runner.invoke(app, base + extra)
        assert isinstance(result.exception, AvaError) and match in str(result.exception), extra
    result = runner.invoke(app, ["cache", "ls", str(tmp_path / "nothing")])
    assert isinstance(result.exception, AvaError) and "ava cache extract" in str(result.exception)
