"""ListObjectsV2 response bodies read straight from their XML, for ``S3Store.list_page``.

botocore turns a LIST body into dicts by walking its service model for every element (plus a
timestamp parse and a URL-decode pass): about 13 ms of CPU for a page of 1,000 keys on a quiet
machine, more on servers that send more fields, while the same page read with ElementTree and
kept as ``ObjectInfo`` costs about a third of it. Resumes and replays list a page per 1,000 events
(the ETags that vouch for segments), so on long sessions this parse was most of the client's CPU.

``parse_list_body`` is pure: bytes in, ``ListedPage`` out, or None for any body it does not read
exactly as botocore would (not XML, another root element, a field missing or not a number, an
encoding other than ``url``); ``S3Store`` then leaves the body to botocore's parser, so an
unusual server costs time, never a different answer.

The ``Contents`` elements, a thousand to a full page, are most of a body. Where they are all of
the plain form that S3, RGW and moto send (``_PLAIN_CONTENTS``: URL-encoded keys, ASCII, no
whitespace between elements) and stand in one run, one regular expression reads them and
ElementTree parses only the rest of the body: about 3 ms instead of 4.3 for a page of 1,000 keys.
Any other form is parsed whole by ElementTree, as before (``_parse_tree``), and a test holds the
two to the same answers.
"""

from __future__ import annotations

import datetime
import re
import urllib.parse
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable

import msgspec

from ._base import KeysPage, ObjectInfo

_NAMESPACE = "{http://s3.amazonaws.com/doc/2006-03-01/}"


class ListedPage(msgspec.Struct, frozen=True):
    """One LIST page as the server sent it: keys and prefixes decoded, in the server's order."""

    objects: list[ObjectInfo]
    prefixes: list[str]
    truncated: bool


#: One ``Contents`` element of the plain form: Key, LastModified and ETag first, Size after any
#: other elements of text alone (the checksum's), then any such elements; text without ``<``, and
#: without entities but the ETag's (its quotes may come as ``&quot;``, the one entity read here).
_PLAIN_CONTENTS = re.compile(
    rb"<Contents><Key>([^<&]*)</Key><LastModified>([^<&]*)</LastModified><ETag>([^<]*)</ETag>"
    rb"(?:<([A-Za-z]+)>[^<&]*</\4>)*<Size>([0-9]+)</Size>(?:<([A-Za-z]+)>[^<&]*</\6>)*</Contents>"
)
#: Bytes XML does not take as they are in text: control characters (a line end is normalized).
_NOT_PLAIN = bytes([*range(9), *range(11, 32), 127])


def parse_list_body(body: bytes, parse_timestamp: Callable[[str], datetime.datetime]) -> ListedPage | None:
    """The page a ``ListBucketResult`` body holds, or None where botocore should decide.

    ``parse_timestamp`` reads ``LastModified`` (the store's own parser, so that a timestamp reads
    the same whichever parser read the page). Keys and prefixes are URL-decoded as botocore does
    (``unquote_plus``) when the body says ``EncodingType`` is ``url``: botocore asks for that
    encoding on every LIST it sends, so keys that XML cannot carry arrive intact."""
    plain = _plain_contents(body)
    if plain is not None:
        contents, rest = plain
        parsed = _parse_tree(rest, parse_timestamp)
        if parsed is not None and not parsed[0].objects and parsed[1]:
            return _with_contents(parsed[0], contents, parse_timestamp)
        # Contents of another form too, or keys not URL-encoded: read whole
    whole = _parse_tree(body, parse_timestamp)
    return None if whole is None else whole[0]


def _with_contents(
    page: ListedPage, contents: list[tuple[bytes, bytes, bytes, bytes]], parse_timestamp: Callable[[str], datetime.datetime]
) -> ListedPage | None:
    """``page`` (the rest of a body) with the objects of its plain ``Contents``, URL-encoded keys."""
    objects = []
    moments: dict[bytes, datetime.datetime] = {}  # a page's keys share a handful of timestamps
    for key, modified, etag, size in contents:
        if (moment := moments.get(modified)) is None:
            try:
                moment = moments[modified] = parse_timestamp(modified.decode())
            except (ValueError, OverflowError):
                return None
        objects.append(ObjectInfo(_url_decoded(key), int(size), etag.decode(), moment))
    return ListedPage(objects, page.prefixes, page.truncated)


def _url_decoded(key: bytes) -> str:
    """``unquote_plus`` of an ASCII key, a fifth of its cost for a key whose one escape is the
    ``%2F`` of its slashes (every evstore key: ``_slashes_decoded``)."""
    decoded = _slashes_decoded(key)
    return urllib.parse.unquote_plus(key.decode()) if decoded is None else decoded


def _slashes_decoded(key: bytes) -> str | None:
    """``unquote_plus`` of ASCII text whose one escape is ``%2F``, or None when it holds another: what
    remains once those are decoded holds no ``%`` and no ``+``, the only characters it changes."""
    slashed = key.replace(b"%2F", b"/")
    return None if b"%" in slashed or b"+" in slashed else slashed.decode()


def _plain_contents(body: bytes) -> tuple[list[tuple[bytes, bytes, bytes, bytes]], bytes] | None:
    """(key, LastModified, ETag, Size) of each ``Contents`` element and the body without them, when
    the body is plain text (``_plain_text``), every one is of the plain form (``_PLAIN_CONTENTS``)
    and they stand in one run; else None."""
    if not _plain_text(body):
        return None
    matches = list(_PLAIN_CONTENTS.finditer(body))
    if not matches or len(matches) != body.count(b"<Contents"):
        return None
    run = matches[-1].end() - matches[0].start()
    if run != sum(m.end() - m.start() for m in matches):
        return None  # something stands between two of them
    contents = [(m[1], m[2], m[3].replace(b"&quot;", b'"'), m[5]) for m in matches]
    if any(b"&" in etag for _, _, etag, _ in contents):
        return None
    return contents, body[: matches[0].start()] + body[matches[-1].end() :]


def _plain_text(body: bytes) -> bool:
    """Whether a body is ASCII without a control character, a comment, CDATA, a DOCTYPE or a
    processing instruction past its declaration: text in which a regular expression's match of
    elements is what ElementTree reads as those elements."""
    if not body.isascii() or b"<!" in body or body.count(b"<?") > body.startswith(b"<?xml "):
        return False
    return len(body.translate(None, _NOT_PLAIN)) == len(body)


#: How S3, RGW and moto begin a ``Contents`` element: its Key, LastModified and ETag, in that order,
#: their text without "<" (nor an entity, but in the ETag).
_KEY_ETAG = re.compile(rb"<Contents><Key>([^<&]*)</Key><LastModified>[^<&]*</LastModified><ETag>([^<]*)</ETag>")
_TRUNCATED = re.compile(rb"<IsTruncated>(true|false)</IsTruncated>")


def parse_etags_body(body: bytes, parse_timestamp: Callable[[str], datetime.datetime]) -> KeysPage | None:
    """The keys and ETags of a ListObjectsV2 body (``S3Store.list_etags``), or None where botocore
    should read it.

    Where the body is plain text (``_plain_text``) of one ``ListBucketResult`` of URL-encoded keys,
    and every ``Contents`` in it begins as S3, RGW and moto write it (``_KEY_ETAG``), one regular
    expression reads them all and each field is decoded for the whole page at once: under half of
    ``parse_list_body``'s time for 1,000 keys (2.3 ms against 5 to 6), with no ``ObjectInfo``, size
    or time (which it does not read). Any other body is read by ``parse_list_body``. Common
    prefixes are not kept (``list_etags`` lists with no delimiter)."""
    if _plain_text(body) and body.count(b"<ListBucketResult") == 1 and b"<EncodingType>url</EncodingType>" in body:
        found = _KEY_ETAG.findall(body)
        truncated = _TRUNCATED.findall(body)
        if found and len(found) == body.count(b"<Contents") and len(truncated) == 1 == body.count(b"<IsTruncated"):
            # no field holds "<": a field of every Contents joined by it and split again
            etags = b"<".join([etag for _, etag in found]).replace(b"&quot;", b'"')
            if b"&" not in etags:  # an entity but &quot;: read by the tree
                # the keys at once where their one escape is "%2F", else key by key
                keys = _slashes_decoded(b"<".join([key for key, _ in found]))
                decoded = keys.split("<") if keys is not None else [_url_decoded(key) for key, _ in found]
                return KeysPage(decoded, etags.decode().split("<"), truncated[0] == b"true")
    page = parse_list_body(body, parse_timestamp)
    return None if page is None else KeysPage.of(page.objects, page.truncated)


def _parse_tree(body: bytes, parse_timestamp: Callable[[str], datetime.datetime]) -> tuple[ListedPage, bool] | None:
    """``parse_list_body`` by ElementTree alone, and whether the keys were URL-encoded."""
    try:
        root = ElementTree.fromstring(body)
    except ElementTree.ParseError:
        return None
    ns = _NAMESPACE if root.tag.startswith("{") else ""
    if root.tag != f"{ns}ListBucketResult":
        return None
    encoding = root.findtext(f"{ns}EncodingType")
    if encoding not in (None, "url"):
        return None
    decode: Callable[[str], str] = urllib.parse.unquote_plus if encoding == "url" else str
    truncated = root.findtext(f"{ns}IsTruncated")
    if truncated not in ("true", "false"):
        return None
    key_tag, size_tag, etag_tag, modified_tag = f"{ns}Key", f"{ns}Size", f"{ns}ETag", f"{ns}LastModified"
    objects = []
    moments: dict[str, datetime.datetime] = {}  # a page's keys share a handful of timestamps
    for item in root.iterfind(f"{ns}Contents"):
        key, size, modified = item.findtext(key_tag), item.findtext(size_tag), item.findtext(modified_tag)
        if key is None or size is None or not size.isdigit() or not size.isascii() or modified is None:
            return None
        if (moment := moments.get(modified)) is None:
            try:
                moment = moments[modified] = parse_timestamp(modified)
            except (ValueError, OverflowError):
                return None
        objects.append(ObjectInfo(decode(key), int(size), item.findtext(etag_tag) or "", moment))
    prefixes = []
    for item in root.iterfind(f"{ns}CommonPrefixes"):
        prefix = item.findtext(f"{ns}Prefix")
        if prefix is None:
            return None
        prefixes.append(decode(prefix))
    return ListedPage(objects, prefixes, truncated == "true"), encoding == "url"
