"""Fixtures: every backend (memory, local directory, moto in process, moto's
HTTP server on 127.0.0.1 started here), stores over them, and the command."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.update(
    AWS_ACCESS_KEY_ID="testing",
    AWS_SECRET_ACCESS_KEY="testing",
    AWS_DEFAULT_REGION="us-east-1",
)
for name in (
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "EVSTORE_STORE",
    "EVSTORE_KEY",
    "EVSTORE_KEYRING",
    "EVSTORE_REQUIRE_ENCRYPTION",
    "AWS_PROFILE",
):
    os.environ.pop(name, None)

from evstore import LocalStore, MemoryStore, ObjectStore, Store  # noqa: E402
from evstore._backends._s3 import S3Store  # noqa: E402

from .helpers import Clock, CountingStore  # noqa: E402

BACKENDS = ["memory", "local", "moto", "moto_server"]


def _serialize_moto() -> None:
    """moto's S3 is not safe under concurrent requests: it checks ``If-None-Match`` and then
    stores without a lock (two racing conditional PUTs can both win, which S3 never allows),
    and a LIST that meets a concurrent DELETE raises ``KeyError`` inside moto. Racing-writer
    tests would then test moto, not evstore, so moto handles one S3 request at a time here."""
    import functools
    import threading

    from moto.s3.responses import S3Response

    lock = threading.RLock()
    for name in ("bucket_response", "key_response"):
        method = getattr(S3Response, name)

        def serialized(self: S3Response, *args: object, __method: Any = method, **kwargs: object) -> object:
            with lock:
                return __method(self, *args, **kwargs)

        setattr(S3Response, name, functools.wraps(method)(serialized))


_serialize_moto()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """moto's S3 server over HTTP on 127.0.0.1, for the whole test session."""
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


def new_bucket(endpoint: str | None, *, direct_requests: bool | None = None) -> S3Store:
    """A store over a new bucket. ``direct_requests=False`` for tests that inject faults through
    botocore's events, which direct requests do not pass through."""
    import boto3

    name = f"evs-{uuid.uuid4().hex[:12]}"
    client = boto3.client("s3", endpoint_url=endpoint)
    client.create_bucket(Bucket=name)
    return S3Store(name, endpoint_url=endpoint, max_attempts=3, read_timeout=10, direct_requests=direct_requests)


@pytest.fixture
def s3_backend(moto_endpoint: str) -> S3Store:
    """A fresh bucket on the moto server."""
    return new_bucket(moto_endpoint)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ObjectStore]:
    yield from make_backend(request.param, request, tmp_path)


def make_backend(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ObjectStore]:
    """A fresh backend of ``kind`` (one of ``BACKENDS``), for fixtures that choose their own kinds."""
    if kind == "memory":
        yield MemoryStore()
    elif kind == "local":
        yield LocalStore(tmp_path / "store")
    elif kind == "moto":
        from moto import mock_aws

        with mock_aws():
            yield new_bucket(None)
    else:
        yield new_bucket(request.getfixturevalue("moto_endpoint"))


@pytest.fixture
def store(backend: ObjectStore) -> Store:
    return Store(backend, root="root")


@pytest.fixture
def memory_store() -> Store:
    return Store(MemoryStore(), root="root")


@pytest.fixture
def counting_store() -> tuple[Store, CountingStore]:
    counting = CountingStore(MemoryStore())
    return Store(counting, root="root"), counting


@pytest.fixture
def user() -> Callable[[str], dict[str, object]]:
    return lambda text: {"role": "user", "content": text}


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def timed(clock: Clock) -> Store:
    """A memory store whose clock (and its objects' times) the test moves."""
    return Store(MemoryStore(clock=clock), root="root", clock=clock)
