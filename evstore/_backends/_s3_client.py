"""The boto3 client an ``S3Store`` makes for itself (``own_client``), and how it is tuned.

botocore makes one attempt per call (evstore retries: see ``_s3``). The client parses the ISO 8601
UTC timestamps of LIST bodies with ``datetime.fromisoformat`` (``_parse_timestamp``) instead of
botocore's dateutil parser: about 45 ms of CPU less per LIST of 400 keys; and it reads LIST bodies
itself (``_s3_listing``): a third of botocore's CPU for a page. A client passed in to ``S3Store``
is left as it is.

Once botocore has sent one GET or LIST over the wire, the store's GETs, LISTs and conditional
creates go out through ``_s3_direct`` (signed there, on a urllib3 pool of their own: about a
third of botocore's CPU for a GET or a create), botocore answering what they do not; see that module.
"""

from __future__ import annotations

import datetime
import os
import re
import threading
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import boto3
import botocore.handlers
import botocore.httpsession
import botocore.utils
from botocore.config import Config

from ._base import ObjectInfo
from ._s3_direct import DirectRequests
from ._s3_listing import ListedPage, parse_list_body

#: Connections botocore's pool keeps per endpoint. At least the threads that make requests at
#: once: ``AsyncStore``'s workers (256 by default) and the ``Store``'s own pool for reads
#: (2 x ``concurrency``, 64 by default), rounded up so that a raised concurrency fits too. urllib3
#: opens connections on demand, so an unused bound costs nothing; a request beyond the bound opens
#: a connection of its own and drops it after (a TCP and TLS handshake per request).
DEFAULT_MAX_POOL_CONNECTIONS = 512


#: ISO 8601 in UTC as S3 writes it in LIST bodies (``2026-12-01T23:00:00.000Z``): ASCII digits,
#: at most 9 fractional digits, ``Z`` or ``+00:00``.
_ISO_UTC = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?(?:Z|\+00:00)")


#: RFC 1123 in GMT as S3 writes it in ``Last-Modified`` headers (``Tue, 01 Dec 2026 23:00:00 GMT``).
_RFC1123_GMT = re.compile(
    r"(Mon|Tue|Wed|Thu|Fri|Sat|Sun), ([0-9]{2}) (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) "
    r"([0-9]{4}) ([0-9]{2}):([0-9]{2}):([0-9]{2}) GMT"
)
_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def _parse_timestamp(value: Any) -> datetime.datetime:
    """botocore's ``parse_timestamp``, fast for ISO 8601 in UTC (LIST bodies) and for RFC 1123
    in GMT whose weekday is its date's (``Last-Modified`` headers): the same instant, an aware
    datetime at offset zero (``datetime.UTC``; botocore's own tzinfo object depends on the
    machine's zone), fractional seconds truncated to microseconds as botocore's. Any other
    value (other offsets, epoch seconds, what fromisoformat or ``datetime`` refuses, RFC 1123
    with a year before 1000 or a weekday that is not its date's) goes to botocore's parser, so
    its answer and its errors are botocore's."""
    if isinstance(value, str):
        if _ISO_UTC.fullmatch(value):
            try:
                return datetime.datetime.fromisoformat(value)
            except ValueError:
                pass  # hour 24, a leap second, day 31 of a short month: botocore decides
        elif (found := _RFC1123_GMT.fullmatch(value)) and found[4] >= "1000":  # dateutil reads 0099 as 1999
            weekday, day, month, year, hour, minute, second = found.groups()
            try:
                moment = datetime.datetime(
                    int(year), _MONTHS.index(month) + 1, int(day), int(hour), int(minute), int(second), tzinfo=datetime.UTC
                )
            except ValueError:
                pass  # day 31 of a short month, hour 24, a leap second: botocore decides
            else:
                if _DAYS[moment.weekday()] == weekday:
                    return moment
    parsed: datetime.datetime = botocore.utils.parse_timestamp(value)
    return parsed


#: Where ``_read_list_body`` leaves the page it read, in the response botocore returns.
_LISTED = "EvstoreListedPage"
#: ``_listing.active`` is set while ``S3Store.list_page`` calls ListObjectsV2 in this thread: only
#: those calls are read by ``_read_list_body``, so other uses of the client get botocore's answer.
_listing = threading.local()


def _read_list_body(response_dict: dict[str, Any], customized_response_dict: dict[str, Any], **_: Any) -> bool:
    """botocore's ``before-parse`` hook for ListObjectsV2 on a client of the store's own: during
    ``list_page``, a page that ``parse_list_body`` reads is handed over whole under ``_LISTED`` and
    botocore is left an empty body to parse; any other response (another caller's, an error, a
    body it does not read) goes to botocore as sent. Whether it took the page."""
    if not getattr(_listing, "active", False):
        return False
    if response_dict.get("status_code") != 200 or not isinstance(body := response_dict.get("body"), bytes):
        return False
    page = parse_list_body(body, _parse_timestamp)
    if page is None:
        return False
    customized_response_dict[_LISTED] = page
    response_dict["body"] = b""
    return True


#: botocore's check of every S3 answer of 200 for an error in its body (S3 can answer 200 with an
#: ``Error`` document): it parses the whole body with ElementTree, a LIST page of 1,000 keys
#: included, which ``parse_list_body`` then reads again. Where botocore has it (a private name),
#: the store's own client runs it through ``_before_parse``; else it stays as botocore set it.
_CHECK_200 = getattr(botocore.handlers, "_handle_200_error", None)


def _before_parse(
    response_dict: dict[str, Any], customized_response_dict: dict[str, Any], operation_model: Any, **kwargs: Any
) -> None:
    """In place of botocore's ``_CHECK_200`` on the store's own client: a LIST page that
    ``_read_list_body`` takes is a ``ListBucketResult`` that parsed whole, so no error document;
    every other answer is checked by botocore as before."""
    if getattr(operation_model, "name", "") == "ListObjectsV2" and _read_list_body(response_dict, customized_response_dict):
        return
    assert _CHECK_200 is not None
    _CHECK_200(
        response_dict=response_dict,
        customized_response_dict=customized_response_dict,
        operation_model=operation_model,
        **kwargs,
    )


def direct_wanted(asked: bool | None) -> bool:
    """Whether a store that makes its own client sends requests directly (``_s3_direct``):
    as asked, else unless ``EVSTORE_DIRECT_REQUESTS=0``; never where botocore would use a proxy
    (any ``*_proxy`` variable but ``no_proxy``), which direct requests do not."""
    wanted = os.environ.get("EVSTORE_DIRECT_REQUESTS", "1").strip() != "0" if asked is None else asked
    return wanted and not any(scheme != "no" for scheme in urllib.request.getproxies())


def own_client(
    endpoint_url: str | None,
    *,
    retry_mode: str | None,
    connect_timeout: float,
    read_timeout: float,
    max_pool_connections: int,
    direct_requests: bool | None,
    count: Callable[[str], None],
) -> tuple[Any, DirectRequests | None]:
    """A client of a boto3 session of its own, tuned as the module docstring says, and the
    direct requests that go beside it (``direct_wanted``; None when they do not), which
    ``count`` each request they send to."""
    session = boto3.session.Session()
    # botocore makes one attempt (no shared retry quota to drain); its mode still applies,
    # so AWS_RETRY_MODE=adaptive keeps botocore's client-side rate limiting
    mode = retry_mode or session._session.get_config_variable("retry_mode") or "standard"
    config = Config(
        retries={"mode": mode, "total_max_attempts": 1},
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        max_pool_connections=max_pool_connections,
        s3={"addressing_style": "path"} if endpoint_url else {},
    )
    # on this session only (its own parser factory): a client made elsewhere keeps botocore's
    session._session.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=_parse_timestamp)
    client = session.client("s3", endpoint_url=endpoint_url, config=config)
    if _CHECK_200 is not None:
        client.meta.events.unregister("before-parse.s3.*", _CHECK_200)
        client.meta.events.register_first("before-parse.s3.*", _before_parse)
    else:
        client.meta.events.register("before-parse.s3.ListObjectsV2", _read_list_body)
    direct = None
    if direct_wanted(direct_requests):
        direct = _direct_beside(session, client, connect_timeout, read_timeout, max_pool_connections, count)
    return client, direct


def _direct_beside(
    session: Any, client: Any, connect_timeout: float, read_timeout: float, max_connections: int, count: Callable[[str], None]
) -> DirectRequests:
    signer = client._request_signer

    def credentials() -> Any:
        found = signer._credentials
        return None if found is None else found.get_frozen_credentials()

    direct = DirectRequests(
        credentials,
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        max_connections=max_connections,
        ca_bundle=session._session.get_config_variable("ca_bundle") or botocore.httpsession.get_cert_path(True),
        parse_timestamp=_parse_timestamp,
        count=count,
    )
    for operation in ("GetObject", "ListObjectsV2"):
        client.meta.events.register(f"before-send.s3.{operation}", lambda request, **_: direct.observe_sent(request))
        client.meta.events.register(
            f"after-call.s3.{operation}", lambda http_response, **_: direct.observe_answered(http_response)
        )
    return direct


@contextmanager
def reading_list_bodies() -> Iterator[None]:
    """While this thread calls ListObjectsV2 inside: the pages ``_read_list_body`` reads itself."""
    _listing.active = True
    try:
        yield
    finally:
        _listing.active = False


def listed_page(response: dict[str, Any]) -> ListedPage:
    """The page of a ListObjectsV2 ``response``: as ``_read_list_body`` read it, else from botocore's dicts."""
    listed = response.get(_LISTED)
    if isinstance(listed, ListedPage):
        return listed
    return ListedPage(
        [
            ObjectInfo(item["Key"], int(item["Size"]), str(item.get("ETag", "")), item["LastModified"])
            for item in response.get("Contents", [])
        ],
        [str(item["Prefix"]) for item in response.get("CommonPrefixes", [])],
        bool(response.get("IsTruncated")),
    )
