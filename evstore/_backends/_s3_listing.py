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
"""

from __future__ import annotations

import datetime
import urllib.parse
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable

import msgspec

from ._base import ObjectInfo

_NAMESPACE = "{http://s3.amazonaws.com/doc/2006-03-01/}"


class ListedPage(msgspec.Struct, frozen=True):
    """One LIST page as the server sent it: keys and prefixes decoded, in the server's order."""

    objects: list[ObjectInfo]
    prefixes: list[str]
    truncated: bool


def parse_list_body(body: bytes, parse_timestamp: Callable[[str], datetime.datetime]) -> ListedPage | None:
    """The page a ``ListBucketResult`` body holds, or None where botocore should decide.

    ``parse_timestamp`` reads ``LastModified`` (the store's own parser, so that a timestamp reads
    the same whichever parser read the page). Keys and prefixes are URL-decoded as botocore does
    (``unquote_plus``) when the body says ``EncodingType`` is ``url``: botocore asks for that
    encoding on every LIST it sends, so keys that XML cannot carry arrive intact."""
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
    return ListedPage(objects, prefixes, truncated == "true")
