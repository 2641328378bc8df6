"""Over HTTP against moto's server: racing writers, and the ambiguous retry
(a PUT stored by the server whose response was lost)."""

from __future__ import annotations

import threading
from typing import Any

import boto3
import botocore.exceptions
import pytest
from botocore.httpsession import URLLib3Session

from evstore import Store, WriteConflictError
from evstore._backends._s3 import S3Store

from .conftest import new_bucket
from .helpers import msg


@pytest.mark.slow
def test_racing_writers_never_overwrite_and_every_acknowledged_append_appears_once(moto_endpoint: str) -> None:
    backend = new_bucket(moto_endpoint)
    Store(backend, root="r").create("shared")
    acked: list[tuple[int, str]] = []
    conflicts: list[int] = []
    lock = threading.Lock()
    barrier = threading.Barrier(6)

    def writer(w: int) -> None:
        store = Store(S3Store(backend.bucket, endpoint_url=moto_endpoint), root="r")
        session = store.open("shared")
        barrier.wait()
        for i in range(15):
            text = f"w{w}-{i}"
            for _ in range(50):  # bounded refresh-and-retry
                try:
                    seq = session.append(msg(text))
                except WriteConflictError as conflict:
                    with lock:
                        conflicts.append(conflict.seq)
                    session.refresh()
                    continue
                with lock:
                    acked.append((seq, text))
                break

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    store = Store(backend, root="r")
    events = list(store.replay("shared"))
    assert [e.seq for e in events] == list(range(1, 91))
    assert sorted((e.seq, e.messages[0]["content"]) for e in events) == sorted(acked)
    assert len(acked) == 90 and conflicts  # the race happened, and losers were told
    assert store.verify("shared").events == 90


class LoseFirstResponse:
    """A botocore before-send hook: on the first PutObject of ``key`` it sends the
    request itself (so the server stores the object), or lets a competitor write
    first, then raises a connection error as if the response was lost. botocore
    retries the PUT, which then meets 412."""

    def __init__(self, key: str, competitor: Any = None) -> None:
        self.key = key
        self.competitor = competitor
        self.fired = False
        self.http = URLLib3Session()

    def __call__(self, request: Any, **kwargs: Any) -> None:
        if self.fired or not request.url.split("?")[0].endswith(self.key):
            return None
        self.fired = True
        if self.competitor is None:
            response = self.http.send(request)
            assert response.status_code == 200
        else:
            self.competitor()
        raise botocore.exceptions.ConnectionClosedError(endpoint_url=request.url)


def _store_with_hook(moto_endpoint: str, hook: LoseFirstResponse) -> Store:
    backend = new_bucket(moto_endpoint, direct_requests=False)  # botocore's PUTs (tests/test_s3_direct.py: the direct ones)
    backend.client.meta.events.register("before-send.s3.PutObject", hook)
    return Store(backend, root="r")


def test_a_lost_response_after_the_server_stored_the_object_is_success_exactly_once(moto_endpoint: str) -> None:
    hook = LoseFirstResponse("r/sessions/s/00000000000000000002")
    store = _store_with_hook(moto_endpoint, hook)
    writer = store.open("s", create=True)
    writer.append(msg("one"))
    assert writer.append(msg("two")) == 2
    assert hook.fired
    assert writer.append(msg("three")) == 3
    assert [e.messages[0]["content"] for e in store.replay("s")] == ["one", "two", "three"]
    keys = [o.key for o in store.backend.list("r/sessions/s/")]
    assert keys == [f"r/sessions/s/{seq:020d}" for seq in (1, 2, 3)] + ["r/sessions/s/manifest"]


def test_a_competitors_object_met_on_retry_is_a_conflict(moto_endpoint: str) -> None:
    backend_holder: list[Store] = []

    def competitor() -> None:
        other = Store(S3Store(backend_holder[0].backend.bucket, endpoint_url=moto_endpoint), root="r")  # type: ignore[attr-defined]
        other.open("s").append(msg("theirs"))

    hook = LoseFirstResponse("r/sessions/s/00000000000000000001", competitor)
    store = _store_with_hook(moto_endpoint, hook)
    backend_holder.append(store)
    writer = store.open("s", create=True)
    with pytest.raises(WriteConflictError) as caught:
        writer.append(msg("mine"))
    assert caught.value.seq == 1
    assert [e.messages[0]["content"] for e in store.replay("s")] == ["theirs"]


def test_a_raw_overwrite_attempt_is_refused_by_the_server(moto_endpoint: str) -> None:
    backend = new_bucket(moto_endpoint)
    store = Store(backend, root="r")
    store.open("s", create=True).append(msg("original"))
    client = boto3.client("s3", endpoint_url=moto_endpoint)
    with pytest.raises(botocore.exceptions.ClientError) as caught:
        client.put_object(Bucket=backend.bucket, Key="r/sessions/s/00000000000000000001", Body=b"x", IfNoneMatch="*")
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert next(store.replay("s")).messages[0]["content"] == "original"
