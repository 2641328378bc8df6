"""LIST bodies read by evstore itself (``_backends/_s3_listing.py``): the same page botocore reads,
for less CPU; anything it does not read exactly goes to botocore."""

from __future__ import annotations

import datetime
import urllib.parse
import xml.etree.ElementTree as ElementTree
from typing import Any

import boto3
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evstore._backends import KeysPage, _s3_listing
from evstore._backends._s3 import S3Store
from evstore._backends._s3_client import _LISTED, _listing, _parse_timestamp, _read_list_body
from evstore._backends._s3_listing import (
    ListedPage,
    _parse_tree,
    _plain_contents,
    _url_decoded,
    parse_etags_body,
    parse_list_body,
)

NS = 'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"'


def body(contents: str, *, truncated: str = "false", encoding: str = "<EncodingType>url</EncodingType>", ns: str = NS) -> bytes:
    head = f'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult {ns}><IsTruncated>{truncated}</IsTruncated>'
    return f"{head}{contents}{encoding}</ListBucketResult>".encode()


def item(key: str, *, size: str = "12", modified: str = "2026-12-04T10:00:00.123Z") -> str:
    return (
        f"<Contents><Key>{key}</Key><LastModified>{modified}</LastModified><ETag>&quot;abc&quot;</ETag>"
        f"<Size>{size}</Size><StorageClass>STANDARD</StorageClass></Contents>"
    )


def test_a_page_reads_as_its_objects_prefixes_and_truncation() -> None:
    prefixes = "<CommonPrefixes><Prefix>r/sessions/b/</Prefix></CommonPrefixes>"
    page = parse_list_body(body(item("r/sessions/a/00000000000000000001") + prefixes, truncated="true"), _parse_timestamp)
    assert page is not None
    assert [(o.key, o.size, o.etag) for o in page.objects] == [("r/sessions/a/00000000000000000001", 12, '"abc"')]
    assert page.objects[0].last_modified == datetime.datetime(2026, 12, 4, 10, 0, 0, 123000, tzinfo=datetime.UTC)
    assert page.prefixes == ["r/sessions/b/"]
    assert page.truncated is True


def test_url_encoded_keys_and_prefixes_are_decoded_as_botocore_decodes_them() -> None:
    page = parse_list_body(
        body(item("a+b%2Bc%26%3C%25%E2%9C%93") + "<CommonPrefixes><Prefix>p%20q/</Prefix></CommonPrefixes>"), _parse_timestamp
    )
    assert page is not None
    assert page.objects[0].key == "a b+c&<%\u2713"
    assert page.prefixes == ["p q/"]


def test_without_url_encoding_keys_are_taken_as_the_xml_says() -> None:
    page = parse_list_body(body(item("a+b&amp;c"), encoding="", ns=""), _parse_timestamp)
    assert page is not None and page.objects[0].key == "a+b&c"


@pytest.mark.parametrize(
    "unread",
    [
        b"not xml",
        b"<Error><Code>AccessDenied</Code></Error>",
        body(item("k"), encoding="<EncodingType>base64</EncodingType>"),
        body(item("k"), truncated="maybe"),
        body(item("k", size="-1")),
        body(item("k", size="\u0661")),  # a digit, but not an ASCII one
        body(item("k", modified="yesterday")),
        body("<Contents><Size>1</Size><LastModified>2026-12-04T10:00:00Z</LastModified></Contents>"),
        body("<CommonPrefixes></CommonPrefixes>"),
    ],
)
def test_a_body_it_does_not_read_exactly_is_left_to_botocore(unread: bytes) -> None:
    assert parse_list_body(unread, _parse_timestamp) is None


def test_the_hook_hands_over_a_page_and_leaves_errors_and_unread_bodies_alone() -> None:
    listed: dict[str, Any] = {}
    response: dict[str, Any] = {"status_code": 200, "body": body(item("k"))}
    _listing.active = True
    try:
        _read_list_body(response, listed)
        assert response["body"] == b"" and isinstance(next(iter(listed.values())), ListedPage)
        for untouched in ({"status_code": 403, "body": body(item("k"))}, {"status_code": 200, "body": b"not xml"}):
            before, listed = dict(untouched), {}
            _read_list_body(untouched, listed)
            assert untouched == before and listed == {}
    finally:
        _listing.active = False
    outside, listed = {"status_code": 200, "body": body(item("k"))}, {}
    _read_list_body(outside, listed)  # not a call of list_page's
    assert outside["body"] == body(item("k")) and listed == {}


def test_pages_equal_botocores_over_moto_server(moto_endpoint: str) -> None:
    """Keys XML cannot carry, several pages and a delimiter: the store's page is botocore's page."""
    client = boto3.client("s3", endpoint_url=moto_endpoint)
    bucket = "evs-listing-equal"
    client.create_bucket(Bucket=bucket)
    keys = [f"r/sessions/s/{i:020d}" for i in range(1, 6)] + ["r/sessions/s/we ird+&<key>%\u2713", "r/sessions/t/x", "r/z"]
    for key in keys:
        client.put_object(Bucket=bucket, Key=key, Body=key.encode())
    store = S3Store(bucket, endpoint_url=moto_endpoint, direct_requests=False)  # botocore's LISTs, with our hook
    parsed_by_us: list[bool] = []
    store.client.meta.events.register(
        "after-call.s3.ListObjectsV2", lambda parsed, **_: parsed_by_us.append(_LISTED in parsed)
    )
    # the store's own client answers any other caller as botocore does
    assert [c["Key"] for c in store.client.list_objects_v2(Bucket=bucket, Prefix="r/")["Contents"]] == sorted(keys)
    assert parsed_by_us == [False]
    parsed_by_us.clear()
    for max_keys, delimiter, first in ((3, "", ""), (1000, "/", ""), (1000, "", "r/sessions/s/00000000000000000004")):
        start, seen = first, []
        while True:
            page = store.list_page("r/", max_keys=max_keys, delimiter=delimiter, start_after=start)
            assert parsed_by_us == [True], "list_page read the body itself"
            parsed_by_us.clear()
            request: dict[str, Any] = {"Bucket": bucket, "Prefix": "r/", "MaxKeys": max_keys}
            if start:
                request["StartAfter"] = start
            if delimiter:
                request["Delimiter"] = delimiter
            theirs = client.list_objects_v2(**request)
            assert [(o.key, o.size, o.etag, o.last_modified) for o in page.objects] == [
                (c["Key"], c["Size"], c["ETag"], c["LastModified"]) for c in theirs.get("Contents", [])
            ]
            assert page.prefixes == [p["Prefix"] for p in theirs.get("CommonPrefixes", [])]
            assert page.truncated == theirs["IsTruncated"]
            seen += [o.key for o in page.objects]
            if not page.truncated:
                break
            start = page.next_start_after
        if not delimiter:
            assert seen == sorted(k for k in keys if k > first)


# ---- the plain Contents read by a regular expression, the rest by ElementTree -------------------

_KEY_TEXT = st.sampled_from(["r/sessions/a/00000000000000000001", "a%2Fb", "a+b", "a%26b", "a&amp;b", "a<b", "k\x01", "k\r", "é"])
_ETAG = st.sampled_from(["&quot;abc&quot;", '"abc"', "abc-2", "&amp;x", "&#34;x&#34;", "&quot;a\tb&quot;"])
_PLAIN_EXTRA = ["", "<ChecksumAlgorithm>CRC32</ChecksumAlgorithm>", "<Type>Normal</Type>", "<Owner><ID>x</ID></Owner>"]
_EXTRA = st.sampled_from([*_PLAIN_EXTRA, " ", "\n", "<!-- c -->"])  # the last three: a body read whole by the tree
_PREFIXES = "<CommonPrefixes><Prefix>p%20q/</Prefix></CommonPrefixes>"


@st.composite
def _contents(draw: st.DrawFn) -> str:
    key, etag = draw(_KEY_TEXT), draw(_ETAG)
    modified = draw(st.sampled_from(["2026-12-04T10:00:00.123Z", "2026-12-04T10:00:01Z", "never"]))
    size = draw(st.sampled_from(["12", "0012", "-1"]))
    before, after = draw(_EXTRA), draw(_EXTRA)
    return (
        f"<Contents><Key>{key}</Key><LastModified>{modified}</LastModified><ETag>{etag}</ETag>{before}"
        f"<Size>{size}</Size>{after}<StorageClass>STANDARD</StorageClass></Contents>"
    )


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(
    st.lists(st.one_of(_contents(), st.just(_PREFIXES), st.just("\n")), max_size=6),
    st.sampled_from(["<EncodingType>url</EncodingType>", "", "<EncodingType>base64</EncodingType>"]),
    st.sampled_from([NS, "", 'xmlns:s3="http://s3.amazonaws.com/doc/2006-03-01/"']),
)
def test_reading_the_plain_contents_apart_gives_elementtrees_page(parts: list[str], encoding: str, ns: str) -> None:
    """Whatever the mix of plain and other Contents, entities, whitespace, comments and prefixes,
    ``parse_list_body`` answers exactly as the whole body parsed by ElementTree does."""
    data = body("".join(parts), encoding=encoding, ns=ns)
    whole = _parse_tree(data, _parse_timestamp)
    assert parse_list_body(data, _parse_timestamp) == (None if whole is None else whole[0])


@pytest.mark.slow
@settings(max_examples=1000, deadline=None)
@given(st.text(alphabet="%2Ff+/a9 ~-_.E", max_size=24))
def test_a_plain_key_is_url_decoded_as_unquote_plus_decodes_it(key: str) -> None:
    """The fast path for keys whose only escape is ``%2F`` answers what ``unquote_plus`` does, for
    any mix of escapes, stray ``%``, lower-case hex and ``+``."""
    assert _url_decoded(key.encode()) == urllib.parse.unquote_plus(key)


def test_a_page_of_plain_contents_is_read_apart_from_the_tree() -> None:
    """The pages S3, RGW and moto send take the regular expression's path (and read the same)."""
    rgw = item("r%2Fsessions%2Fa%2F00000000000000000001").replace("</Contents>", "<Type>Normal</Type></Contents>")
    moto = (
        '<Contents><Key>r/sessions/a/2</Key><LastModified>2026-12-04T10:00:00.000Z</LastModified><ETag>"9d"</ETag>'
        "<ChecksumAlgorithm>CRC32</ChecksumAlgorithm><Size>1</Size><StorageClass>STANDARD</StorageClass></Contents>"
    )
    data = body(rgw * 3 + moto)
    plain = _plain_contents(data)
    assert plain is not None and len(plain[0]) == 4
    page = parse_list_body(data, _parse_timestamp)
    whole = _parse_tree(data, _parse_timestamp)
    assert page is not None and whole is not None and page == whole[0]
    first = ("r/sessions/a/00000000000000000001", '"abc"')
    assert [(o.key, o.etag) for o in page.objects] == [first] * 3 + [("r/sessions/a/2", '"9d"')]
    assert _plain_contents(data.replace(b"<Type>", b"\n<Type>")) is None  # whitespace: read by the tree


# ---- botocore's check for an error in a 200 answer, once per body ------------------------------


def test_a_page_the_store_reads_is_not_parsed_again_by_botocores_error_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """botocore parses every non-streaming S3 answer of 200 whole to see whether it is an
    ``Error`` document. On the store's own client a LIST page that ``parse_list_body`` read is a
    ``ListBucketResult`` and is not parsed again; an error document (or a body it does not read),
    and every other operation's answer, still meet botocore's check (200 becomes 500: retried)."""
    import botocore.handlers

    checked: list[bytes] = []
    check = botocore.handlers._looks_like_special_case_error

    def counted(status: int, data: bytes) -> bool:
        checked.append(data)
        return bool(check(status, data))

    monkeypatch.setattr(botocore.handlers, "_looks_like_special_case_error", counted)
    client = S3Store("b", endpoint_url="http://127.0.0.1:1").client
    listing = client.meta.service_model.operation_model("ListObjectsV2")

    def answer(data: bytes, operation: Any = listing) -> tuple[dict[str, Any], dict[str, Any]]:
        response: dict[str, Any] = {"status_code": 200, "body": data, "headers": {}}
        customized: dict[str, Any] = {}
        client.meta.events.emit(
            f"before-parse.s3.{operation.name}",
            operation_model=operation,
            response_dict=response,
            customized_response_dict=customized,
        )
        return response, customized

    error = b"<Error><Code>InternalError</Code><Message>x</Message></Error>"
    _listing.active = True
    try:
        response, customized = answer(body(item("k")))
        assert response["status_code"] == 200 and _LISTED in customized and checked == []
        response, customized = answer(error)
        assert response["status_code"] == 500 and _LISTED not in customized and checked == [error]
    finally:
        _listing.active = False
    response, _ = answer(body(item("k")))  # not a call of list_page's: botocore's answer, checked
    assert response["status_code"] == 200 and len(checked) == 2
    response, _ = answer(error, client.meta.service_model.operation_model("DeleteObjects"))
    assert response["status_code"] == 500 and len(checked) == 3
    other = boto3.client("s3", region_name="us-east-1")  # a client made elsewhere keeps botocore's handlers
    assert botocore.handlers._handle_200_error in list(other.meta.events._emitter._handlers.prefix_search("before-parse.s3.X"))


# ---- keys and ETags alone (``list_etags``) ---------------------------------------------------


def _tree_keys_etags(data: bytes) -> KeysPage | None:
    """The keys (URL-decoded where the body says so) and ETags of a body's ``Contents``, read by
    ElementTree alone, whatever else the body holds; None when it is no XML."""
    try:
        root = ElementTree.fromstring(data)
    except ElementTree.ParseError:
        return None
    ns = root.tag[: root.tag.index("}") + 1] if root.tag.startswith("{") else ""
    decode = urllib.parse.unquote_plus if root.findtext(f"{ns}EncodingType") == "url" else str
    contents = root.findall(f"{ns}Contents")
    return KeysPage(
        [decode(item.findtext(f"{ns}Key") or "") for item in contents],
        [item.findtext(f"{ns}ETag") or "" for item in contents],
        root.findtext(f"{ns}IsTruncated") == "true",
    )


@pytest.mark.slow
@settings(max_examples=1000, deadline=None)
@given(
    st.lists(st.one_of(_contents(), st.just(_PREFIXES), st.just("\n")), max_size=6),
    st.sampled_from(["<EncodingType>url</EncodingType>", "", "<EncodingType>base64</EncodingType>"]),
    st.sampled_from([NS, "", 'xmlns:s3="http://s3.amazonaws.com/doc/2006-03-01/"']),
    st.sampled_from(["true", "false", "maybe"]),
)
def test_keys_and_etags_read_apart_are_the_pages(parts: list[str], encoding: str, ns: str, truncated: str) -> None:
    """Where ``parse_list_body`` reads a body, ``parse_etags_body`` gives its keys and ETags;
    where it answers a body that ``parse_list_body`` leaves to botocore (a size or a time it does
    not read), they are the keys and ETags the XML holds; never another answer."""
    data = body("".join(parts), encoding=encoding, ns=ns, truncated=truncated)
    page = parse_list_body(data, _parse_timestamp)
    fast = parse_etags_body(data, _parse_timestamp)
    if page is not None:
        assert fast == KeysPage.of(page.objects, page.truncated)
    elif fast is not None:
        assert fast == _tree_keys_etags(data)


def test_the_pages_s3_rgw_and_moto_send_are_read_for_their_etags_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plain pages never reach ``parse_list_body`` (no ``ObjectInfo`` made), with keys decoded
    at once or, where one needs more than "%2F", key by key."""
    rgw = item("r%2Fsessions%2Fa%2F00000000000000000001").replace("</Contents>", "<Type>Normal</Type></Contents>")
    moto = (
        '<Contents><Key>r/sessions/a/2</Key><LastModified>2026-12-04T10:00:00.000Z</LastModified><ETag>"9d"</ETag>'
        "<ChecksumAlgorithm>CRC32</ChecksumAlgorithm><Size>1</Size><StorageClass>STANDARD</StorageClass></Contents>"
    )
    plain, escaped = body(rgw * 3 + moto, truncated="true"), body(item("a+b%2Bc%26%3C%25%E2%9C%93") + moto)
    expected = [parse_list_body(data, _parse_timestamp) for data in (plain, escaped)]

    monkeypatch.setattr(_s3_listing, "parse_list_body", lambda *_: pytest.fail("read by parse_list_body"))
    for data, page in zip((plain, escaped), expected, strict=True):
        assert page is not None and parse_etags_body(data, _parse_timestamp) == KeysPage.of(page.objects, page.truncated)
    assert parse_etags_body(plain, _parse_timestamp) == KeysPage(
        ["r/sessions/a/00000000000000000001"] * 3 + ["r/sessions/a/2"], ['"abc"'] * 3 + ['"9d"'], True
    )
    assert parse_etags_body(escaped, _parse_timestamp) == KeysPage(["a b+c&<%\u2713", "r/sessions/a/2"], ['"abc"', '"9d"'], False)


@pytest.mark.parametrize("direct", [True, False])
def test_list_etags_equals_botocores_listing_over_moto_server(
    moto_endpoint: str, direct: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Direct requests (each page read for its keys and ETags alone, never by ``parse_list_body``)
    and botocore's: the keys and ETags botocore lists, page by page."""
    client = boto3.client("s3", endpoint_url=moto_endpoint)
    bucket = f"evs-list-etags-{int(direct)}"
    client.create_bucket(Bucket=bucket)
    keys = [f"r/s/{i:020d}" for i in range(1, 6)] + ["r/s/we ird+&<key>%\u2713", "r/s/manifest", "r/z"]
    for key in keys:
        client.put_object(Bucket=bucket, Key=key, Body=key.encode())
    store = S3Store(bucket, endpoint_url=moto_endpoint, direct_requests=direct)
    store.list_page("r/")  # direct requests learn the server from botocore's first answer
    if direct:
        monkeypatch.setattr(_s3_listing, "parse_list_body", lambda *_: pytest.fail("read by parse_list_body"))
    for start_after in ("", "r/s/00000000000000000003"):
        page = store.list_etags("r/s/", start_after=start_after, max_keys=4)
        request: dict[str, Any] = {"Bucket": bucket, "Prefix": "r/s/", "MaxKeys": 4}
        if start_after:
            request["StartAfter"] = start_after
        theirs = client.list_objects_v2(**request)
        contents = theirs.get("Contents", [])
        assert page == KeysPage([c["Key"] for c in contents], [c["ETag"] for c in contents], theirs["IsTruncated"])
