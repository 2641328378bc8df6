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


def _share_botocore_data() -> None:
    """Every ``S3Store`` makes a boto3 session of its own, and each session's loader parses the S3
    service model anew (0.15-0.3 s): a suite that makes thousands of stores would spend minutes on
    it. Here the parsed files are shared by every loader of the process. botocore already hands one
    parsed model to all the clients of a session and never changes it, so sharing it across sessions
    changes nothing a test can see but the time."""
    import functools

    from botocore.loaders import Loader

    load = Loader.load_data_with_path
    parsed: dict[tuple[tuple[str, ...], str], Any] = {}

    @functools.wraps(load)
    def shared(self: Loader, name: str) -> Any:
        key = (tuple(self.search_paths), name)
        if key not in parsed:
            parsed[key] = load(self, name)
        return parsed[key]

    Loader.load_data_with_path = shared  # type: ignore[method-assign]


_share_botocore_data()


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The README's test command runs the suite on pytest-xdist workers (``--dist loadgroup``).
    The RGW tests share one gateway, so they are one group, run by one worker. The RGW and stress
    tests are slow (the quick tier, ``-m "not slow"``, leaves them out), and the slow tests are handed
    out first, so that none starts last and holds the whole run back; the order is the same in every
    worker, as xdist requires."""
    rgw = Path(__file__).parent / "rgw"
    for item in items:
        if rgw in item.path.parents:
            item.add_marker(pytest.mark.xdist_group("rgw"))
        if item.get_closest_marker("rgw") or item.get_closest_marker("stress"):
            item.add_marker(pytest.mark.slow)  # a gateway to boot, or a harness of writers and faults
    items.sort(key=lambda item: 0 if item.get_closest_marker("slow") else 1)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """Under xdist: each worker's stress figures are added up here, in the controller."""
    totals = getattr(node, "workeroutput", {}).get("stress_figures")
    if totals:
        from .stress.conftest import FIGURES

        FIGURES.add_totals(totals)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The stress harness's figures, when any stress test ran (in this process or in a worker)."""
    import sys

    stress = sys.modules.get(f"{__package__}.stress.conftest")
    if stress is not None:
        stress.print_figures(terminalreporter)


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
