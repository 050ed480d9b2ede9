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
from tests.helpers import Cli, corrupt_image, make_dataset

runner = CliRunner(env={"COLUMNS": "200"})
VFM = "tiny-siglip"


@pytest.fixture(scope="module")
def extracted(tmp_path_factory: pytest.TempPathFactory, cache_data_6: Path) -> tuple[Path, Path]:
    """(data, cache): the 6-image dataset extracted through the CLI."""
    root = tmp_path_factory.mktemp("cache-cli")
    data = cache_data_6
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


# -- a credential written into a cache URL: refused, never echoed ----------------------------------------------------
SECRET_URLS = [
    "s3://AKIAEXAMPLE:wJalr/XUtnFEMI+K7MDENG@bucket/features",
    "gs://AKIAEXAMPLE:wJalr@bucket/c",
    "s3://wJalrXUtnFEMIK7MDENGtoken@bucket/c",
]


def _commands(url: str, tmp: Path) -> list[list[str]]:
    local = str(tmp / "local")
    return [
        ["cache", "ls", url],
        ["cache", "info", url],
        ["cache", "verify", url],
        ["cache", "push", local, url],
        ["cache", "pull", url, local],
        ["cache", "extract", "--vfm", "pixels", "--data", str(tmp / "data"), "--cache", url],
        ["fingerprint", "--vfm", "pixels", "--data", str(tmp / "data"), "--cache", url, "--out", str(tmp / "r")],
    ]


@pytest.mark.parametrize("url", SECRET_URLS)
def test_a_credential_in_a_cache_url_is_refused_and_redacted_in_every_command(
    tmp_path: Path, url: str, cli: Cli
) -> None:
    make_dataset(tmp_path / "data", n_images=2)
    for args in _commands(url, tmp_path):
        code, output = cli(args)
        assert code == (1 if args[1] == "verify" else 2), (args, output)  # verify lists it as a problem
        assert "wJalr" not in output and "AKIAEXAMPLE" not in output, output
        assert "://***@bucket" in output and "a credential written into the URL is not read" in output, output
    assert not (tmp_path / "local").exists() and not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("s3://KEY:SECRET@bucket/c", "s3://***@bucket/c"),
        ("--cache s3://AKIA:wJal/rXU+t@b/c: refused", "--cache s3://***@b/c: refused"),  # a '/' in the secret
        ("s3://K:S/x@bucket/model@v1", "s3://***@bucket/model@v1"),
        ("https://token@host/x", "https://***@host/x"),
        (
            "https://h/x?X-Amz-Signature=abc&part=1&access_token=zz",
            "https://h/x?X-Amz-Signature=***&part=1&access_token=***",
        ),
        ("s3://bucket/model@v1", "s3://bucket/model@v1"),  # an '@' in a path is no credential
        ("clip@/path/to/dir and hf:org/model and a@b.com", "clip@/path/to/dir and hf:org/model and a@b.com"),
    ],
)
def test_redact(text: str, shown: str) -> None:
    from ava.errors import redact

    assert redact(text) == shown


# -- push / pull: only what differs is sent; another dataset's cache is not replaced without --force -----------------
def _pixels_cache(tmp: Path, name: str, seed: int) -> tuple[Path, Path]:
    data = make_dataset(tmp / f"data-{name}", n_images=6, seed=seed)
    out = runner.invoke(
        app,
        [
            "cache",
            "extract",
            "--vfm",
            "pixels",
            "--data",
            str(data),
            "--cache",
            str(tmp / name),
            "--shard-size",
            "4",
            "--batch-size",
            "2",
            "--device",
            "cpu",
            "-q",
        ],
    )
    assert out.exit_code == 0, out.output
    return data, tmp / name


def _files(root: Path) -> dict[str, bytes]:
    """Every file of a cache but its locks (hidden names), with its bytes."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.startswith(".")
    }


def test_a_copy_sends_only_what_differs_by_size_and_checksum(tmp_path: Path, cli: Cli) -> None:
    _, src = _pixels_cache(tmp_path, "a", seed=0)
    first = cli(["cache", "pull", f"file://{src}", str(tmp_path / "b"), "-q"])
    assert first[0] == 0, first[1]
    n = len([p for p in src.rglob("*") if p.is_file() and not p.name.startswith(".")])
    assert f"{n} object(s) copied" in first[1] and ", 0 already there" in first[1]
    again = cli(["cache", "pull", f"file://{src}", str(tmp_path / "b"), "-q"])
    assert f"0 object(s) copied (0 B), {n} already there and identical" in again[1], again[1]
    group = open_cache(tmp_path / "b", "pixels").group
    shard = group.path / "features" / str(group.layers[0]) / "c/1/0/0"
    body = bytearray(shard.read_bytes())
    body[len(body) // 2] ^= 0xFF  # same size, other bytes: only a checksum tells
    shard.write_bytes(bytes(body))
    fixed = cli(["cache", "pull", f"file://{src}", str(tmp_path / "b"), "-q"])
    assert "1 object(s) copied" in fixed[1] and f"{n - 1} already there" in fixed[1], fixed[1]
    assert _files(tmp_path / "b") == _files(src)  # byte for byte again


def test_another_datasets_cache_is_not_replaced_without_force(tmp_path: Path, cli: Cli) -> None:
    _, mine = _pixels_cache(tmp_path, "mine", seed=0)
    _, theirs = _pixels_cache(tmp_path, "theirs", seed=1)  # the same VFM spec (one key), other images
    before = _files(theirs)
    refused = cli(["cache", "pull", f"file://{mine}", str(theirs), "-q"])
    assert refused[0] == 2, refused[1]
    said = " ".join(refused[1].split())
    assert "holds features of other images" in said and "row 0 is image" in said and "give --force" in said
    assert _files(theirs) == before  # nothing written
    forced = cli(["cache", "pull", f"file://{mine}", str(theirs), "-q", "--force"])
    assert forced[0] == 0 and "(--force)" in forced[1], forced[1]
    assert content_digest(open_cache(theirs, "pixels").group) == content_digest(open_cache(mine, "pixels").group)
    # an earlier, shorter state of the same cache is no other dataset's: updated without --force
    partial = tmp_path / "partial"
    cli(["cache", "pull", f"file://{mine}", str(partial), "-q"])
    group = open_cache(partial, "pixels").group
    (group.path / "rows.json").write_text(json.dumps(group.rows()[:4]))
    assert cli(["cache", "pull", f"file://{mine}", str(partial), "-q"])[0] == 0
