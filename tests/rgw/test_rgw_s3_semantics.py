"""What Ceph RGW 16 does with the S3 features evstore relies on, and how S3Store adapts.

The raw-protocol tests talk to the gateway with boto3 and no retries, so every
HTTP status is seen as the server sent it. They pin the facts the README's
compatibility table states for RGW.
"""

from __future__ import annotations

import functools
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import botocore.exceptions
import pytest

from evstore._backends import PreconditionFailed
from evstore._backends._s3 import S3Store

from .conftest import rgw_client

pytestmark = pytest.mark.rgw

RACERS = 16  # concurrent conditional PUTs per key
ROUNDS = 30  # keys raced, one after the other


def _status(call: Callable[[], Any]) -> int:
    try:
        return int(call()["ResponseMetadata"]["HTTPStatusCode"])
    except botocore.exceptions.ClientError as exc:
        return int(exc.response["ResponseMetadata"]["HTTPStatusCode"])


def _race(calls: Sequence[Callable[[], Any]], pool: ThreadPoolExecutor) -> list[int]:
    """Run the calls at once (released together by a barrier); their HTTP statuses in order."""
    barrier = threading.Barrier(len(calls), timeout=30)

    def go(call: Callable[[], Any]) -> int:
        barrier.wait()
        return _status(call)

    return list(pool.map(go, calls))


@pytest.fixture
def raw(rgw_backend: S3Store, rgw: Any) -> tuple[Any, str]:
    """A boto3 client without retries, and the bucket of ``rgw_backend``."""
    return rgw_client(rgw, max_attempts=1), rgw_backend.bucket


def test_rgw_refuses_a_quoted_if_match_etag_and_accepts_it_unquoted(raw: tuple[Any, str]) -> None:
    client, bucket = raw
    etag = client.put_object(Bucket=bucket, Key="k", Body=b"v1")["ETag"]
    assert etag.startswith('"')  # RGW returns the ETag quoted, as S3 does...
    assert _status(lambda: client.put_object(Bucket=bucket, Key="k", Body=b"v2", IfMatch=etag)) == 412  # ...but compares it bare
    assert client.get_object(Bucket=bucket, Key="k")["Body"].read() == b"v1"
    assert _status(lambda: client.put_object(Bucket=bucket, Key="k", Body=b"v2", IfMatch=etag.strip('"'))) == 200
    assert client.get_object(Bucket=bucket, Key="k")["Body"].read() == b"v2"


def test_s3store_switches_to_unquoted_if_match_after_the_first_replace(rgw_backend: S3Store) -> None:
    etag = rgw_backend.create("k", b"v1")
    rgw_backend.requests.clear()
    assert not rgw_backend._unquoted_if_match
    etag = rgw_backend.replace("k", b"v2", etag=etag)
    # quoted PUT refused (412), HEAD shows the very ETag sent, unquoted PUT accepted
    assert rgw_backend._unquoted_if_match
    assert rgw_backend.requests == Counter({"PutObject": 2, "HeadObject": 1})
    rgw_backend.requests.clear()
    rgw_backend.replace("k", b"v3", etag=etag)
    assert rgw_backend.requests == Counter({"PutObject": 1})  # no detour once switched
    assert rgw_backend.get("k").data == b"v3"


def test_s3store_replace_with_a_stale_etag_fails_after_the_switch(rgw_backend: S3Store) -> None:
    first = rgw_backend.create("k", b"v1")
    rgw_backend.replace("k", b"v2", etag=first)
    assert rgw_backend._unquoted_if_match
    with pytest.raises(PreconditionFailed):
        rgw_backend.replace("k", b"v3", etag=first)
    assert rgw_backend.get("k").data == b"v2"


def test_rgw_ignores_if_match_on_delete(raw: tuple[Any, str]) -> None:
    client, bucket = raw
    client.put_object(Bucket=bucket, Key="k", Body=b"v1")
    assert _status(lambda: client.delete_object(Bucket=bucket, Key="k", IfMatch='"0000"')) == 204
    assert _status(lambda: client.head_object(Bucket=bucket, Key="k")) == 404  # deleted despite the wrong ETag


def test_rgw_sets_tags_given_with_the_put(raw: tuple[Any, str]) -> None:
    client, bucket = raw
    client.put_object(Bucket=bucket, Key="k", Body=b"x", Tagging="evstore-retention=ephemeral")
    assert client.get_object_tagging(Bucket=bucket, Key="k")["TagSet"] == [{"Key": "evstore-retention", "Value": "ephemeral"}]


def test_rgw_reads_an_and_filter_back_as_prefix_and_tag(raw: tuple[Any, str]) -> None:
    client, bucket = raw
    tag = {"Key": "evstore-retention", "Value": "ephemeral"}
    rule = {
        "ID": "evstore-ephemeral-expiry",
        "Status": "Enabled",
        "Filter": {"And": {"Prefix": "root/sessions/", "Tags": [tag]}},
        "Expiration": {"Days": 1},
    }
    client.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": [rule]})
    (got,) = client.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
    assert got["Filter"] == {"Prefix": "root/sessions/", "Tag": tag}
    assert got["Expiration"] == {"Days": 1}


def test_racing_if_none_match_puts_have_one_winner_and_no_409(raw: tuple[Any, str]) -> None:
    client, bucket = raw
    statuses: Counter[int] = Counter()
    with ThreadPoolExecutor(RACERS) as pool:
        for round_ in range(ROUNDS):
            key = f"create/{round_}"
            calls = [
                functools.partial(client.put_object, Bucket=bucket, Key=key, Body=f"w{i}".encode(), IfNoneMatch="*")
                for i in range(RACERS)
            ]
            got = _race(calls, pool)
            assert got.count(200) == 1, got
            statuses.update(got)
    print(f"\nRGW racing If-None-Match PUTs ({ROUNDS} keys x {RACERS} writers): {dict(sorted(statuses.items()))}")
    assert set(statuses) == {200, 412}


def test_racing_if_match_puts_have_one_winner_and_no_409(raw: tuple[Any, str]) -> None:
    """Losers get 412, or 500 when RGW's own write guard trips (ECANCELED, "UnknownError"); never 409."""
    client, bucket = raw
    statuses: Counter[int] = Counter()
    with ThreadPoolExecutor(RACERS) as pool:
        for round_ in range(ROUNDS):
            key = f"replace/{round_}"
            etag = client.put_object(Bucket=bucket, Key=key, Body=b"base")["ETag"].strip('"')
            # distinct bodies, so a winner changes the ETag and no loser can match it afterwards
            calls = [
                functools.partial(client.put_object, Bucket=bucket, Key=key, Body=f"w{i}".encode(), IfMatch=etag)
                for i in range(RACERS)
            ]
            got = _race(calls, pool)
            assert got.count(200) == 1, got
            winner = got.index(200)
            assert client.get_object(Bucket=bucket, Key=key)["Body"].read() == f"w{winner}".encode()
            statuses.update(got)
    print(f"\nRGW racing If-Match PUTs ({ROUNDS} keys x {RACERS} writers): {dict(sorted(statuses.items()))}")
    assert set(statuses) <= {200, 412, 500}


def test_racing_s3store_replaces_have_one_winner_and_the_rest_fail_as_preconditions(rgw_backend: S3Store) -> None:
    """S3Store retries RGW's 500 (botocore standard mode); the retry then meets the new ETag: 412."""
    outcomes: Counter[str] = Counter()
    with ThreadPoolExecutor(RACERS) as pool:
        for round_ in range(ROUNDS):
            key = f"s3store/{round_}"
            etag = rgw_backend.create(key, b"base")
            barrier = threading.Barrier(RACERS, timeout=30)

            def replace(i: int, key: str = key, etag: str = etag, barrier: threading.Barrier = barrier) -> str:
                barrier.wait()
                try:
                    rgw_backend.replace(key, f"w{i}".encode(), etag=etag)
                except PreconditionFailed:
                    return "precondition failed"
                return "replaced"

            got = list(pool.map(replace, range(RACERS)))
            assert got.count("replaced") == 1, got
            assert rgw_backend.get(key).data == f"w{got.index('replaced')}".encode()
            outcomes.update(got)
    assert set(outcomes) == {"replaced", "precondition failed"}


def test_rgw_answers_412_to_if_match_on_a_missing_key(raw: tuple[Any, str]) -> None:
    """AWS answers 404 NoSuchKey here; S3Store maps both to PreconditionFailed (see the conformance suite)."""
    client, bucket = raw
    assert _status(lambda: client.put_object(Bucket=bucket, Key="absent", Body=b"x", IfMatch="0123")) == 412
    assert _status(lambda: client.head_object(Bucket=bucket, Key="absent")) == 404
