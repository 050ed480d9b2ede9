"""The feature cache in object storage, against a real S3-compatible server on loopback (moto in server mode):
the same key and digest as a local cache, reads, ls/info/verify through the CLI, push/pull, the lease that stands
for flock, and bad locations refused in one line before any work."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from ava.cache import content_digest, open_cache
from ava.cache.location import CacheLocationError, RemotePath, cache_path
from ava.cli.main import app
from ava.errors import AvaError
from tests.helpers import Cli, done_rows, extract_cache, objects

PIXELS = "pixels"


@pytest.mark.slow
def test_url_cache_has_the_local_key_digest_and_values(cache_data: Path, tmp_path: Path, s3_url: str) -> None:
    remote, local = extract_cache(cache_data, s3_url, PIXELS), extract_cache(cache_data, tmp_path / "local", PIXELS)
    assert remote["extracted"] == local["extracted"] == 10 and remote["key"] == local["key"]
    r, lo = open_cache(s3_url, PIXELS), open_cache(tmp_path / "local", PIXELS)
    assert isinstance(r.group.path, RemotePath) and str(r.group.path) == f"{s3_url}/{r.key}"
    assert content_digest(r.group) == content_digest(lo.group)
    shas = lo.group.rows()[2:9]
    np.testing.assert_array_equal(r.read(shas), lo.read(shas))
    np.testing.assert_array_equal(r.read_view(shas, None, "mean"), lo.read_view(shas, None, "mean"))
    # a shard is one object per array (3 shards of 4 rows), its done chunk is the shard's commit marker
    keys = objects(s3_url)
    layer = r.layers[0]
    assert sorted(k for k in keys if k.startswith(f"{r.key}/features/{layer}/c/")) == [
        f"{r.key}/features/{layer}/c/{s}/0/0" for s in range(3)
    ]
    assert sorted(k for k in keys if k.startswith(f"{r.key}/done/c/")) == [f"{r.key}/done/c/{s}" for s in range(3)]
    assert not any(".lease" in k for k in keys)  # the job's lease is gone once it ends


@pytest.mark.slow
def test_resume_redoes_only_uncommitted_shards(cache_data: Path, s3_url: str) -> None:
    extract_cache(cache_data, s3_url, PIXELS)
    group = open_cache(s3_url, PIXELS).group
    shard1 = group.path / "features" / str(group.layers[0]) / "c/1/0/0"
    marker = group.path / "done/c/1"
    assert isinstance(shard1, RemotePath) and shard1.is_file()
    marker.unlink()  # shard 1 never committed: its data object is not trusted
    before = content_digest(open_cache(s3_url, PIXELS).group)
    again = extract_cache(cache_data, s3_url, PIXELS)
    assert again["already_done"] == 6 and again["extracted"] == 4
    assert content_digest(open_cache(s3_url, PIXELS).group) != before  # the 4 rows are back in the digest


@pytest.mark.slow
def test_cli_ls_info_verify_on_a_url(cache_data: Path, s3_url: str) -> None:
    extract_cache(cache_data, s3_url, PIXELS)
    runner = CliRunner()
    info = runner.invoke(app, ["cache", "info", s3_url, "--json"])
    assert info.exit_code == 0, info.output
    got = json.loads(info.output)
    assert got["cache"] == s3_url and got["groups"][0]["rows_done"] == 10 and got["bytes"] > 0
    assert got["groups"][0]["digest"] == content_digest(open_cache(s3_url, PIXELS).group)
    ls = runner.invoke(app, ["cache", "ls", s3_url])
    assert ls.exit_code == 0 and "10/10" in ls.output, ls.output
    ok = runner.invoke(app, ["cache", "verify", s3_url, "--data", str(cache_data), "-q"])
    assert ok.exit_code == 0, ok.output
    group = open_cache(s3_url, PIXELS).group
    (group.path / "features" / str(group.layers[0]) / "c/2/0/0").unlink()  # a committed shard's data lost
    bad = runner.invoke(app, ["cache", "verify", s3_url, "-q"])
    assert bad.exit_code == 1 and "c/2/0/0 is missing" in bad.output, bad.output
    fixed = runner.invoke(app, ["cache", "verify", s3_url, "-q", "--repair"])
    assert "2 row(s) marked for re-extraction" in fixed.output, fixed.output
    assert extract_cache(cache_data, s3_url, PIXELS)["extracted"] == 2
    assert runner.invoke(app, ["cache", "verify", s3_url, "-q"]).exit_code == 0


def test_push_pull_round_trip_resumes_and_verifies(cache_data: Path, tmp_path: Path, s3_url: str) -> None:
    extract_cache(cache_data, tmp_path / "local", PIXELS)
    runner = CliRunner()
    pushed = runner.invoke(app, ["cache", "push", str(tmp_path / "local"), s3_url, "-q"])
    assert pushed.exit_code == 0, pushed.output
    digest = content_digest(open_cache(tmp_path / "local", PIXELS).group)
    assert f"digest {digest} (equal on both sides)" in pushed.output
    key = open_cache(s3_url, PIXELS).key
    shard = cache_path(s3_url) / key / f"features/{open_cache(s3_url, PIXELS).layers[0]}/c/1/0/0"
    shard.unlink()  # a push cut off: one data object missing
    again = runner.invoke(app, ["cache", "push", str(tmp_path / "local"), s3_url, "-q"])
    assert again.exit_code == 0 and "digest" in again.output, again.output
    assert shard.is_file()
    assert "1 object(s) copied" in again.output  # only the lost one was sent again
    assert f"{len(objects(s3_url)) - 1} already there and identical" in again.output
    unchanged = runner.invoke(app, ["cache", "push", str(tmp_path / "local"), s3_url, "-q"])
    assert f"0 object(s) copied (0 B), {len(objects(s3_url))} already there" in unchanged.output, unchanged.output
    pulled = runner.invoke(app, ["cache", "pull", s3_url, str(tmp_path / "back"), "-q"])
    assert pulled.exit_code == 0, pulled.output
    assert content_digest(open_cache(tmp_path / "back", PIXELS).group) == digest


@pytest.mark.slow
def test_copy_refuses_a_group_of_another_spec(cache_data: Path, tmp_path: Path, s3_url: str, cli: Cli) -> None:
    extract_cache(cache_data, tmp_path / "a", PIXELS, key="k")
    extract_cache(cache_data, s3_url, PIXELS, key="k", codec="int8")
    before = objects(s3_url)
    code, output = cli(["cache", "push", str(tmp_path / "a"), s3_url, "-q"])
    assert code == 2 and len(output.strip().splitlines()) == 1, output
    assert f"error: {s3_url}: cache group 'k' holds features of another spec" in output and "codec" in output
    assert objects(s3_url) == before  # nothing copied


def test_second_extractor_is_refused_while_the_lease_is_held(cache_data: Path, s3_url: str) -> None:
    from ava.cache.lease import Lease

    extract_cache(cache_data, s3_url, PIXELS)
    group = open_cache(s3_url, PIXELS).group
    busy = r"another `ava cache extract` is writing cache group .* held by pid"
    with Lease(group.path, "busy"), pytest.raises(AvaError, match=busy):  # held by a live process (this one)
        extract_cache(cache_data, s3_url, PIXELS)
    assert extract_cache(cache_data, s3_url, PIXELS)["already_done"] == 10  # released: the next one runs


@pytest.mark.slow
def test_a_dead_holders_lease_is_taken_over(cache_data: Path, s3_url: str) -> None:
    import socket

    extract_cache(cache_data, s3_url, PIXELS)
    group = open_cache(s3_url, PIXELS).group
    dead = {"host": socket.gethostname(), "pid": 2**22 + 17, "token": "x", "taken": 0, "renewed": 9e12}
    (group.path / ".extract.lease").write_text(json.dumps(dead))  # fresh, but its process does not run
    assert extract_cache(cache_data, s3_url, PIXELS)["already_done"] == 10


@pytest.mark.slow
def test_fingerprint_reads_a_url_cache(
    cache_data: Path, tmp_path: Path, s3_url: str, capfd: pytest.CaptureFixture
) -> None:
    extract_cache(cache_data, s3_url, PIXELS)
    result = CliRunner().invoke(
        app,
        [
            "fingerprint",
            "--vfm",
            PIXELS,
            "--data",
            str(cache_data),
            "--cache",
            s3_url,
            "--out",
            str(tmp_path / "runs"),
            "--head",
            "knn",
            "-q",
        ],
    )
    assert result.exit_code == 0, result.output
    run = json.loads((tmp_path / "runs" / "knn-pixels" / "config.json").read_text())
    assert run["cache"] == s3_url  # a URL is kept as given, not made a local path


# -- bad locations: one line, before any work -----------------------------------------------------------------------
def test_missing_protocol_package_is_named(tmp_path: Path) -> None:
    pytest.importorskip("fsspec")
    import importlib.util

    if importlib.util.find_spec("gcsfs") is not None:
        pytest.skip("gcsfs is installed")
    with pytest.raises(
        CacheLocationError,
        match=r"^--cache gs://b/p: the gs:// protocol needs the package gcsfs "
        r"\(pip install gcsfs\)$",
    ):
        cache_path("gs://b/p")
    with pytest.raises(CacheLocationError, match="unknown protocol 'nosuch'"):
        cache_path("nosuch://b/p")


def test_missing_bucket_and_unreachable_endpoint(
    cache_data: Path, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch, cli: Cli
) -> None:
    code, output = cli(
        ["cache", "extract", "--vfm", PIXELS, "--data", str(cache_data), "--cache", "s3://no-such-bucket/x", "-q"]
    )
    assert code == 2 and len(output.strip().splitlines()) == 1, output
    assert "error: --cache s3://no-such-bucket/x: bucket 'no-such-bucket' does not exist" in output, output
    from tests.helpers import free_port

    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()  # a new client reads the new endpoint
    try:
        with pytest.raises(
            CacheLocationError,
            match=r"^--cache s3://ava-test/y: the store cannot be reached \("
            r"EndpointConnectionError: .*check the endpoint",
        ):
            extract_cache(cache_data, "s3://ava-test/y", PIXELS)
    finally:
        s3fs.S3FileSystem.clear_instance_cache()


@pytest.mark.slow
def test_another_specs_key_is_refused_and_nothing_is_written(cache_data: Path, s3_url: str) -> None:
    extract_cache(cache_data, s3_url, PIXELS, key="k")
    before = objects(s3_url)
    with pytest.raises(AvaError, match=r"cache group 'k' holds features of another spec; differing fields: codec"):
        extract_cache(cache_data, s3_url, PIXELS, key="k", codec="int8")
    assert objects(s3_url) == before


# -- kill -9 mid-extraction into the object store, then resume -----------------------------------------------------
@pytest.mark.slow
def test_kill_9_mid_run_then_resume_gives_the_local_digest(cache_data: Path, tmp_path: Path, s3_url: str) -> None:
    import signal

    from tests.helpers import kill_when_held, start_extract

    hold = tmp_path / "held"  # batches of 2, shards of 4: killed in batch 3, once shard 0 is committed
    child = start_extract(cache_data, s3_url, PIXELS, hold_after=2, hold_file=hold)  # type: ignore[arg-type]
    kill_when_held(child, hold, lambda: done_rows(s3_url) >= 4)
    assert child.returncode == -signal.SIGKILL, child.stderr.read() if child.stderr else ""
    done = done_rows(s3_url)
    assert done == 4  # killed mid-run, after exactly one committed shard
    assert (open_cache(s3_url, PIXELS).group.path / ".extract.lease").is_file()  # the dead job's lease is left...
    resumed = extract_cache(cache_data, s3_url, PIXELS)  # ...and taken over: its holder no longer runs
    assert resumed["already_done"] == done and resumed["extracted"] == 10 - done
    extract_cache(cache_data, tmp_path / "ref", PIXELS)
    reference = content_digest(open_cache(tmp_path / "ref", PIXELS).group)
    assert content_digest(open_cache(s3_url, PIXELS).group) == reference


@pytest.mark.slow
def test_a_run_of_rows_is_read_in_few_range_requests(
    cache_data: Path, s3_url: str, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture
) -> None:
    """Zarr asks for each row's chunk by its own ranged GET; in object storage they are served from blocks."""
    import zarr.storage

    from ava.cache.reader import ResidentFeatures

    extract_cache(cache_data, s3_url, PIXELS, shard_size=8)
    cache = open_cache(s3_url, PIXELS)
    asked: list[str] = []
    real = zarr.storage.FsspecStore.get

    async def counted(self: object, key: str, prototype: object, byte_range: object = None) -> object:
        asked.append(f"{key} {type(byte_range).__name__}")
        return await real(self, key, prototype, byte_range)

    monkeypatch.setattr(zarr.storage.FsspecStore, "get", counted)
    shas = cache.group.rows()[1:8]  # 7 of shard 0's 8 rows (a whole shard is one GET in Zarr already)
    resident = ResidentFeatures(cache, shas, device="cpu").wait()
    ours = list(asked)  # (the reference read below is Zarr's own: how it asks depends on its version)
    np.testing.assert_array_equal(resident.float().numpy(), cache.read(shas))
    layer = cache.layers[0]
    ranged = [a for a in ours if a.endswith(" RangeByteRequest")]  # keys relative to the array
    assert ranged == ["c/0/0/0 RangeByteRequest"], ours  # one block for the 7 chunks (Zarr alone: 7, one per row)
    assert f"read 7 rows of features/{layer} from {s3_url}/" in capfd.readouterr().err  # the throughput line


@pytest.mark.slow
def test_two_torchrun_ranks_split_the_shards_of_a_url_cache(cache_data: Path, tmp_path: Path, s3_url: str) -> None:
    """Rank 0 holds the lease and indexes the images; each rank writes and commits only its own shards."""
    from tests.helpers import free_port, start_extract

    env = {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "GLOO_SOCKET_IFNAME": "lo"}
    ranks = [start_extract(cache_data, s3_url, PIXELS, RANK=str(r), LOCAL_RANK=str(r), **env) for r in (0, 1)]  # type: ignore[arg-type]
    summaries = []
    for child in ranks:
        out, err = child.communicate(timeout=180)
        assert child.returncode == 0, err
        summaries.append(json.loads(out.split("SUMMARY ", 1)[1]))
    assert [s["extracted"] for s in summaries] == [6, 4]  # shards 0, 2 (4 + 2 rows) and shard 1 (4 rows)
    extract_cache(cache_data, tmp_path / "ref", PIXELS)
    reference = content_digest(open_cache(tmp_path / "ref", PIXELS).group)
    assert content_digest(open_cache(s3_url, PIXELS).group) == reference


@pytest.mark.slow
def test_refused_credentials_are_said_before_any_work(
    cache_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch, cli: Cli
) -> None:
    """A second moto server that checks credentials (``INITIAL_NO_AUTH_ACTION_COUNT=0``): unknown keys get a 403."""
    import os
    import subprocess
    import sys
    import time
    import urllib.request

    import s3fs

    from tests.helpers import free_port

    port = free_port()
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "0"}
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(150):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/moto-api/", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "not-a-key")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-a-secret")
        s3fs.S3FileSystem.clear_instance_cache()
        import gc

        gc.collect()  # earlier tests' dropped clients say "Unclosed client session" as they go: not this test's output
        capsys.readouterr()
        for args in (
            ["cache", "extract", "--vfm", PIXELS, "--data", str(cache_data), "--cache", "s3://private/f", "-q"],
            ["cache", "ls", "s3://private/f"],
            ["cache", "pull", "s3://private/f", str(tmp_path / "local")],
        ):
            code, output = cli(args)
            assert code == 2 and len(output.strip().splitlines()) == 1, output
            assert output.startswith("error: --cache s3://private/f: access denied (PermissionError: "), output
        assert not (tmp_path / "local").exists()
    finally:
        server.terminate()
        server.wait()
        s3fs.S3FileSystem.clear_instance_cache()


def test_a_file_url_is_the_local_directory(cache_data: Path, tmp_path: Path) -> None:
    """``file://DIR`` names the directory itself (flock, rename), not a second store beside it."""
    first = extract_cache(cache_data, f"file://{tmp_path / 'c'}", PIXELS)
    assert isinstance(cache_path(f"file://{tmp_path / 'c'}"), Path)
    again = extract_cache(cache_data, tmp_path / "c", PIXELS)
    assert again["key"] == first["key"] and again["already_done"] == 10 and again["extracted"] == 0
