"""A real S3-compatible server on loopback for the object-storage tests: moto's server mode (its HTTP API, reached
through s3fs and botocore exactly as a remote store would be; no client library is mocked).

The endpoint and credentials reach every client the way they reach a user's: through ``AWS_ENDPOINT_URL`` and
``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY`` in the environment (child processes inherit them)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from tests._cache_fixtures import free_port

BUCKET = "ava-test"
ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


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
    saved = {k: os.environ.get(k) for k in (*ENV, "AWS_ENDPOINT_URL")}
    os.environ.update({**ENV, "AWS_ENDPOINT_URL": endpoint})
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
