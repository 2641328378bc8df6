"""Reads sent straight through urllib3 (``_backends/_s3_direct.py``): signed as SigV4 says, sent
where botocore sent the store's first GET, the same answers as botocore's, and botocore's answer
for anything else."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3

from evstore._backends import ObjectMissing
from evstore._backends._base import ObjectRefused
from evstore._backends._s3 import S3Store
from evstore._backends._s3_direct import EMPTY_SHA256, Target, canonical_query, learn_target, sign_v4

from .conftest import new_bucket

# AWS's published example credentials and requests (Signature Version 4 for S3, "transferring
# payload in a single chunk"): the signatures there are what any correct signer computes.
EXAMPLE_KEYS = {"access_key": "AKIAIOSFODNN7EXAMPLE", "secret_key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}
EXAMPLE_SCOPE = "AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request"


def test_sign_v4_gives_aws_published_signature_of_a_get_object() -> None:
    headers = {
        "host": "examplebucket.s3.amazonaws.com",
        "range": "bytes=0-9",
        "x-amz-content-sha256": EMPTY_SHA256,
        "x-amz-date": "20130524T000000Z",
    }
    signed = sign_v4(
        "GET", "/test.txt", "", headers, **EXAMPLE_KEYS, region="us-east-1", service="s3", amz_date="20130524T000000Z"
    )
    assert signed == (
        f"AWS4-HMAC-SHA256 Credential={EXAMPLE_SCOPE}, SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
        "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
    )


def test_sign_v4_gives_aws_published_signature_of_a_list() -> None:
    headers = {"host": "examplebucket.s3.amazonaws.com", "x-amz-content-sha256": EMPTY_SHA256, "x-amz-date": "20130524T000000Z"}
    query = canonical_query({"prefix": "J", "max-keys": "2"})
    assert query == "max-keys=2&prefix=J"
    signed = sign_v4("GET", "/", query, headers, **EXAMPLE_KEYS, region="us-east-1", service="s3", amz_date="20130524T000000Z")
    assert signed.endswith("Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7")


def test_canonical_query_encodes_all_but_unreserved_characters() -> None:
    assert canonical_query({"prefix": "a b/+~é", "delimiter": "/"}) == "delimiter=%2F&prefix=a%20b%2F%2B~%C3%A9"


AUTH = "AWS4-HMAC-SHA256 Credential=AK/20261205/eu-west-3/s3/aws4_request, SignedHeaders=host, Signature=00"


@pytest.mark.parametrize(
    ("url", "key", "expected"),
    [
        ("http://127.0.0.1:9000/bkt/sessions/a/1", "sessions/a/1", Target("http", "127.0.0.1:9000", "/bkt/", "eu-west-3", "s3")),
        (
            "https://bkt.s3.eu-west-3.amazonaws.com/k%20%C3%A9",
            "k é",
            Target("https", "bkt.s3.eu-west-3.amazonaws.com", "/", "eu-west-3", "s3"),
        ),
        ("https://bkt.s3.amazonaws.com/x/k?versionId=1", "x/k", Target("https", "bkt.s3.amazonaws.com", "/", "eu-west-3", "s3")),
        # a LIST of the bucket (key None): its path is the bucket's
        ("http://127.0.0.1:9000/bkt?list-type=2&prefix=a", None, Target("http", "127.0.0.1:9000", "/bkt/", "eu-west-3", "s3")),
        ("https://bkt.s3.amazonaws.com/?list-type=2", None, Target("https", "bkt.s3.amazonaws.com", "/", "eu-west-3", "s3")),
    ],
)
def test_the_target_is_where_botocore_sent_the_key(url: str, key: str | None, expected: Target) -> None:
    assert learn_target(url, key, AUTH) == expected


@pytest.mark.parametrize(
    ("url", "key", "authorization"),
    [
        ("http://h/bkt/other", "sessions/a/1", AUTH),  # not this key's URL
        ("http://h/bkt/xsessions/a/1", "sessions/a/1", AUTH),  # the key does not start a path segment
        ("http://h/bkt/k", "k", "AWS AK:signature"),  # signature version 2
        ("http://h/bkt/k", "k", ""),  # unsigned
        ("ftp://h/bkt/k", "k", AUTH),
        ("http://h/bkt/k", "k", AUTH.replace("/s3/", "/s3express/")),  # S3 Express signs with session tokens
    ],
)
def test_a_request_it_cannot_repeat_teaches_nothing(url: str, key: str, authorization: str) -> None:
    assert learn_target(url, key, authorization) is None


def test_bucket_path_is_the_object_path_without_its_last_slash() -> None:
    assert Target("http", "h", "/bkt/", "r", "s3").bucket_path() == "/bkt"
    assert Target("https", "b.h", "/", "r", "s3").bucket_path() == "/"


# ---- against moto's server over HTTP ---------------------------------------------------

KEYS = ["sessions/a/00000000000000000001", "sessions/a/00000000000000000002", "sessions/b c+d/é~!*'()&=?#%/x"]


def botocore_sends(store: S3Store) -> Counter[str]:
    """The GETs and LISTs botocore sends for ``store`` from now on (direct reads are not in it)."""
    sent: Counter[str] = Counter()

    def count(event_name: str, **_: Any) -> None:
        sent[event_name.rsplit(".", 1)[-1]] += 1

    store.client.meta.events.register("before-send.s3.GetObject", count)
    store.client.meta.events.register("before-send.s3.ListObjectsV2", count)
    store._test_keepalive = count  # type: ignore[attr-defined]
    return sent


@pytest.fixture
def pair(moto_endpoint: str) -> Iterator[tuple[S3Store, S3Store]]:
    """The same bucket through a store with direct reads (learned) and one without."""
    direct = new_bucket(moto_endpoint)
    plain = S3Store(direct.bucket, endpoint_url=moto_endpoint, direct_reads=False)
    for index, key in enumerate(KEYS):
        direct.create(key, os.urandom(100 + index), metadata={"Writer": f"w{index}"} if index == 1 else None)
    direct.get(KEYS[0])  # botocore's GET, which the direct reads learn from
    assert direct._direct is not None and direct._direct.target is not None
    sent = botocore_sends(direct)
    yield direct, plain
    if not getattr(direct, "_expect_botocore", False):
        assert not sent, "a read the test meant to be direct went through botocore"


def test_a_list_teaches_as_a_get_does(moto_endpoint: str) -> None:
    store = new_bucket(moto_endpoint)
    store.create(KEYS[2], b"v")
    assert store._direct is not None and store._direct.target is None
    store.list_page("sessions/")  # botocore's
    assert store._direct.target is not None
    sent = botocore_sends(store)
    assert store.get(KEYS[2]).data == b"v"  # direct: the key's URL is right
    assert [o.key for o in store.list_page("sessions/").objects] == [KEYS[2]]
    assert not sent


def test_a_direct_get_answers_what_botocore_answers(pair: tuple[S3Store, S3Store]) -> None:
    direct, plain = pair
    for key in KEYS:
        before = direct.requests["GetObject"]
        assert direct.get(key) == plain.get(key)
        assert direct.requests["GetObject"] == before + 1  # one request each: no fallback
    assert direct.get(KEYS[1]).metadata == {"writer": "w1"}


def test_a_direct_get_of_a_missing_key_raises_object_missing_in_one_request(pair: tuple[S3Store, S3Store]) -> None:
    direct, _ = pair
    before = direct.requests["GetObject"]
    with pytest.raises(ObjectMissing):
        direct.get("sessions/a/none")
    assert direct.requests["GetObject"] == before + 1


def test_a_direct_get_refuses_a_larger_object_by_its_header_unread_and_the_pool_still_works(
    pair: tuple[S3Store, S3Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    direct, plain = pair
    direct.create("big", b"y" * (1 << 20))
    read: list[int] = []
    real_read = urllib3.HTTPResponse.read

    def spying(self: urllib3.HTTPResponse, *args: Any, **kwargs: Any) -> bytes:
        data = real_read(self, *args, **kwargs)
        read.append(len(data))
        return data

    monkeypatch.setattr(urllib3.HTTPResponse, "read", spying)
    with pytest.raises(ObjectRefused, match="1048576 bytes"):
        direct.get("big", max_bytes=1000)
    assert read == []
    assert direct.get(KEYS[1]) == plain.get(KEYS[1])
    assert len(direct.get("big", max_bytes=1 << 20).data) == 1 << 20


@pytest.mark.parametrize(
    "args",
    [
        {"prefix": "sessions/"},
        {"prefix": ""},
        {"prefix": "sessions/", "delimiter": "/"},
        {"prefix": "sessions/a/", "max_keys": 1},
        {"prefix": "sessions/", "start_after": "sessions/a/00000000000000000001"},
        {"prefix": "sessions/b c+d/"},
    ],
)
def test_a_direct_list_answers_what_botocore_answers(pair: tuple[S3Store, S3Store], args: dict[str, Any]) -> None:
    direct, plain = pair
    before = direct.requests["ListObjectsV2"]
    assert direct.list_page(**args) == plain.list_page(**args)
    assert direct.requests["ListObjectsV2"] == before + 1


class _Failing:
    """A pool whose every request fails: raises ``answer``, or answers with it (status, body,
    headers) as a server would."""

    def __init__(self, answer: Exception | tuple[int, bytes, dict[str, str]]) -> None:
        self.answer = answer
        self.sent = 0

    def request(self, *args: Any, preload_content: bool = True, **kwargs: Any) -> urllib3.HTTPResponse:
        self.sent += 1
        if isinstance(self.answer, Exception):
            raise self.answer
        status, body, headers = self.answer
        return urllib3.HTTPResponse(io.BytesIO(body), headers=headers, status=status, preload_content=preload_content)


@pytest.mark.parametrize(
    "answer",
    [
        urllib3.exceptions.ProtocolError("connection reset"),
        urllib3.exceptions.ReadTimeoutError(None, "/", "read timed out"),  # type: ignore[arg-type]
        (500, b"<Error><Code>InternalError</Code></Error>", {}),
        (404, b"<Error><Code>NoSuchBucket</Code></Error>", {}),
        (200, b"cut short", {"content-length": "100", "etag": '"x"', "last-modified": "Sat, 05 Dec 2026 10:00:00 GMT"}),
        (200, b"no etag", {"content-length": "7", "last-modified": "Sat, 05 Dec 2026 10:00:00 GMT"}),
    ],
)
def test_anything_but_a_plain_answer_is_asked_again_of_botocore(pair: tuple[S3Store, S3Store], answer: Any) -> None:
    direct, plain = pair
    assert direct._direct is not None
    failing = _Failing(answer)
    direct._direct._pool = failing  # type: ignore[assignment]
    direct._expect_botocore = True  # type: ignore[attr-defined]
    assert direct.get(KEYS[2]) == plain.get(KEYS[2])
    assert direct.list_page("sessions/") == plain.list_page("sessions/")
    assert failing.sent == 2  # each tried directly once, then answered by botocore


@pytest.mark.parametrize("status", [400, 403, 301, 307])
def test_a_server_that_refuses_direct_reads_as_sent_gets_botocores_from_then_on(
    pair: tuple[S3Store, S3Store], status: int
) -> None:
    direct, plain = pair
    assert direct._direct is not None
    failing = _Failing((status, b"<Error><Code>Refused</Code></Error>", {}))
    direct._direct._pool = failing  # type: ignore[assignment]
    direct._expect_botocore = True  # type: ignore[attr-defined]
    assert direct.get(KEYS[2]) == plain.get(KEYS[2])
    assert direct.get(KEYS[1]) == plain.get(KEYS[1])
    assert direct.list_page("sessions/") == plain.list_page("sessions/")
    assert failing.sent == 1  # the first only
    assert direct._direct.target is None


def test_no_direct_reads_where_a_mock_answers_botocore() -> None:
    from moto import mock_aws

    with mock_aws():
        store = new_bucket(None)
        store.create("k", b"v")
        assert store.get("k").data == b"v"
        assert store._direct is not None and store._direct.target is None  # moto answered: nothing learned
        assert store.get("k").data == b"v"


def test_direct_reads_are_off_when_asked_behind_a_proxy_or_on_a_client_passed_in(
    moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import boto3

    assert S3Store("b", endpoint_url=moto_endpoint, direct_reads=False)._direct is None
    assert S3Store("b", endpoint_url=moto_endpoint, client=boto3.client("s3", endpoint_url=moto_endpoint))._direct is None
    monkeypatch.setenv("EVSTORE_DIRECT_READS", "0")
    assert S3Store("b", endpoint_url=moto_endpoint)._direct is None
    monkeypatch.delenv("EVSTORE_DIRECT_READS")
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    assert S3Store("b", endpoint_url=moto_endpoint)._direct is None
    monkeypatch.delenv("HTTPS_PROXY")
    assert S3Store("b", endpoint_url=moto_endpoint)._direct is not None


def test_the_benchmark_runs_direct_reads_without_a_fallback() -> None:
    """benchmarks/direct_reads.py, smallest run, against moto's server: both stores measured, the
    direct reads started, and none of them sent again through botocore."""
    repo = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, str(repo / "benchmarks" / "direct_reads.py"), "--server", "moto", "--objects", "3", "--rounds", "1"],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=repo,
        env={k: v for k, v in os.environ.items() if not k.startswith("AWS_ENDPOINT_URL")},  # moto of its own
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "| GET of 1 KiB |" in done.stdout and "| LIST of 3 keys |" in done.stdout
    assert "requests sent again through botocore after a direct one: 0" in done.stdout
