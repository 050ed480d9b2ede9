"""The fixtures the tests share: datasets built once per session (tests only read them; a test that changes a
dataset copies it first, and each one's teardown checks that its files are as built), a real S3-compatible server,
and the command line run in this process. Plain helpers are in ``tests/helpers.py``."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import (
    ONE_PER_ANSWER_KIND,
    Cli,
    FakeCache,
    free_port,
    handmade,
    make_choice_data,
    make_dataset,
    make_pixel_suite,
    make_small_suite,
    run_cli,
    tree_digest,
    write_release,
)

# -- datasets built once per session ----------------------------------------------------------------------------


def _unchanged(root: Path) -> Iterator[Path]:
    """Yields ``root``; after the session, fails if a test changed a file under it (tests share it read-only)."""
    before = tree_digest(root)
    yield root
    assert tree_digest(root) == before, f"a test changed the shared dataset {root}: copy it before changing it"


@pytest.fixture(scope="session")
def cache_data(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """:func:`make_dataset` of 10 random images: ``color`` on all 10, ``counting`` on the first 5."""
    yield from _unchanged(make_dataset(tmp_path_factory.mktemp("cache-data") / "data", n_images=10))


@pytest.fixture(scope="session")
def cache_data_6(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """:func:`make_dataset` of 6 random images: ``color`` on all 6, ``counting`` on the first 3."""
    yield from _unchanged(make_dataset(tmp_path_factory.mktemp("cache-data-6") / "data", n_images=6))


@pytest.fixture(scope="session")
def small_suite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """:func:`make_small_suite`: the synthetic suite of SUITE_ABILITIES x 20 at 64 px."""
    yield from _unchanged(make_small_suite(tmp_path_factory.mktemp("suite") / "suite"))


@pytest.fixture(scope="session")
def pixel_suite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """(dataset, cache): the synthetic sets of PIXEL_ABILITIES (200 per ability, 224 px) extracted with `pixels`."""
    data, cache = make_pixel_suite(tmp_path_factory.mktemp("heads_synth"))
    before = tree_digest(data), tree_digest(cache)
    yield data, cache
    assert (tree_digest(data), tree_digest(cache)) == before, "a test changed the shared pixels suite or its cache"


@pytest.fixture(scope="session")
def handmade_data(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, FakeCache]]:
    """:func:`handmade` of one ability per answer kind, 50 samples each, and the FakeCache holding its features."""
    data, fake = handmade(tmp_path_factory.mktemp("hm") / "data", abilities=ONE_PER_ANSWER_KIND, n=50)
    for root in _unchanged(data):
        yield root, fake


@pytest.fixture(scope="session")
def choice_data(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """:func:`make_choice_data`: 8 colour classes, 5 per class (1 of 5 in test), every question listing all 8."""
    yield from _unchanged(make_choice_data(tmp_path_factory.mktemp("choice") / "d"))


@pytest.fixture(scope="session")
def release(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict]]:
    """(root, rows): the tiny fake release of :func:`write_release` and the rows written to it."""
    root = tmp_path_factory.mktemp("release")
    rows = write_release(root)
    for path in _unchanged(root):
        yield path, rows


# -- a real S3-compatible server ----------------------------------------------------------------------------------
# moto's server mode on loopback: its HTTP API, reached through s3fs and botocore exactly as a remote store would be
# (no client library is mocked). The endpoint and credentials reach every client the way they reach a user's: through
# AWS_ENDPOINT_URL and AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY in the environment (child processes inherit them).

BUCKET = "ava-test"
S3_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """The endpoint URL of a moto S3 server on 127.0.0.1 (started once per test session) with bucket ``ava-test``."""
    pytest.importorskip("s3fs", reason="object-storage tests need the s3 extra: pip install -e '.[s3]'")
    moto_server = pytest.importorskip("moto.server", reason="object-storage tests need moto[server] (the s3 extra)")
    import logging

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    saved = {k: os.environ.get(k) for k in (*S3_ENV, "AWS_ENDPOINT_URL")}
    os.environ.update({**S3_ENV, "AWS_ENDPOINT_URL": endpoint})
    import boto3

    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=BUCKET)
    try:
        yield endpoint
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        server.stop()


@pytest.fixture
def s3_url(s3_endpoint: str) -> str:
    """A fresh prefix in the test bucket: ``s3://ava-test/<random>``."""
    return f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}"


# -- the command line ---------------------------------------------------------------------------------------------


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Cli:
    """``cli(args, one_line=False)``: (exit code, stdout + stderr) of ``ava ARGS`` through the console entry point,
    one message per line (:func:`tests.helpers.run_cli` with this test's capsys and monkeypatch)."""
    return lambda args, one_line=False: run_cli(args, capsys, monkeypatch, one_line=one_line)
