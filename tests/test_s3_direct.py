"""GETs, LISTs and conditional creates sent straight through urllib3 (``_backends/_s3_direct.py``):
signed as SigV4 says, sent where botocore sent the store's first GET or LIST, the same answers as
botocore's, exactly-once appends when an answer is lost, and botocore's answer for anything else."""

from __future__ import annotations

import http.client
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

from evstore._backends import ObjectExists, ObjectMissing
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


def botocore_sends(store: S3Store, *operations: str) -> Counter[str]:
    """The requests of ``operations`` (default: GETs and LISTs) botocore sends for ``store`` from
    now on (direct requests are not in it)."""
    sent: Counter[str] = Counter()

    def count(event_name: str, **_: Any) -> None:
        sent[event_name.rsplit(".", 1)[-1]] += 1

    for operation in operations or ("GetObject", "ListObjectsV2"):
        store.client.meta.events.register(f"before-send.s3.{operation}", count)
    return sent


@pytest.fixture
def pair(moto_endpoint: str) -> Iterator[tuple[S3Store, S3Store]]:
    """The same bucket through a store with direct requests (learned) and one without."""
    direct = new_bucket(moto_endpoint)
    plain = S3Store(direct.bucket, endpoint_url=moto_endpoint, direct_requests=False)
    for index, key in enumerate(KEYS):
        direct.create(key, os.urandom(100 + index), metadata={"Writer": f"w{index}"} if index == 1 else None)
    direct.get(KEYS[0])  # botocore's GET, which the direct requests learn from
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


def test_a_direct_create_stores_the_bytes_metadata_and_tags_botocore_would(pair: tuple[S3Store, S3Store]) -> None:
    direct, plain = pair
    sent = botocore_sends(direct, "PutObject")
    etag = direct.create("sessions/c/1", b"new bytes", metadata={"Writer": "w-1"}, tags={"evstore-retention": "ephemeral 7"})
    assert direct.requests["PutObject"] == 1 + len(KEYS) and not sent  # direct
    stored = plain.get("sessions/c/1")
    assert (stored.data, stored.etag, stored.metadata) == (b"new bytes", etag, {"writer": "w-1"})
    assert plain.get_tags("sessions/c/1") == {"evstore-retention": "ephemeral 7"}


def test_a_direct_create_sends_its_head_and_body_in_one_write(
    pair: tuple[S3Store, S3Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One write: a writer killed mid-request never leaves a server that checks no digest a head
    and part of its body (the soak's proxy in front of moto stored such a part once)."""
    direct, plain = pair
    writes: list[bytes] = []
    real_send = http.client.HTTPConnection.send

    def recording(self: http.client.HTTPConnection, data: Any) -> None:
        writes.append(bytes(data))
        real_send(self, data)

    monkeypatch.setattr(http.client.HTTPConnection, "send", recording)
    body = os.urandom(5000)
    direct.create("sessions/c/one-write", body)
    assert len(writes) == 1 and writes[0].startswith(b"PUT ") and writes[0].endswith(b"\r\n\r\n" + body)
    assert plain.get("sessions/c/one-write").data == body
    writes.clear()
    assert direct.get("sessions/c/one-write").data == body  # a GET has no body to wait for
    assert len(writes) == 1 and writes[0].startswith(b"GET ")


def test_a_direct_create_of_a_taken_key_raises_object_exists_and_changes_nothing(pair: tuple[S3Store, S3Store]) -> None:
    direct, plain = pair
    sent = botocore_sends(direct, "PutObject")
    before = plain.get(KEYS[0])
    with pytest.raises(ObjectExists):
        direct.create(KEYS[0], b"overwrite?")
    assert plain.get(KEYS[0]) == before
    assert not sent  # the 412 came to the direct request


def test_metadata_a_header_cannot_carry_as_it_is_goes_through_botocore(pair: tuple[S3Store, S3Store]) -> None:
    direct, plain = pair
    sent = botocore_sends(direct, "PutObject")
    direct.create("sessions/c/2", b"x", metadata={"note": ""})
    direct.create("sessions/c/3", b"x", metadata={"note": " padded"})
    assert sent["PutObject"] == 2
    assert plain.get("sessions/c/3").data == b"x"


class _LoseFirstDirectAnswer:
    """Wraps the direct pool: the first PUT of ``key`` reaches the server (which stores it),
    then its answer is lost, as on a connection reset."""

    def __init__(self, pool: Any, key: str) -> None:
        self.pool, self.key, self.fired = pool, key, False

    def request(self, method: str, url: str, **kwargs: Any) -> Any:
        if method == "PUT" and not self.fired and url.endswith("/" + self.key):
            self.fired = True
            self.pool.request(method, url, **kwargs)
            raise urllib3.exceptions.ProtocolError("connection reset")
        return self.pool.request(method, url, **kwargs)


def test_a_lost_answer_to_a_direct_create_is_an_append_exactly_once(moto_endpoint: str) -> None:
    from evstore import Store

    backend = new_bucket(moto_endpoint)
    store = Store(backend, root="r")
    writer = store.open("s", create=True)
    writer.append({"role": "user", "content": "one"})
    assert backend._direct is not None and backend._direct.target is not None
    lose = _LoseFirstDirectAnswer(backend._direct._pool, "r/sessions/s/00000000000000000002")
    backend._direct._pool = lose  # type: ignore[assignment]
    assert writer.append({"role": "user", "content": "two"}) == 2
    assert lose.fired
    assert writer.append({"role": "user", "content": "three"}) == 3
    assert [e.messages[0]["content"] for e in store.replay("s")] == ["one", "two", "three"]
    keys = [o.key for o in backend.list("r/sessions/s/")]
    assert keys == [f"r/sessions/s/{seq:020d}" for seq in (1, 2, 3)] + ["r/sessions/s/manifest"]


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


def fail_directly(store: S3Store, answer: Exception | tuple[int, bytes, dict[str, str]]) -> _Failing:
    """Every direct request of ``store`` fails as ``answer`` says from now on; its requests through
    botocore are expected (the ``pair`` fixture does not hold them against the test)."""
    assert store._direct is not None
    failing = _Failing(answer)
    store._direct._pool = failing  # type: ignore[assignment]
    store._expect_botocore = True  # type: ignore[attr-defined]
    return failing


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
    failing = fail_directly(direct, answer)
    assert direct.get(KEYS[2]) == plain.get(KEYS[2])
    assert direct.list_page("sessions/") == plain.list_page("sessions/")
    assert failing.sent == 2  # each tried directly once, then answered by botocore


@pytest.mark.slow
def test_a_failed_direct_attempt_is_the_first_of_max_attempts(
    pair: tuple[S3Store, S3Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A direct GET that fails transiently and botocore's retries that fail too: max_attempts
    requests in all (3 here), the direct one the first, then one line."""
    from evstore import StoreUnavailableError

    direct, _ = pair
    failing = fail_directly(direct, (503, b"<Error><Code>SlowDown</Code></Error>", {}))
    botocore_tries: list[str] = []

    def down(**kwargs: Any) -> Any:
        botocore_tries.append(kwargs["Key"])
        raise urllib3.exceptions.ReadTimeoutError(None, "/", "Read timed out.")  # type: ignore[arg-type]

    monkeypatch.setattr(direct.client, "get_object", down)
    direct.retry_backoff = 0.001
    with pytest.raises(StoreUnavailableError, match="after 3 attempts"):
        direct.get(KEYS[0])
    assert failing.sent == 1 and len(botocore_tries) == 2 == direct.max_attempts - 1


@pytest.mark.parametrize("status", [400, 403, 301, 307])
def test_a_server_that_refuses_direct_requests_as_sent_gets_botocores_from_then_on(
    pair: tuple[S3Store, S3Store], status: int
) -> None:
    direct, plain = pair
    failing = fail_directly(direct, (status, b"<Error><Code>Refused</Code></Error>", {}))
    assert direct.get(KEYS[2]) == plain.get(KEYS[2])
    assert direct.get(KEYS[1]) == plain.get(KEYS[1])
    assert direct.list_page("sessions/") == plain.list_page("sessions/")
    assert failing.sent == 1  # the first only
    assert direct._direct.target is None


def test_a_tls_failure_stops_direct_requests_at_once(pair: tuple[S3Store, S3Store]) -> None:
    direct, plain = pair
    failing = fail_directly(direct, urllib3.exceptions.SSLError("certificate verify failed"))
    for key in KEYS:
        assert direct.get(key) == plain.get(key)
    assert failing.sent == 1 and direct._direct.target is None


def test_transport_failures_stop_direct_requests_when_they_come_three_in_a_row(pair: tuple[S3Store, S3Store]) -> None:
    direct, plain = pair
    assert direct._direct is not None
    working = direct._direct._pool
    failing = _Failing(urllib3.exceptions.NewConnectionError(None, "connection refused"))  # type: ignore[arg-type]
    direct._expect_botocore = True  # type: ignore[attr-defined]
    for _ in range(3):  # two failures, then a direct read that works: the count starts again
        direct._direct._pool = failing  # type: ignore[assignment]
        assert direct.get(KEYS[0]) == plain.get(KEYS[0])
        assert direct.get(KEYS[1]) == plain.get(KEYS[1])
        direct._direct._pool = working
        assert direct.get(KEYS[2]) == plain.get(KEYS[2])
    assert direct._direct.target is not None
    direct._direct._pool = failing  # type: ignore[assignment]
    for key in KEYS * 2:
        assert direct.get(key) == plain.get(key)
    assert failing.sent == 6 + 3 and direct._direct.target is None


def test_no_direct_requests_where_a_mock_answers_botocore() -> None:
    from moto import mock_aws

    with mock_aws():
        store = new_bucket(None)
        store.create("k", b"v")
        assert store.get("k").data == b"v"
        assert store._direct is not None and store._direct.target is None  # moto answered: nothing learned
        assert store.get("k").data == b"v"


def test_direct_requests_are_off_when_asked_behind_a_proxy_or_on_a_client_passed_in(
    moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import boto3

    assert S3Store("b", endpoint_url=moto_endpoint, direct_requests=False)._direct is None
    assert S3Store("b", endpoint_url=moto_endpoint, client=boto3.client("s3", endpoint_url=moto_endpoint))._direct is None
    monkeypatch.setenv("EVSTORE_DIRECT_REQUESTS", "0")
    assert S3Store("b", endpoint_url=moto_endpoint)._direct is None
    monkeypatch.delenv("EVSTORE_DIRECT_REQUESTS")
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    assert S3Store("b", endpoint_url=moto_endpoint)._direct is None
    monkeypatch.delenv("HTTPS_PROXY")
    assert S3Store("b", endpoint_url=moto_endpoint)._direct is not None


@pytest.mark.slow
def test_the_benchmark_runs_direct_requests_without_a_fallback() -> None:
    """benchmarks/direct_requests.py, smallest run, against moto's server: both stores measured,
    the direct requests started, and none of them sent again through botocore."""
    repo = Path(__file__).resolve().parents[1]
    script = repo / "benchmarks" / "direct_requests.py"
    command = [sys.executable, str(script), "--server", "moto", "--objects", "3", "--rounds", "1"]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=180,
        cwd=repo,
        env={k: v for k, v in os.environ.items() if not k.startswith("AWS_ENDPOINT_URL")},  # moto of its own
    )
    assert done.returncode == 0, done.stderr[-2000:]
    for row in ("| GET of 1 KiB |", "| LIST of 3 keys |", "| create of 1 KiB (If-None-Match: *) |"):
        assert row in done.stdout
    assert "the direct store's requests sent through botocore after the warm-up: 0" in done.stdout


# ---- over HTTPS -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def https_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """moto's S3 app over HTTPS on 127.0.0.1 with a self-signed certificate: the endpoint and
    the certificate's file (the CA bundle that trusts it)."""
    import datetime
    import ipaddress
    import threading

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    from moto.server import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import make_server

    from .conftest import free_port

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    folder = tmp_path_factory.mktemp("tls")
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    port = free_port()
    app = DomainDispatcherApplication(create_backend_app)
    server = make_server("127.0.0.1", port, app, threaded=True, ssl_context=(str(cert_file), str(key_file)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"https://127.0.0.1:{port}", str(cert_file)
    server.shutdown()


def test_direct_requests_over_https_verify_the_certificate_botocore_trusts(
    https_endpoint: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import boto3

    endpoint, ca_bundle = https_endpoint
    monkeypatch.setenv("AWS_CA_BUNDLE", ca_bundle)
    bucket = f"evs-{os.urandom(6).hex()}"
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=bucket)
    store = S3Store(bucket, endpoint_url=endpoint)
    plain = S3Store(bucket, endpoint_url=endpoint, direct_requests=False)
    for key in KEYS:
        store.create(key, os.urandom(64))
    store.get(KEYS[0])  # botocore's, over TLS: the direct requests learn
    assert store._direct is not None and store._direct.target is not None and store._direct.target.scheme == "https"
    sent = botocore_sends(store, "GetObject", "ListObjectsV2", "PutObject")
    for key in KEYS:
        assert store.get(key) == plain.get(key)
    store.create("sessions/tls/1", b"over TLS, head and body in one write")
    assert plain.get("sessions/tls/1").data == b"over TLS, head and body in one write"
    assert store.list_page("sessions/") == plain.list_page("sessions/")
    assert not sent and store._direct.target is not None  # all direct, over verified TLS
