"""S3Store's own client parses timestamps with ``_parse_timestamp``: botocore's answers, faster for
the ISO 8601 UTC of LIST bodies. A client passed in, and any other botocore client, keep botocore's."""

from __future__ import annotations

import datetime
from typing import Any

import boto3
import botocore.parsers
import botocore.utils
import pytest
from hypothesis import given
from hypothesis import strategies as st

from evstore._backends._s3 import S3Store
from evstore._backends._s3_client import _parse_timestamp

UTC = datetime.UTC

#: ISO 8601 in UTC (the fast path) and everything else (botocore's parser).
INPUTS = [
    "2026-12-01T23:00:00Z",
    "2026-12-01T23:00:00.000Z",
    "2026-12-01T23:00:00.1Z",
    "2026-12-01T23:00:00.12Z",
    "2026-12-01T23:00:00.123456Z",
    "2026-12-01T23:00:00.1234567Z",
    "2026-12-01T23:00:00.999999999Z",
    "2026-12-01T23:00:00+00:00",
    "2026-12-01T23:00:00.5+00:00",
    "2024-02-29T12:34:56.789Z",
    "1970-01-01T00:00:00Z",
    "0001-01-01T00:00:00Z",
    "9999-12-31T23:59:59.999999Z",
    "2026-12-01T23:00:00+02:00",
    "2026-12-01T23:00:00.25-05:30",
    "2026-12-01T23:00:00-00:00",
    "2026-12-01T23:00:00",
    "2026-12-01 23:00:00Z",
    "Tue, 01 Dec 2026 23:00:00 GMT",
    "Wed, 01 Dec 2026 23:00:00 GMT",
    "Thu, 29 Feb 2024 00:00:00 GMT",
    "Sat, 01 Jan 0001 00:00:00 GMT",
    "Wed, 01 Jan 0099 00:00:00 GMT",
    "Tue, 01 Jan 1000 00:00:00 GMT",
    "Fri, 31 Dec 9999 23:59:59 GMT",
    "Tue, 1 Dec 2026 23:00:00 GMT",
    "Tue, 01 Dec 2026 23:00:00 UTC",
    "tue, 01 dec 2026 23:00:00 GMT",
    "Tue, 01 Dec 2026 23:00:00 +0000",
    "1700000000",
    "1700000000.25",
    "20261201T230000Z",
]
#: Values fromisoformat refuses although they look like ISO 8601 in UTC: botocore decides.
REFUSED = [
    "Mon, 30 Feb 2026 00:00:00 GMT",
    "Tue, 01 Dec 2026 24:00:00 GMT",
    "2026-02-30T00:00:00Z",
    "2026-12-01T24:00:00Z",
    "2026-12-01T23:59:60Z",
    "not a time",
    "",
]


def _same(ours: datetime.datetime, theirs: datetime.datetime) -> None:
    """The same instant, the same offset, the same fields: only the tzinfo object may differ
    (botocore's is ``tzlocal()`` or ``tzutc()`` depending on the machine's zone)."""
    assert (ours.tzinfo is None) == (theirs.tzinfo is None)
    assert ours == theirs
    assert ours.utcoffset() == theirs.utcoffset()
    assert ours.replace(tzinfo=None) == theirs.replace(tzinfo=None)


@pytest.mark.parametrize("value", INPUTS)
def test_the_parser_answers_as_botocores(value: str) -> None:
    _same(_parse_timestamp(value), botocore.utils.parse_timestamp(value))


@pytest.mark.parametrize("value", [0, 1700000000, 1700000000.5])
def test_epoch_numbers_answer_as_botocores(value: float) -> None:
    _same(_parse_timestamp(value), botocore.utils.parse_timestamp(value))


@pytest.mark.parametrize("value", REFUSED)
def test_what_botocore_refuses_is_refused_alike(value: str) -> None:
    with pytest.raises(ValueError) as theirs:
        botocore.utils.parse_timestamp(value)
    with pytest.raises(ValueError) as ours:
        _parse_timestamp(value)
    assert str(ours.value) == str(theirs.value)


def test_a_list_timestamp_is_aware_utc() -> None:
    parsed = _parse_timestamp("2026-12-01T23:00:00.123Z")
    assert parsed.tzinfo is not None and parsed.utcoffset() == datetime.timedelta(0)
    assert parsed == datetime.datetime(2026, 12, 1, 23, 0, 0, 123000, tzinfo=UTC)


@given(
    moment=st.datetimes(timezones=st.just(UTC)),
    digits=st.integers(min_value=0, max_value=9),
    suffix=st.sampled_from(["Z", "+00:00"]),
)
def test_any_iso_utc_time_answers_as_botocores(moment: datetime.datetime, digits: int, suffix: str) -> None:
    fraction = f"{moment.microsecond:06d}{moment.microsecond % 1000:03d}"[:digits]
    value = moment.strftime("%Y-%m-%dT%H:%M:%S").rjust(19, "0") + (f".{fraction}" if digits else "") + suffix
    _same(_parse_timestamp(value), botocore.utils.parse_timestamp(value))


@given(moment=st.datetimes(timezones=st.just(UTC)), weekday=st.sampled_from(["", "Mon", "Sun"]))
def test_any_rfc_1123_gmt_time_answers_as_botocores(moment: datetime.datetime, weekday: str) -> None:
    day = weekday or moment.strftime("%a")  # its own weekday (the fast path), or maybe another (botocore's)
    value = f"{day}, {moment.day:02d} {moment.strftime('%b')} {moment.year:04d} {moment:%H:%M:%S} GMT"
    _same(_parse_timestamp(value), botocore.utils.parse_timestamp(value))


def _timestamp_parser(client: Any) -> object:
    # botocore makes a parser per response from the client's factory (private API: nothing public shows it)
    return client._endpoint._response_parser_factory.create_parser("rest-xml")._timestamp_parser


def test_only_the_client_evstore_makes_uses_it() -> None:
    own = S3Store("bucket", endpoint_url="http://127.0.0.1:9")
    assert _timestamp_parser(own.client) is _parse_timestamp
    given_client = boto3.session.Session().client("s3", endpoint_url="http://127.0.0.1:9", region_name="us-east-1")
    assert S3Store("bucket", client=given_client).client is given_client
    assert _timestamp_parser(given_client) is botocore.utils.parse_timestamp
    later = boto3.session.Session().client("s3", endpoint_url="http://127.0.0.1:9", region_name="us-east-1")
    assert _timestamp_parser(later) is botocore.utils.parse_timestamp
    assert botocore.parsers.DEFAULT_TIMESTAMP_PARSER is botocore.utils.parse_timestamp


def test_listed_and_read_times_equal_a_plain_clients(moto_endpoint: str) -> None:
    client = boto3.session.Session().client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    bucket = "evs-timestamps"
    client.create_bucket(Bucket=bucket)
    client.put_object(Bucket=bucket, Key="k/1", Body=b"x")
    store = S3Store(bucket, endpoint_url=moto_endpoint)
    listed = store.list_page("k/").objects[0].last_modified
    plain = client.list_objects_v2(Bucket=bucket, Prefix="k/")["Contents"][0]["LastModified"]
    _same(listed, plain)
    _same(store.get("k/1").last_modified, client.get_object(Bucket=bucket, Key="k/1")["LastModified"])
