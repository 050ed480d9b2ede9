"""An object store that goes away, sheds load or drops connections in the middle of a cache operation, each at a
known request (the fault proxy of ``benchmarks/fault_proxy.py`` between the client and a real moto S3 server, switched
when the n-th shard commit has been answered): one line that names the cache and the endpoint and says a rerun
resumes; nothing committed is lost, nothing good is taken for damage, and the rerun ends with the undisturbed digest.
Then :func:`ava.errors.store_outage` on the exceptions the client libraries raise.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from ava.cache import ExtractConfig, content_digest, extract, open_cache, verify_cache
from ava.cache.location import StoreUnreachableError, cache_path
from ava.errors import store_outage
from tests.helpers import make_dataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from fault_proxy import FaultProxy  # noqa: E402

PIXELS = "pixels"
SHARD = 2
N = 16  # images: eight shards, committed by writer threads in any order
COMMIT = r"^PUT .*/done/c/"  # a shard's commit marker written


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("faultdata") / "data", n_images=N)


@pytest.fixture
def proxy(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultProxy]:
    """The fault proxy in front of the S3 server, as the clients' endpoint; one client attempt per request (the
    outage is said at once, not after botocore's backoff)."""
    import s3fs

    p = FaultProxy(s3_endpoint).start()
    monkeypatch.setenv("AWS_ENDPOINT_URL", p.url)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    s3fs.S3FileSystem.clear_instance_cache()
    try:
        yield p
    finally:
        p.stop()
        s3fs.S3FileSystem.clear_instance_cache()


def _extract(data: Path, cache: str | Path) -> dict:
    cfg = ExtractConfig(
        vfm=PIXELS, data=str(data), cache=str(cache), batch_size=2, shard_size=SHARD, device="cpu", progress=False
    )
    return extract(cfg)


def _cli(argv: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str]:
    from ava.cli.main import main

    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main(argv)
    return int(e.value.code or 0), capsys.readouterr().err


def test_store_gone_after_two_shards_is_one_line_and_the_rerun_resumes(
    data: Path, tmp_path: Path, s3_url: str, proxy: FaultProxy, capsys: pytest.CaptureFixture
) -> None:
    local = _extract(data, tmp_path / "local")
    proxy.after(2, COMMIT, "refuse")  # the store goes away once two shards are committed
    argv = ["cache", "extract", "--vfm", PIXELS, "--data", str(data), "--cache", s3_url, "--shard-size", str(SHARD)]
    code, err = _cli([*argv, "--device", "cpu", "-q"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"error: {s3_url}: the object store at {proxy.url} cannot be reached"), err
    assert "run the command again once it answers and it resumes" in err and "internal error" not in err
    proxy.set("pass")
    again = _extract(data, s3_url)
    kept = again["already_done"]  # the shards committed before the store went away (two, or a third in flight)
    assert 2 * SHARD <= kept < N and again["extracted"] == N - kept
    assert content_digest(open_cache(s3_url, PIXELS).group) == content_digest(open_cache(local["cache"], PIXELS).group)
    assert verify_cache(s3_url)["ok"]


@pytest.mark.parametrize(
    "mode", ["error", pytest.param("drop", marks=pytest.mark.slow), pytest.param("refuse", marks=pytest.mark.slow)]
)
def test_verify_and_repair_during_an_outage_mark_nothing(data: Path, s3_url: str, proxy: FaultProxy, mode: str) -> None:
    _extract(data, s3_url)
    group = open_cache(s3_url, PIXELS).group
    done, digest = group.done_mask().copy(), content_digest(group)
    proxy.after(3, r"^GET ", mode)  # the store fails while verify reads the shards
    with pytest.raises(StoreUnreachableError, match=rf"^{s3_url}: the object store at {proxy.url} cannot be reached"):
        verify_cache(s3_url, repair=True)
    proxy.set("pass")
    group = open_cache(s3_url, PIXELS).group
    np.testing.assert_array_equal(group.done_mask(), done)  # no good row was taken for damage and repaired
    assert verify_cache(s3_url)["ok"] and content_digest(group) == digest


def test_push_cut_off_by_dropped_connections_resumes(
    data: Path, tmp_path: Path, s3_url: str, proxy: FaultProxy, capsys: pytest.CaptureFixture
) -> None:
    local = tmp_path / "local"
    _extract(data, local)
    proxy.after(3, r"^PUT ", "drop")  # every answer cut off after three objects were sent
    code, err = _cli(["cache", "push", str(local), s3_url], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "it resumes" in err, err
    proxy.set("pass")
    code, err = _cli(["cache", "push", str(local), s3_url], capsys)
    assert code == 0, err
    assert content_digest(open_cache(s3_url, PIXELS).group) == content_digest(open_cache(local, PIXELS).group)
    left = cache_path(s3_url).fs.find(s3_url.removeprefix("s3://"))  # hidden objects too
    assert not [n for n in left if ".extract.lease" in n or ".ava-probe" in n], left


@pytest.mark.parametrize("command", ["push", "extract"])
def test_a_lease_the_store_failed_to_delete_as_the_job_ended_is_deleted_once_it_answers(
    data: Path, tmp_path: Path, s3_url: str, proxy: FaultProxy, capsys: pytest.CaptureFixture, command: str
) -> None:
    """The store answers 500 to the very request that deletes the job's lease (the job itself is done), then answers
    again: the job succeeds and its lease is gone, not left to claim the group until it goes stale."""
    local = tmp_path / "local"
    _extract(data, local)
    lease = r" /[^?\s]*/\.extract\.lease HTTP"  # the lease object (not a listing)
    proxy.after(1, "^GET" + lease, "error", status=500)  # read back (still this job's) just before its deletion
    proxy.after(1, "^DELETE" + lease, "pass")  # its deletion answered 500, then the store is back
    if command == "push":
        argv = ["cache", "push", str(local), s3_url]
    else:
        argv = ["cache", "extract", "--vfm", PIXELS, "--data", str(data), "--cache", s3_url, "--device", "cpu", "-q"]
    code, err = _cli(argv, capsys)
    assert code == 0, err
    assert proxy.counts.errors == 1  # the fault landed on the deletion
    left = cache_path(s3_url).fs.find(s3_url.removeprefix("s3://"))
    assert not [n for n in left if ".extract.lease" in n], left
    assert content_digest(open_cache(s3_url, PIXELS).group) == content_digest(open_cache(local, PIXELS).group)


def test_a_store_that_resets_connections_mid_push_prints_one_line(
    data: Path,
    tmp_path: Path,
    s3_url: str,
    proxy: FaultProxy,
    capsys: pytest.CaptureFixture,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The client library's requests abandoned when the store reset their connections are reported by asyncio's
    logger when they are collected ("Task exception was never retrieved", a traceback each): none of that reaches
    the user, only the one line."""
    import gc

    local = tmp_path / "local"
    _extract(data, local)
    proxy.after(3, r"^PUT ", "refuse")
    code, err = _cli(["cache", "push", str(local), s3_url], capsys)
    gc.collect()  # the abandoned requests are reported as they are collected
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    reported = [r for r in caplog.records if r.name == "asyncio" and "never retrieved" in r.getMessage()]
    assert reported == []


def test_a_probe_object_a_killed_writer_left_goes_with_the_next_writer(s3_url: str) -> None:
    """A writer killed between putting and deleting its probe object leaves it; the next writer's probe on this host
    deletes it (its process is gone), not a live one's."""
    import os
    import socket
    import subprocess

    from ava.cache.location import PROBE, probe

    gone = subprocess.Popen(["true"])
    gone.wait()
    fs = cache_path(s3_url).fs
    root = s3_url.removeprefix("s3://")
    dead, live = (f"{root}/{PROBE}{socket.gethostname()}-{pid}-0a0b0c0d" for pid in (gone.pid, os.getpid()))
    for name in (dead, live):
        fs.pipe_file(name, b"")
    probe(cache_path(s3_url), write=True)
    left = [n.rsplit("/", 1)[-1] for n in fs.ls(root, detail=False, refresh=True)]
    assert left == [live.rsplit("/", 1)[-1]]


def test_asyncio_reports_of_an_outage_in_futures_and_callbacks_are_dropped(caplog: pytest.LogCaptureFixture) -> None:
    """Besides abandoned tasks, the client library leaves futures whose exception nobody reads and callbacks that
    raise when the store resets a connection; asyncio reports each with a traceback. Inside ``store_errors`` an
    outage's report is dropped, and a report of anything else (a bug) still reaches the log."""
    import asyncio
    import gc

    from ava.cache.location import store_errors

    def callback_raises(e: BaseException) -> None:
        raise e

    async def leave_reports() -> None:
        loop = asyncio.get_running_loop()
        for e in (ConnectionResetError(104, "Connection reset by peer"), ValueError("a bug")):
            loop.create_future().set_exception(e)  # never retrieved: reported when collected
            loop.call_soon(callback_raises, e)  # "Exception in callback"
        await asyncio.sleep(0)
        gc.collect()

    with store_errors(cache_path("s3://bucket/cache")):
        asyncio.run(leave_reports())
    gc.collect()
    reported = [r.exc_info[1] for r in caplog.records if r.name == "asyncio" and r.exc_info]
    assert [type(e).__name__ for e in reported] == ["ValueError", "ValueError"], reported


def test_store_outage_reads_the_client_libraries_exceptions() -> None:
    import aiohttp
    from botocore.exceptions import ClientError, ConnectionClosedError, EndpointConnectionError, ReadTimeoutError

    url = "http://store.example:9000/bucket/key"
    outages = [
        EndpointConnectionError(endpoint_url=url),
        ConnectionClosedError(endpoint_url=url),
        ReadTimeoutError(endpoint_url=url),
        ClientError({"Error": {"Code": "SlowDown"}, "ResponseMetadata": {"HTTPStatusCode": 503}}, "PutObject"),
        aiohttp.ServerDisconnectedError(),
        ConnectionRefusedError(111, "Connection refused"),
        TimeoutError(),
    ]
    for e in outages:
        assert store_outage(e) is e, e
    wrapped = OSError(16, "busy")
    wrapped.__cause__ = outages[3]  # s3fs turns a 503 into an OSError raised from botocore's error
    assert store_outage(wrapped) is outages[3]
    not_outages = [
        ValueError("checksum mismatch"),
        FileNotFoundError(2, "missing"),
        ClientError({"Error": {"Code": "AccessDenied"}, "ResponseMetadata": {"HTTPStatusCode": 403}}, "GetObject"),
    ]
    for e in not_outages:
        assert store_outage(e) is None, e
    from ava.errors import outage_line

    line = outage_line(outages[0], "s3://bucket/cache")
    assert line.startswith("s3://bucket/cache: the object store at http://store.example:9000 cannot be reached")
