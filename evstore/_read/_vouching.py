"""Which events a segment is trusted for, decided in one place.

A segment is derived: anyone who may create objects can plant one. It stands for the loose
events it covers only when it passes its own check (``_checked_segment``: a run of this
session's events that chain to each other), continues the segment before it (``_continues``),
and every event of it is, by its MD5, the loose event a LIST page names at its seq
(``_listed_md5s``, ``_vouched``). Anything else is read from the loose events, which always
remain. Pure but for the LIST of ``_listed_md5s``.
"""

from __future__ import annotations

import hashlib
import itertools
import re
import time

from .._backends import KeysPage, ListPage
from .._codec import MAX_SEGMENT_BYTES, Envelope, Manifest, decode_envelope, expand_segment, segment_offsets
from .._context import StoreContext
from .._errors import IntegrityError
from .._ids import SEQ_WIDTH, parse_seq
from ._events import RawEvent
from ._manifest import _LISTED

_sha256 = hashlib.sha256
_md5 = hashlib.md5

#: Checking a segment holds the GIL; it gives it up (``time.sleep(0)``, about 90 us) every this
#: many events. A thread that waits for it (one reading a GET's body, one sending a GET) would
#: otherwise wait up to a switch interval (5 ms) for it at every read of its socket.
_YIELD_EVERY = 256

#: ETags joined by "<", each a quoted MD5 (``_content_md5`` reads each as its hex digits, lower-cased).
_QUOTED_MD5S = re.compile(r'"[0-9a-fA-F]{32}"(?:<"[0-9a-fA-F]{32}")*')


class _CheckedSegment:
    """A segment that passed its own check (``_checked_segment``): its bytes, where each event
    starts, each event's envelope (decoded in the check, while the next segments are still on
    their way), hash and MD5 (what a listing's ETag of its loose object is), and the ``prev``
    its first event names."""

    __slots__ = ("data", "envelopes", "first", "first_prev", "hashes", "md5s", "offsets")

    def __init__(
        self,
        data: bytes,
        first: int,
        first_prev: str,
        offsets: list[int],
        hashes: list[str],
        envelopes: list[Envelope],
        md5s: list[str],
    ) -> None:
        self.data = data
        self.first = first
        self.first_prev = first_prev
        self.offsets = offsets
        self.hashes = hashes
        self.envelopes = envelopes
        self.md5s = md5s

    def events(self, manifest: Manifest, low: int, high: int) -> list[RawEvent]:
        """Its events ``low`` to ``high - 1`` (indexes from its first)."""
        sid, data, offsets, hashes, envelopes = manifest.sid, self.data, self.offsets, self.hashes, self.envelopes
        return [
            RawEvent(sid, self.first + index, data[offsets[index] : offsets[index + 1]], envelopes[index], hashes[index])
            for index in range(low, high)
        ]


def _checked_segment(manifest: Manifest, first: int, last: int, data: bytes | None) -> _CheckedSegment | None:
    """The segment (its stored bytes, ``data``), checked on its own, or None when it is missing,
    does not decompress within ``MAX_SEGMENT_BYTES``, or is not a run of this session's events
    from ``first`` to ``last`` that chain to each other.

    One pass, without copying: each event is decoded and checked as a loose event is
    (``decode_envelope``), its bytes hashed once (SHA-256 and MD5) and its ``prev`` compared
    with the hash of the one before it. An event that does not decode fails the segment (the
    loose events stand for it, and their own decode answers). A segment is derived: what this
    check cannot tell (whether these are the session's true events) ``_vouched`` tells, against
    the listing of the loose events it covers.
    """
    if data is None or (data := expand_segment(data, MAX_SEGMENT_BYTES)) is None:
        return None
    sid, uid = manifest.sid, manifest.uid
    try:
        offsets = segment_offsets(data, sid, uid, first, last)
    except IntegrityError:
        return None  # not a segment evstore wrote
    view = memoryview(data)
    hashes: list[str] = []
    md5s: list[str] = []
    envelopes: list[Envelope] = []
    prev: str | None = None
    first_prev = ""
    seq = first
    try:
        for start, stop in itertools.pairwise(offsets):
            raw = view[start:stop]
            envelope = decode_envelope(raw, sid, seq)
            if envelope.uid != uid or (prev is not None and envelope.prev != prev):
                return None
            if prev is None:
                first_prev = envelope.prev
            prev = _sha256(raw).hexdigest()
            hashes.append(prev)
            md5s.append(_md5(raw, usedforsecurity=False).hexdigest())
            envelopes.append(envelope)
            seq += 1
            if not seq % _YIELD_EVERY:
                time.sleep(0)  # gives up the GIL (see ``_YIELD_EVERY``)
    except IntegrityError:
        return None
    return _CheckedSegment(data, first, first_prev, offsets, hashes, envelopes, md5s)


def _continues(before: _CheckedSegment, after: _CheckedSegment) -> bool:
    """Whether ``after``'s events continue ``before``'s last: its first event names that event's
    hash, or (segments of a chain may overlap) its own event at that seq has that hash."""
    before_last = before.first + len(before.hashes) - 1
    if after.first == before_last + 1:
        return after.first_prev == before.hashes[-1]
    return after.first <= before_last < after.first + len(after.hashes) and (
        after.hashes[before_last - after.first] == before.hashes[-1]
    )


def _content_md5(etag: str) -> str:
    """The MD5 (lowercase hex) that a listed ETag states of the object's bytes, or "" when it
    states none: a multipart ETag (``-``), an empty one, anything but 32 hex digits. An ETag
    that is 32 hex digits but not the MD5 (SSE-KMS) just never matches an event's."""
    digest = etag.strip('"').lower()
    # every character a hex digit: stripping them leaves nothing (a third of the time of a loop)
    return digest if len(digest) == 32 and not digest.strip("0123456789abcdef") else ""


def _listed_md5s(ctx: StoreContext, session_id: str, after: int) -> dict[int, str]:
    """The content MD5 (``_content_md5``) of each loose event on one LIST page of up to 1,000
    names after seq ``after``, by seq: one LIST, of keys and ETags alone (``list_etags``)."""
    prefix = ctx.layout.session_prefix(session_id)
    page = ctx.backend.list_etags(prefix, start_after=ctx.layout.event_key(session_id, after), max_keys=_LISTED)
    return _md5s_by_seq(prefix, page)


def _md5s_of(prefix: str, page: ListPage) -> dict[int, str]:
    """``_listed_md5s`` of a page already listed. Pure."""
    return _md5s_by_seq(prefix, KeysPage.of(page.objects, page.truncated))


def _md5s_by_seq(prefix: str, page: KeysPage) -> dict[int, str]:
    """The content MD5 that each ETag states, by the seq its key names under ``prefix`` (keys that
    name none are left out). Pure.

    A page of events alone whose ETags are all plain MD5s (the common page) is read in a few
    passes over the whole of it; any other key by key (``parse_seq``, ``_content_md5``)."""
    skip, etags = len(prefix), page.etags
    names = [key[skip:] for key in page.keys]
    digits = "".join(names)
    if set(map(len, names)) == {SEQ_WIDTH} and digits.isascii() and digits.isdigit():
        quoted = "<".join(etags)
        if _QUOTED_MD5S.fullmatch(quoted):
            return dict(zip(map(int, names), quoted.replace('"', "").lower().split("<"), strict=True))
    listed: dict[int, str] = {}
    for name, etag in zip(names, etags, strict=True):
        if (seq := parse_seq(name)) is not None:
            listed[seq] = _content_md5(etag)
    return listed


def _vouched(segments: list[_CheckedSegment | None], listed: dict[int, str], start: int, end: int | None) -> bool:
    """Whether a group of consecutive segments stands for the loose events from seq ``start``
    (to ``end``): each passed its own check, each continues the one before (``_continues``),
    and every event of theirs from ``start`` on is, by its MD5, the loose event listed at its
    seq (``listed``, from ``_listed_md5s``).

    The check is every event, not one at an end: the writer role may create loose events past
    the true head (free seqs), so a forged run can end on planted loose events that match it,
    however many; but from the first seq where it departs from the true history to the true
    head, each of its events differs from the loose one at its seq (each names the hash of the
    one before), and those loose events cannot be replaced. A seq not listed, or whose ETag
    states no MD5, fails the group: its loose events are read instead."""
    if any(segment is None for segment in segments):
        return False
    checked = [segment for segment in segments if segment is not None]
    if not all(_continues(before, after) for before, after in itertools.pairwise(checked)):
        return False
    for segment in checked:
        last = segment.first + len(segment.md5s) - 1
        if end is not None:
            last = min(last, end)
        md5s = segment.md5s
        for seq in range(max(start, segment.first), last + 1):
            if listed.get(seq) != md5s[seq - segment.first]:
                return False
        start = max(start, last + 1)
    return True
