"""One conformance suite, run against every backend: memory, local directory,
moto in process and moto's HTTP server."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from evstore import IntegrityError, ObjectStore
from evstore._backends import KeysPage, ObjectExists, ObjectMissing, ObjectRefused, PreconditionFailed


def test_create_stores_bytes_and_metadata(backend: ObjectStore) -> None:
    etag = backend.create("a/b/1", b"one", metadata={"evstore-write-id": "w1"})
    stored = backend.get("a/b/1")
    assert stored.data == b"one"
    assert stored.etag.strip('"') == etag.strip('"')
    assert stored.metadata["evstore-write-id"] == "w1"
    assert backend.head("a/b/1").metadata["evstore-write-id"] == "w1"
    assert backend.head("a/b/1").size == 3


def test_create_refuses_an_existing_key_and_keeps_the_first(backend: ObjectStore) -> None:
    backend.create("k", b"first", metadata={"evstore-write-id": "w1"})
    with pytest.raises(ObjectExists):
        backend.create("k", b"second", metadata={"evstore-write-id": "w2"})
    stored = backend.get("k")
    assert stored.data == b"first"
    assert stored.metadata["evstore-write-id"] == "w1"


def test_replace_needs_the_current_etag(backend: ObjectStore) -> None:
    etag = backend.create("k", b"v1")
    new_etag = backend.replace("k", b"v2", etag=etag)
    assert backend.get("k").data == b"v2"
    with pytest.raises(PreconditionFailed):
        backend.replace("k", b"v3", etag=etag)  # stale
    assert backend.get("k").data == b"v2"
    backend.replace("k", b"v3", etag=new_etag)
    assert backend.get("k").data == b"v3"


def test_replace_of_a_missing_key_fails(backend: ObjectStore) -> None:
    with pytest.raises(PreconditionFailed):
        backend.replace("missing", b"x", etag='"0123"')
    with pytest.raises(ObjectMissing):
        backend.get("missing")


def test_get_and_head_of_missing_keys(backend: ObjectStore) -> None:
    with pytest.raises(ObjectMissing):
        backend.get("nope")
    with pytest.raises(ObjectMissing):
        backend.head("nope")


def test_list_is_lexical_with_start_after_and_pages(backend: ObjectStore) -> None:
    keys = [f"p/{i:05d}" for i in range(25)] + ["p/manifest", "q/other"]
    for key in keys:
        backend.create(key, b"x")
    listed = [o.key for o in backend.list("p/")]
    assert listed == sorted(k for k in keys if k.startswith("p/"))
    assert [o.key for o in backend.list("p/", start_after="p/00020")] == [
        "p/00021",
        "p/00022",
        "p/00023",
        "p/00024",
        "p/manifest",
    ]
    page = backend.list_page("p/", max_keys=10)
    assert page.truncated and len(page.objects) == 10
    assert [o.key for o in backend.list("p/", page_size=7)] == listed
    assert all(o.size == 1 for o in backend.list("p/"))


def test_list_etags_is_list_page_without_the_rest(backend: ObjectStore) -> None:
    """Keys and ETags, page by page from any start, exactly as ``list_page`` lists them (on S3, read
    by a path of its own: keys that need decoding included)."""
    keys = [f"p/{i:020d}" for i in range(1, 8)] + ["p/a b", "p/a+b%2F&<c>", "p/manifest", "q/other"]
    for key in keys:
        backend.create(key, key.encode())
    for start_after, max_keys in (("", 1000), ("", 3), ("p/00000000000000000005", 2), ("p/b", 10)):
        page = backend.list_page("p/", start_after=start_after, max_keys=max_keys)
        etags = backend.list_etags("p/", start_after=start_after, max_keys=max_keys)
        assert etags == KeysPage.of(page.objects, page.truncated) and etags.keys
    assert backend.list_etags("p/", max_keys=3).truncated and not backend.list_etags("p/").truncated


def test_list_with_delimiter_groups_prefixes(backend: ObjectStore) -> None:
    for key in ["s/a/1", "s/a/2", "s/b/1", "s/c/x/1", "s/top"]:
        backend.create(key, b"x")
    page = backend.list_page("s/", delimiter="/")
    assert page.prefixes == ["s/a/", "s/b/", "s/c/"]
    assert [o.key for o in page.objects] == ["s/top"]
    first = backend.list_page("s/", delimiter="/", max_keys=2)
    assert first.prefixes == ["s/a/", "s/b/"] and first.truncated
    rest = backend.list_page("s/", delimiter="/", start_after=first.next_start_after)
    assert rest.prefixes == ["s/c/"]


def test_delete_many_removes_and_ignores_missing(backend: ObjectStore) -> None:
    for i in range(5):
        backend.create(f"d/{i}", b"x")
    backend.delete_many(["d/0", "d/1", "d/absent"])
    assert [o.key for o in backend.list("d/")] == ["d/2", "d/3", "d/4"]
    backend.create("d/0", b"again")  # a deleted key is free again
    assert backend.get("d/0").data == b"again"


def test_tags_set_at_create(backend: ObjectStore) -> None:
    backend.create("t/1", b"x", tags={"evstore-retention": "ephemeral"})
    backend.create("t/2", b"x")
    assert backend.get_tags("t/1") == {"evstore-retention": "ephemeral"}
    assert backend.get_tags("t/2") == {}


def test_lifecycle_configuration_round_trips(backend: ObjectStore) -> None:
    assert backend.get_lifecycle() == []
    rule = {"ID": "r1", "Status": "Enabled", "Filter": {"Prefix": "x/"}, "Expiration": {"Days": 3}}
    backend.put_lifecycle([rule])
    (got,) = backend.get_lifecycle()
    assert got["ID"] == "r1" and got["Expiration"] == {"Days": 3}


# ---- bounded reads: get(max_bytes=N) refuses a larger object before reading its body ----------


def test_get_within_max_bytes_returns_the_object(backend: ObjectStore) -> None:
    backend.create("root/sessions/s/00000000000000000001", b"x" * 100)
    assert backend.get("root/sessions/s/00000000000000000001", max_bytes=100).data == b"x" * 100
    assert backend.get("root/sessions/s/00000000000000000001", max_bytes=10**9).data == b"x" * 100


@pytest.mark.slow
def test_get_over_max_bytes_is_refused_as_an_integrity_error(backend: ObjectStore) -> None:
    key = "root/sessions/s/00000000000000000001"
    backend.create(key, b"x" * 101)
    with pytest.raises(ObjectRefused) as refused:
        backend.get(key, max_bytes=100)
    assert isinstance(refused.value, IntegrityError)  # exit 5
    assert (refused.value.key, refused.value.size, refused.value.limit) == (key, 101, 100)
    assert refused.value.session_id == "s"
    message = str(refused.value)
    assert key in message and "101 bytes" in message and "100 bytes" in message
    with pytest.raises(ObjectRefused):
        backend.get(key, max_bytes=0)
    assert backend.get(key).data == b"x" * 101  # no limit: read as before


@pytest.mark.slow
def test_get_of_an_empty_object_with_a_limit(backend: ObjectStore) -> None:
    backend.create("e", b"")
    assert backend.get("e", max_bytes=0).data == b""


def test_refused_objects_exit_with_the_integrity_code() -> None:
    from evstore_cli._common import exit_code_for

    assert exit_code_for(ObjectRefused("root/sessions/s/manifest", "too large")) == 5


class _SpyBody:
    """A response body that records how much of it was read, and whether it was closed."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.bytes_read = 0
        self.closed = False

    def read(self, amount: int | None = None) -> bytes:
        data: bytes = self.inner.read(amount)
        self.bytes_read += len(data)
        return data

    def close(self) -> None:
        self.closed = True
        self.inner.close()


@pytest.mark.parametrize("kind", ["moto", "moto_server"])
def test_s3_refuses_by_content_length_without_reading_the_body(
    kind: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    from moto import mock_aws

    from .conftest import new_bucket

    with mock_aws() if kind == "moto" else contextlib.nullcontext():
        backend = new_bucket(None if kind == "moto" else request.getfixturevalue("moto_endpoint"))
        backend.create("big", b"y" * (1 << 20))
        backend._direct = None  # botocore's GET here; tests/test_s3_direct.py holds the direct one to the same
        real = backend.client.get_object
        bodies: list[_SpyBody] = []

        def spying(**kwargs: Any) -> Any:
            response = real(**kwargs)
            response["Body"] = _SpyBody(response["Body"])
            bodies.append(response["Body"])
            return response

        monkeypatch.setattr(backend.client, "get_object", spying)
        with pytest.raises(ObjectRefused, match="1048576 bytes"):
            backend.get("big", max_bytes=1000)
        assert [(b.bytes_read, b.closed) for b in bodies] == [(0, True)]
        assert len(backend.get("big", max_bytes=1 << 20).data) == 1 << 20
        assert bodies[-1].bytes_read == 1 << 20
