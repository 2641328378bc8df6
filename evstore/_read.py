"""The read path: a session's manifest and listing -> a verified stream of events.

Decoding, session keys, the hash chain, segments, lineage across forks and
bounded prefetch live here; every function takes the shared ``StoreContext``.

Requests (N = events, S = segments):

* load: GET manifest, LIST of the non-event objects (names after the digits).
* find the head: one LIST from the newest segment (or seq 1) while fewer than
  1,000 events follow it (64 in a session with segments, two LISTs to 1,063:
  ``_TAIL_FIRST_PAGE``); beyond that, HEAD probes that gallop and bisect:
  O(log N) in the worst case. Names among the events that are no seqs cost at most a LIST
  page per 1,000 of them, and a run of ``<seq>~...`` names one page (``_ids.seq_after``).
* replay: load, one GET per segment and a LIST per 1,000 events the segments
  cover (the listing whose ETags vouch for them), 2 * concurrency requests and
  two groups' bytes in flight,
  with the LIST of the loose tail; then a LIST per 1,000 loose events and their GETs,
  ``2 * concurrency`` in flight.
* a fork whose manifest records its ancestry: its load; then, in one round on the context's wide
  pool, each ancestor's manifest GET and listing, the GETs of each inherited range of up to 32
  events, and the GETs of the fork's own events its first listing named; then the segments of a
  longer range (an ancestor's short loose tail to the fork seq by its seqs, no LIST): 3 dependent
  round trips at any depth (``_send_ahead``).
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import heapq
import itertools
import re
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from typing import TYPE_CHECKING

import msgspec

from ._backends import KeysPage, ListPage, ObjectInfo, ObjectMissing
from ._codec import (
    MAX_RECORD_BYTES,
    MAX_SEGMENT_BYTES,
    MAX_SMALL_OBJECT_BYTES,
    Body,
    Envelope,
    ForkRef,
    Manifest,
    Message,
    RekeyRecord,
    Retention,
    b64decode,
    b64decode_canonical,
    decode_body,
    decode_envelope,
    decode_manifest,
    expand_segment,
    fence_of,
    header_aad,
    segment_offsets,
    sha256_hex,
)
from ._context import FENCE_HOLD, StoreContext
from ._crypto import derive_session_key, open_sealed
from ._errors import (
    IntegrityError,
    InvalidInputError,
    KeyRequiredError,
    SessionExpiredError,
    SessionNotFoundError,
)
from ._ids import (
    MAX_SEQ,
    SEQ_WIDTH,
    YOUNG,
    Layout,
    format_seq,
    parse_fork_marker,
    parse_segment,
    parse_seq,
    seq_after,
    validate_seq,
    validate_session_id,
)
from ._views import ContextFolder, Event, Repair

if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor

    from cryptography.hazmat.primitives.ciphers.aead import AESGCM


#: The session-relative name of the highest possible seq: every event name sorts at or before it.
_LAST_SEQ_NAME = format_seq(MAX_SEQ)
#: Forks of forks may nest this deep; a deeper (or circular) ancestry is an integrity error.
MAX_FORK_DEPTH = 100
_sha256 = hashlib.sha256
_md5 = hashlib.md5
#: A checked segment's events are built this many at a time.
_BATCH = 256
#: Segments read as one group: fetched side by side, checked each on its own as it arrives, and
#: trusted together when the listing of the loose events they cover vouches for each (``_vouched``).
#: A group is up to ``_GROUP`` segments, and past its first no more than ``_GROUP_BYTES`` of them
#: (by their listed sizes). The GETs of as many groups as the pool has threads are in flight, and
#: no more than two groups' worth of segment bytes, so that a read holds a few groups of segments
#: whatever their size (up to ``MAX_SEGMENT_BYTES`` each) and a long chain of small ones goes in one
#: round trip (45,000 short or 1 KiB events: 4 round trips with the append, against 6 and 7 with
#: two groups at a time).
_GROUP = 8
_GROUP_BYTES = 32 * 1024 * 1024
#: Names per LIST page of the loose events a chain of segments covers (S3's most): the pages
#: go out side by side with the segment GETs, one per this many events (``_listed_md5s``).
_LISTED = 1000
#: A segment's listed (compressed) size times this is what a read counts it to hold once
#: decompressed, when it groups segments (``_GROUP_BYTES``). Segments in flight are counted at their
#: listed size: they are decompressed one at a time, as the reader checks them.
_EXPANSION = 8
#: When the loose tail after the segments is not on the first page of names listed with the
#: manifest, the GETs of its first this many seqs go out with the segment GETs, beside the LIST that
#: names its events, not a round after it (those past the head answer 404 and are dropped): automatic
#: compaction (``DEFAULT_AUTO_COMPACT``) leaves fewer loose events than this after its newest segment.
_TAIL_GUESS = 32
#: A read that ends inside a segment takes it when it wants at least this many of its events (or
#: half of them); fewer are read as loose events, a GET each. A read that goes on past a segment
#: always takes it: its loose events would cost a GET each where the segment costs one
#: (compaction retires the lower levels inside a higher one, so there is no shorter one to take).
_COVERED_EVENTS = 4
#: Checking a segment holds the GIL; it gives it up (``time.sleep(0)``, about 90 us) every this
#: many events. A thread that waits for it (one reading a GET's body, one sending a GET) would
#: otherwise wait up to a switch interval (5 ms) for it at every read of its socket.
_YIELD_EVERY = 256
#: The first LIST page of a loose tail asks for this many keys (continuation pages for 1,000):
#: the tail after the newest segment is short, and a page of 1,000 keys would also carry the
#: names of every segment (the client parses each). Request counts change only for a tail this long.
_TAIL_FIRST_PAGE = 64
#: A read of the non-event objects stops at the page that shows this many young segments
#: (``young/``, listed last, newest first): automatic compaction's chain after its newest top-level
#: segment is among the newest 81 (63 of the lowest level, 15 and 3 of the next). Planted names that
#: push them out cost requests (their loose events are read), not truth.
_YOUNG_NEEDED = 128


class SessionInfo(msgspec.Struct, frozen=True):
    session_id: str
    uid: str
    created: str
    retention: Retention
    head: int
    key_id: str | None
    parent: ForkRef | None
    forks: list[str] = msgspec.field(default_factory=list)
    segments: int = 0
    #: Each fork in ``forks`` and the seq it was forked at.
    fork_seqs: dict[str, int] = msgspec.field(default_factory=dict)

    @property
    def encrypted(self) -> bool:
        return self.key_id is not None


class Meta(msgspec.Struct, frozen=True):
    """A session's objects other than events, from one listing. Each is derived: a hint
    where to read (segments), a reason to refuse (tombstone, salt), never history."""

    tombstone: bool = False
    #: Each segment (first, last), in order, and its size as listed.
    segments: dict[tuple[int, int], int] = msgspec.field(default_factory=dict)
    forks: list[tuple[str, str]] = msgspec.field(default_factory=list)
    #: A salt object: the session was encrypted by rekey, so it accepts no plaintext event.
    salted: bool = False
    #: Rekey records exist (``rekeys/...``): the session's events may be under a newer key id.
    rekeyed: bool = False
    #: The segments of ``segments`` named under ``young/`` only (``Layout.young_key``).
    young: frozenset[tuple[int, int]] = frozenset()

    def segment_key(self, layout: Layout, session_id: str, segment: tuple[int, int]) -> str:
        """Where the segment (first, last) is stored."""
        if segment in self.young:
            return layout.young_key(session_id, *segment)
        return layout.segment_key(session_id, *segment)


def first_own_seq(manifest: Manifest) -> int:
    """The session's first own seq: after the fork seq for a fork that references its parent, else
    after its base (1 unless the id was used before)."""
    parent = manifest.parent
    return parent.seq + 1 if parent is not None and not parent.copied else manifest.base + 1


class Loaded(msgspec.Struct, frozen=True):
    manifest: Manifest
    genesis: str  # sha256 of the manifest bytes: the prev of the first own seq (unless a fork's)
    meta: Meta
    #: The first LIST page of the session's names from seq 1 (``load(first_page=True)``), listed
    #: with the manifest GET: a read from seq 1 takes its loose tail and its first ETags from it.
    first_page: ListPage | None = None

    @property
    def first_own(self) -> int:
        return first_own_seq(self.manifest)

    @property
    def sealed_only(self) -> bool:
        """Whether the session takes only sealed events: fixed by its manifest (a key id) or a
        salt object (encrypted by rekey), never by the events found (anyone who may create
        objects can plant one). Readers refuse a plaintext event in it; writers never write one."""
        return self.manifest.kid is not None or self.meta.salted


class RawEvent(msgspec.Struct, frozen=True, gc=False):
    session_id: str
    seq: int
    data: bytes
    envelope: Envelope
    hash: str


# ---- manifests and listings ------------------------------------------------


def read_manifest(ctx: StoreContext, session_id: str) -> tuple[Manifest, str] | None:
    """The manifest and the sha256 of its bytes, or None: one GET."""
    try:
        stored = ctx.backend.get(ctx.layout.manifest_key(session_id), max_bytes=MAX_SMALL_OBJECT_BYTES)
    except ObjectMissing:
        return None
    return decode_manifest(stored.data, session_id), sha256_hex(stored.data)


def _list_meta(ctx: StoreContext, session_id: str, every: bool) -> list[ObjectInfo]:
    """The objects after the session's events, a page at a time, up to the ``_YOUNG_NEEDED``-th
    young segment (or with ``every``, all of them): the young ones are listed last, newest first."""
    prefix = ctx.layout.session_prefix(session_id)
    young_prefix = ctx.layout.young_prefix(session_id)
    past = ctx.layout.tree_prefix(session_id)  # the Merkle checkpoint objects sort after young/: not read here
    objects: list[ObjectInfo] = []
    young = 0
    start = ctx.layout.after_events(session_id)
    while True:
        page = ctx.backend.list_page(prefix, start_after=start)
        objects += page.objects
        young += sum(1 for info in page.objects if info.key.startswith(young_prefix))
        if not page.truncated or (young >= _YOUNG_NEEDED and not every) or (page.objects and page.objects[-1].key >= past):
            return objects
        start = page.next_start_after


def _list_young(ctx: StoreContext, session_id: str, upto: int) -> list[ObjectInfo]:
    """The newest ``_YOUNG_NEEDED`` young segments that end at or before ``upto``: one LIST."""
    layout = ctx.layout
    start = layout.young_start(session_id, upto)
    return ctx.backend.list_page(layout.young_prefix(session_id), start_after=start, max_keys=_YOUNG_NEEDED).objects


def _meta(ctx: StoreContext, session_id: str, objects: list[ObjectInfo]) -> Meta:
    prefix = ctx.layout.session_prefix(session_id)
    tombstone = salted = rekeyed = False
    segments: dict[tuple[int, int], int] = {}
    young: set[tuple[int, int]] = set()
    plain: set[tuple[int, int]] = set()
    forks: list[tuple[str, str]] = []
    for info in objects:
        name = info.key[len(prefix) :]
        if name == "tombstone":
            tombstone = True
        elif name == "salt":
            salted = True
        elif name.startswith("rekeys/"):
            rekeyed = True
        elif (segment := parse_segment(name)) is not None:
            if not info.size:
                continue  # empty: no segment (it holds at least one event), and not worth a GET
            segments[segment] = info.size
            (young if name.startswith(YOUNG) else plain).add(segment)
        elif (fork := parse_fork_marker(name)) is not None:
            forks.append(fork)
    # a range stored under both names is read from segments/
    return Meta(tombstone, dict(sorted(segments.items())), forks, salted, rekeyed, frozenset(young - plain))


def _send_listings(
    ctx: StoreContext, session_id: str, upto: int | None, every: bool, pool: ThreadPoolExecutor | None = None
) -> list[Future[list[ObjectInfo]]]:
    pool = pool or ctx.executor()
    listings = [pool.submit(_list_meta, ctx, session_id, every)]
    if upto is not None:
        listings.append(pool.submit(_list_young, ctx, session_id, upto))
    return listings


def _meta_of(ctx: StoreContext, session_id: str, listings: list[Future[list[ObjectInfo]]]) -> Meta:
    return _meta(ctx, session_id, [info for listing in listings for info in listing.result()])


def read_meta(ctx: StoreContext, session_id: str, *, upto: int | None = None, every: bool = False) -> Meta:
    """The session's tombstone, segments and fork markers: the LIST of the names after its events,
    which (unless ``every``) shows only the newest young segments; with ``upto``, the LIST of the
    young ones that end at or before it, sent alongside."""
    return _meta_of(ctx, session_id, _send_listings(ctx, session_id, upto, every))


def tombstoned(ctx: StoreContext, manifest: Manifest, meta: Meta) -> bool:
    """Whether this incarnation of the session was deleted: its listing shows a tombstone that
    names its uid (one GET; an unreadable tombstone counts: only an operator writes one). A
    tombstone of an earlier incarnation is what a create over a deleted id had yet to remove."""
    if not meta.tombstone:
        return False
    try:
        data = ctx.backend.get(ctx.layout.tombstone_key(manifest.sid), max_bytes=MAX_SMALL_OBJECT_BYTES).data
    except ObjectMissing:
        return False
    tombstone = fence_of(data)
    return tombstone is None or tombstone.uid == manifest.uid


def first_name(ctx: StoreContext, session_id: str) -> str | None:
    """The session-relative name of the session's first object (events sort first): one LIST."""
    prefix = ctx.layout.session_prefix(session_id)
    page = ctx.backend.list_page(prefix, max_keys=1)
    return page.objects[0].key[len(prefix) :] if page.objects else None


def gone(ctx: StoreContext, session_id: str) -> SessionNotFoundError | SessionExpiredError:
    """The error for a session without a manifest: expired if events remain, else not found."""
    first = first_name(ctx, session_id)
    if first is not None and parse_seq(first) is not None:
        return SessionExpiredError(session_id, "its manifest is gone but events remain")
    if first == "tombstone":
        return SessionNotFoundError(session_id, "was deleted", deleted=True)
    return SessionNotFoundError(session_id)


def load(
    ctx: StoreContext,
    session_id: str,
    *,
    deleted_ok: bool = False,
    found: tuple[Manifest, str] | None = None,
    upto: int | None = None,
    every: bool = False,
    first_page: bool = False,
) -> Loaded:
    """Manifest and listing of a session (``found``: a manifest the caller already read; ``upto``,
    the last seq the caller reads, and ``every``: see ``read_meta``; ``first_page``: the LIST of
    its first 1,000 names too, sent with them, for a read from seq 1: ``Loaded.first_page``)."""
    validate_session_id(session_id)
    page = ctx.executor().submit(_list_first, ctx, session_id) if first_page and not found else None
    listings = [] if found else _send_listings(ctx, session_id, upto, every)  # with the manifest GET
    try:
        found = found or read_manifest(ctx, session_id)
        loaded = _loaded(ctx, session_id, found, listings or _send_listings(ctx, session_id, upto, every), deleted_ok)
    except BaseException:
        if page is not None and not page.cancel():
            page.exception()  # settled: no request of this call runs on after it
        raise
    return loaded if page is None else msgspec.structs.replace(loaded, first_page=page.result())


def _list_first(ctx: StoreContext, session_id: str) -> ListPage:
    """The session's first ``_LISTED`` names: its first events (and, for a short session, all of
    its names): what ``_listed_md5s`` lists after seq 0. One LIST."""
    prefix = ctx.layout.session_prefix(session_id)
    return ctx.backend.list_page(prefix, start_after=ctx.layout.event_key(session_id, 0), max_keys=_LISTED)


def _tail_of(ctx: StoreContext, session_id: str, page: ListPage | None, start: int) -> ListPage | None:
    """The part of ``page`` (``Loaded.first_page``) from seq ``start`` on, as the first page of a
    LIST after seq ``start - 1`` (``_event_names`` goes on from its end as from any page), when
    the page reaches past that seq or lists the session to its end; else None. Pure."""
    if page is None:
        return None
    after = ctx.layout.event_key(session_id, start - 1)
    rest = [info for info in page.objects if info.key > after]
    if page.truncated and not rest:
        return None  # it ended before the seq: the LIST starts there
    return ListPage(rest, [], page.truncated, page.next_start_after)


class _SentLoad(msgspec.Struct, frozen=True):
    """A ``load`` whose requests are on their way (``send_load``): nothing has waited for them."""

    session_id: str
    manifest: Future[tuple[Manifest, str] | None]
    listings: list[Future[list[ObjectInfo]]]


def send_load(
    ctx: StoreContext, session_id: str, *, upto: int | None = None, pool: ThreadPoolExecutor | None = None
) -> _SentLoad:
    """Send the requests of ``load`` (the manifest GET, the listings) to the pool (``pool``, by
    default the context's), and return at once; ``finish_load`` waits for them. The pool runs
    them as leaves (none waits for another), so any number may be sent together."""
    validate_session_id(session_id)
    pool = pool or ctx.executor()
    return _SentLoad(session_id, pool.submit(read_manifest, ctx, session_id), _send_listings(ctx, session_id, upto, False, pool))


def finish_load(ctx: StoreContext, sent: _SentLoad, *, deleted_ok: bool = True) -> Loaded:
    """What ``load`` returns, from the requests ``send_load`` sent."""
    return _loaded(ctx, sent.session_id, sent.manifest.result(), sent.listings, deleted_ok)


def cancel_load(sent: _SentLoad, *, settle: bool = False) -> None:
    """Drop a load sent ahead: what is queued is not sent; what runs finishes unread, and with
    ``settle`` is waited for (a call that fails leaves no request of its own running on)."""
    for listing in sent.listings:
        if not listing.cancel() and settle:
            listing.exception()  # waits; its outcome is not wanted


def _loaded(
    ctx: StoreContext,
    session_id: str,
    found: tuple[Manifest, str] | None,
    listings: list[Future[list[ObjectInfo]]],
    deleted_ok: bool,
) -> Loaded:
    if found is None:
        for listing in listings:
            listing.cancel()
        raise gone(ctx, session_id)
    manifest, genesis = found
    meta = _meta_of(ctx, session_id, listings)
    if meta.tombstone and not tombstoned(ctx, manifest, meta):
        meta = msgspec.structs.replace(meta, tombstone=False)  # an earlier incarnation's, left behind
    if meta.tombstone and not deleted_ok:
        raise deleted(ctx, manifest, meta)
    return Loaded(manifest, genesis, meta)


def held_by_forks(forks: list[str]) -> str:
    """Why the id of a deleted session that live forks read cannot start a new session: the one
    explanation every path gives (reads and appends as ``SessionNotFoundError``, creates as
    ``SessionExistsError``)."""
    return (
        f"was deleted, but its forks ({', '.join(forks)[:200]}) read its events: its objects are kept, and the id"
        " stays taken until those forks are deleted and gc has removed them"
    )


def deleted(ctx: StoreContext, manifest: Manifest, meta: Meta) -> SessionNotFoundError:
    """The error for a deleted session whose objects remain: kept for live forks (a GET per
    fork marker), or until gc removes them."""
    forks = live_forks(ctx, manifest.uid, meta.forks, recorded=recorded_forks(ctx, manifest.sid)) if meta.forks else []
    if forks:
        return SessionNotFoundError(manifest.sid, held_by_forks(forks), deleted=True, kept_for_forks=tuple(forks))
    return SessionNotFoundError(
        manifest.sid,
        f"was deleted; gc removes its objects {FENCE_HOLD.total_seconds() / 60:.0f} minutes on, and creating it again"
        " starts a new session",
        deleted=True,
    )


def _list_on(prefix: str, page: ListPage) -> str | None:
    """Where the LIST after a truncated ``page`` of a session's names starts: after its last
    key, or past the names after it that cannot be seqs when that key is none (``seq_after``:
    planted junk costs no page it can jump over); None when no event can follow. Pure."""
    if not page.objects:
        return page.next_start_after
    name = page.objects[-1].key[len(prefix) :]
    if parse_seq(name) is not None:
        return page.next_start_after
    after = seq_after(name)
    return None if after is None else max(prefix + after, page.next_start_after)


def _event_names(
    ctx: StoreContext, session_id: str, after: int, first_page: ListPage | None = None
) -> Iterator[tuple[int, ObjectInfo]]:
    """(seq, listing) of the session's event objects after seq ``after``, in order
    (``first_page``: the first page of that LIST, already made).

    Names that are not seqs (junk, a planted ``-`` or ``…01~``) are skipped, never
    taken for the end of the events: the listing ends only where names sort after
    every possible seq (the manifest, segments, markers). A page that ends in junk is
    followed by one that starts past it (``_list_on``): planted names cost a LIST page
    per 1,000 at most, and none for a run of ``<seq>~…`` names the next page jumps over.
    """
    prefix = ctx.layout.session_prefix(session_id)
    first = ctx.layout.event_key(session_id, after)  # seq 0 is never an event
    page = first_page if first_page is not None else ctx.backend.list_page(prefix, start_after=first)
    while True:
        for info in page.objects:
            name = info.key[len(prefix) :]
            seq = parse_seq(name)
            if seq is not None:
                yield seq, info
            elif name > _LAST_SEQ_NAME:
                return
        start = _list_on(prefix, page) if page.truncated else None
        if start is None:
            return
        page = ctx.backend.list_page(prefix, start_after=start)


def _tail_page(ctx: StoreContext, session_id: str, after: int, *, short: bool = False) -> tuple[list[int], bool]:
    """Seqs listed after seq ``after``, and whether more events may follow (the last page
    ended in an event name): one LIST page of 1,000 keys or, ``short``, a page of
    ``_TAIL_FIRST_PAGE`` keys and, when names up to the events' end fill it, a second of
    1,000; and while a page ends in names that are no seqs, the next page from past them
    (``_list_on``: planted junk costs at most a page per 1,000 names, never the head)."""
    prefix = ctx.layout.session_prefix(session_id)
    start: str | None = ctx.layout.event_key(session_id, after)  # seq 0 is never an event
    seqs: list[int] = []
    sizes = [_TAIL_FIRST_PAGE, 1000] if short else [1000]
    while start is not None:
        page = ctx.backend.list_page(prefix, start_after=start, max_keys=sizes.pop(0) if sizes else 1000)
        names = [o.key[len(prefix) :] for o in page.objects]
        seqs += [s for name in names if (s := parse_seq(name)) is not None]
        if not (page.truncated and names and names[-1] <= _LAST_SEQ_NAME):
            break  # the events end in this page
        if not sizes and parse_seq(names[-1]) is not None:
            return seqs, True
        start = _list_on(prefix, page)
    return seqs, False


def missing_start(loaded: Loaded, found: int, data: bytes | None) -> SessionExpiredError | IntegrityError:
    """The error for a session whose first own event is missing while seq ``found`` is listed
    after it (``data``: that object's bytes, None if it is gone too).

    Expiry removes a session's objects and leaves the rest of its own events, so the gap is
    expiry only where what follows it is one: an event of this incarnation at ``found`` (sealed,
    in a session that takes only sealed events), or nothing any more (expiry going on). Anything
    else there was planted where no event was (the writer role may create any name): it is
    tampering (``IntegrityError`` at ``found``), never expiry, so that one junk object cannot
    make a session pass for expired. Pure."""
    manifest = loaded.manifest
    gap = f"seq {loaded.first_own} is missing"
    if data is not None:
        try:
            raw = decode_raw(manifest, found, data)
        except IntegrityError as error:
            return IntegrityError(manifest.sid, found, f"{error.detail}, and {gap} before it: planted, not expired")
        if raw.envelope.body is not None and loaded.sealed_only:
            detail = f"plaintext event in an encrypted session, and {gap} before it: planted, not expired"
            return IntegrityError(manifest.sid, found, detail)
    return SessionExpiredError(manifest.sid, f"its first events are gone ({gap})")


def find_head(ctx: StoreContext, loaded: Loaded, known: int = 0, *, require_start: bool = True) -> int:
    """The highest seq of the session, starting from ``known`` (a seq the caller knows
    exists: a writer's own head) or from the end of its newest segment.

    A segment's name is a hint, never the head: the LIST starts one seq before the
    segment's end and must show the loose event there (loose events always remain),
    else the segment is passed over. One LIST when fewer than 1,000 events follow
    (in a session with segments, whose names follow the events, the first page is
    short: two LISTs when 64 to 1,063 events follow, see ``_tail_page``); otherwise
    HEAD probes gallop up from the end of those pages (doubling the step) and then
    bisect, until 1,000 events remain for a final LIST. Names among the events that are
    no seqs are skipped, never taken for the end of them (``_tail_page``, ``_event_names``).
    Raises ``SessionExpiredError`` when the session's first own event is gone, or
    ``IntegrityError`` when what is listed after that gap is no event of the session
    (``missing_start``: one GET); with ``require_start`` False, neither: the highest seq
    listed whatever precedes it (where a fence goes).
    """
    session_id = loaded.manifest.sid
    layout = ctx.layout
    floors = sorted({last for _, last in loaded.meta.segments if last > known}, reverse=True)
    seqs: list[int] = []
    more = False
    floor = known
    short = bool(loaded.meta.segments)  # segment names follow the events: a short first page
    for candidate in floors[:3]:  # a few: planted segment names must not cost a LIST each
        seqs, more = _tail_page(ctx, session_id, candidate - 1, short=short)
        if seqs and seqs[0] == candidate:
            floor = candidate
            break
    else:
        seqs, more = _tail_page(ctx, session_id, known, short=short)
    if require_start and floor == 0 and seqs and seqs[0] > loaded.first_own:
        raise missing_start(loaded, seqs[0], get_event_bytes(ctx, session_id, seqs[0]))
    low = seqs[-1] if seqs else floor
    if not more:
        return max(low, loaded.first_own - 1)
    step = 1000
    while low + step <= MAX_SEQ and ctx.has_object(layout.event_key(session_id, low + step)):
        low += step
        step *= 2
    high = min(low + step, MAX_SEQ + 1)  # known absent
    while high - low > 1000:
        middle = (low + high) // 2
        if ctx.has_object(layout.event_key(session_id, middle)):
            low = middle
        else:
            high = middle
    # fewer than 1,000 events follow ``low``: list them to their end, past any junk among them
    return max((seq for seq, _ in _event_names(ctx, session_id, low)), default=low)


def live_forks(
    ctx: StoreContext, uid: str, markers: list[tuple[str, str]], *, recorded: Collection[str] | None = None
) -> list[str]:
    """The forks named by ``markers`` whose manifests still exist and name this incarnation (a GET
    each); with ``recorded`` (a deleted parent's ``recorded_forks``), only those among them."""
    return sorted(fork_points(ctx, uid, markers, recorded=recorded))


def fork_points(
    ctx: StoreContext, uid: str, markers: list[tuple[str, str]], *, recorded: Collection[str] | None = None
) -> dict[str, int]:
    """``live_forks``, each with its fork seq (as its manifest records it)."""
    live = {}
    for child, child_uid in markers:
        if recorded is not None and f"{child}@{child_uid}" not in recorded:
            continue  # made after the delete: planted, it keeps nothing
        try:
            found = read_manifest(ctx, validate_session_id(child))
        except (InvalidInputError, IntegrityError):
            continue  # not a marker evstore wrote, or a child that does not decode: it keeps nothing alive
        parent = found[0].parent if found is not None else None
        if found is not None and found[0].uid == child_uid and parent is not None and parent.uid == uid:
            live[child] = parent.seq
    return live


def recorded_forks(ctx: StoreContext, session_id: str) -> frozenset[str] | None:
    """The forks (``child@uid``) a deleted session's tombstone records as alive at its delete
    (one GET), which alone may read its events; None for a tombstone written before tombstones
    recorded them (its fork markers decide). A tombstone that is gone or does not decode records
    none: only an operator writes one."""
    try:
        data = ctx.backend.get(ctx.layout.tombstone_key(session_id), max_bytes=MAX_SMALL_OBJECT_BYTES).data
    except ObjectMissing:
        return frozenset()
    tombstone = fence_of(data)
    if tombstone is None:
        return frozenset()
    return None if tombstone.forks is None else frozenset(tombstone.forks)


def reads_deleted_parent(ctx: StoreContext, fork: Manifest, parent: Loaded) -> bool:
    """Whether ``fork`` may read its deleted ``parent``'s events: the parent's tombstone records
    it as alive at the delete, or (a tombstone from before that record) its marker is listed."""
    recorded = recorded_forks(ctx, parent.manifest.sid)
    if recorded is None:
        return (fork.sid, fork.uid) in parent.meta.forks
    return f"{fork.sid}@{fork.uid}" in recorded


# ---- keys, decoding and opening ------------------------------------------------


def session_key(ctx: StoreContext, manifest: Manifest, key_id: str) -> AESGCM:
    cache_key = (manifest.sid, manifest.uid, key_id)
    key = ctx.session_keys.get(cache_key)
    if key is None:
        master = ctx.keyring.get(key_id)
        if master is None:
            raise KeyRequiredError(manifest.sid, key_id)
        key = derive_session_key(master, _salt(ctx, manifest), manifest.sid)
        ctx.session_keys[cache_key] = key
    return key


def salt_key(ctx: StoreContext, session_id: str) -> str:
    """Where a session encrypted later by rekey keeps its salt (its manifest has none)."""
    return ctx.layout.session_prefix(session_id) + "salt"


def _salt(ctx: StoreContext, manifest: Manifest) -> bytes:
    if manifest.salt is not None:
        return b64decode(manifest.salt)
    try:
        stored = ctx.backend.get(salt_key(ctx, manifest.sid), max_bytes=MAX_SMALL_OBJECT_BYTES)
    except ObjectMissing:
        raise IntegrityError(manifest.sid, None, "sealed events but no salt: the session was shredded") from None
    salt = b64decode_canonical(stored.data.decode("ascii", "replace"))  # None for junk: anyone may create it
    if salt is None or len(salt) != 32:
        raise IntegrityError(manifest.sid, None, "salt object is not 32 bytes of base64")
    return salt


def decode_raw(manifest: Manifest, seq: int, data: bytes) -> RawEvent:
    envelope = decode_envelope(data, manifest.sid, seq)
    if envelope.uid != manifest.uid:
        raise IntegrityError(manifest.sid, seq, "event belongs to another incarnation of the session")
    return RawEvent(manifest.sid, seq, data, envelope, _sha256(data).hexdigest())


def decode_at(ctx: StoreContext, manifest: Manifest, seq: int, data: bytes) -> RawEvent:
    """``decode_raw``, except that the fence of a delete that raced the caller (its tombstone's
    bytes at the seq after the head, with the tombstone present) raises ``SessionNotFoundError``."""
    try:
        return decode_raw(manifest, seq, data)
    except IntegrityError:
        fence = fence_of(data)
        if fence is not None and fence.uid == manifest.uid and ctx.has_object(ctx.layout.tombstone_key(manifest.sid)):
            raise SessionNotFoundError(manifest.sid, "was deleted", deleted=True) from None
        raise


def is_fence(ctx: StoreContext, session_id: str, uid: str, seq: int) -> bool:
    """Whether the object at ``seq`` is the fence of the incarnation ``uid``'s delete: one GET."""
    data = get_event_bytes(ctx, session_id, seq)
    fence = fence_of(data) if data is not None else None
    return fence is not None and fence.uid == uid


def check_key_id(ctx: StoreContext, manifest: Manifest, raw: RawEvent) -> None:
    """A sealed event names the session's key id, or one a rekey record moved it to."""
    kid = raw.envelope.kid
    if kid != manifest.kid and kid not in {r.kid for r in records(ctx, manifest)}:
        raise IntegrityError(raw.session_id, raw.seq, f"sealed under key id {kid!r:.70}, which this session never used")


def open_body(ctx: StoreContext, manifest: Manifest, raw: RawEvent) -> Body:
    """The event's body: as stored, or unsealed with the session key (the header is the AAD)."""
    envelope = raw.envelope
    if envelope.body is not None:
        if manifest.kid is not None:
            raise IntegrityError(raw.session_id, raw.seq, "plaintext event in an encrypted session (forged)")
        return envelope.body
    assert envelope.sealed is not None and envelope.kid is not None
    check_key_id(ctx, manifest, raw)
    key = session_key(ctx, manifest, envelope.kid)
    sealed = b64decode_canonical(envelope.sealed)
    if sealed is None:  # non-canonical base64 decodes alike: refuse any altered byte
        raise IntegrityError(raw.session_id, raw.seq, "sealed body is not canonical base64")
    plaintext = open_sealed(key, sealed, header_aad(envelope))
    if plaintext is None:
        raise IntegrityError(
            raw.session_id, raw.seq, f"authentication failed under key id {envelope.kid!r} (wrong key or altered object)"
        )
    return decode_body(plaintext, raw.session_id, raw.seq)


def to_event(ctx: StoreContext, manifest: Manifest, raw: RawEvent) -> Event:
    env = raw.envelope
    return Event(raw.session_id, raw.seq, env.ts, env.wid, env.kid, raw.hash, open_body(ctx, manifest, raw), env.prev)


# ---- rekey records: old hash -> new hash of re-sealed events ---------------------


def load_records(ctx: StoreContext, manifest: Manifest) -> list[RekeyRecord]:
    """The rekey records of this incarnation of the session.

    A record is derived, and anyone who may create objects can write one, so it
    only ever lets a reader accept a hash that the event objects themselves now
    have: a ``prev`` naming the old hash of the event before it, a receipt naming
    the old hash of the event now at its seq. It can neither add, hide nor change
    an event; what it claims is checked against the events it stands for.
    """
    prefix = ctx.layout.session_prefix(manifest.sid) + "rekeys/"
    found = []
    for info in ctx.backend.list(prefix):
        try:
            data = ctx.backend.get(info.key, max_bytes=MAX_RECORD_BYTES).data
            record = msgspec.json.decode(data, type=RekeyRecord)
        except (ObjectMissing, IntegrityError, msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            continue  # not a record evstore wrote: it vouches for nothing
        if record.sid == manifest.sid and record.uid == manifest.uid and len(record.old) == len(record.new):
            found.append(record)
    return found


def records(ctx: StoreContext, manifest: Manifest) -> list[RekeyRecord]:
    """The session's rekey records, cached."""
    cached = ctx.rekey_records.get(manifest.sid)
    if cached is None:
        cached = ctx.rekey_records[manifest.sid] = load_records(ctx, manifest)
    return cached


def rekeyed_key_id(ctx: StoreContext, loaded: Loaded) -> str | None:
    """The key id the newest rekey record names, else the manifest's: the session's key as
    ``info`` shows it, and the one its first own event is sealed under (``rekey`` writes a record
    though it has nothing to re-seal). Reads the records (a LIST, a GET each) only where the
    listing found some."""
    found = records(ctx, loaded.manifest) if loaded.meta.rekeyed else []
    return max(found, key=lambda record: record.at).kid if found else loaded.manifest.kid


def canonical_hash(ctx: StoreContext, manifest: Manifest, digest: str) -> str:
    """The current hash of the event that ``digest`` named, following rekey records
    (callers compare it with an event's actual hash: see ``load_records``)."""
    aliases = {old: new for r in records(ctx, manifest) for old, new in zip(r.old, r.new, strict=True)}
    seen = set()
    while digest in aliases and digest not in seen:
        seen.add(digest)
        digest = aliases[digest]
    return digest


def _rekeyed_to(ctx: StoreContext, owner: Manifest, old: str, new: str) -> bool:
    """Whether the rekey records of ``owner`` (the session the event is an own event of: a
    fork's inherited event is its ancestor's, whose rekey re-sealed it) lead from ``old`` to
    ``new``, the event's hash now. Read afresh when the cached records do not: a mismatch is rare."""
    if canonical_hash(ctx, owner, old) == new:
        return True
    ctx.forget_records(owner.sid)
    return canonical_hash(ctx, owner, old) == new


def same_event(ctx: StoreContext, manifest: Manifest, a: str, b: str) -> bool:
    ctx.forget_records(manifest.sid)  # a mismatch is rare: read the records afresh
    return canonical_hash(ctx, manifest, a) == canonical_hash(ctx, manifest, b)


# ---- the event stream ---------------------------------------------------


def get_event_bytes(ctx: StoreContext, session_id: str, seq: int) -> bytes | None:
    """An event object's bytes (None if absent); one larger than any event could be is refused."""
    try:
        return ctx.backend.get(ctx.layout.event_key(session_id, seq), max_bytes=ctx.max_event_object_bytes).data
    except ObjectMissing:
        return None


def _loose_events(
    ctx: StoreContext,
    session_id: str,
    start: int,
    end: int | None,
    first_page: ListPage | None = None,
    early: _EarlyGets | None = None,
) -> Iterator[tuple[int, bytes | None]]:
    """(seq, bytes) of listed events from ``start`` on, in order, ``2 * concurrency`` GETs in flight
    (``early``: GETs already sent for some of those seqs; each is used instead of a new one)."""

    def seqs() -> Iterator[int]:
        for seq, _ in _event_names(ctx, session_id, start - 1, first_page):
            if end is not None and seq > end:
                return
            yield seq

    def fetch(seq: int) -> bytes | None:
        return get_event_bytes(ctx, session_id, seq)

    return ctx.prefetched(seqs(), fetch, ctx.concurrency * 2, early=early.take if early is not None else None)


class _EarlyGets:
    """GETs of the loose tail's first events, sent from the pool as soon as the segment GETs'
    first window has gone out (so they queue behind those and wait for no segment decode): the
    guessed seqs' at once (``_TAIL_GUESS``), the rest when the tail's LIST names them. ``take``
    hands one over to the stream that reads its seq; after ``close`` none is sent, and those not
    taken are cancelled."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._closed = False
        self._released = threading.Event()
        self._futures: dict[int, Future[bytes | None]] = {}
        self._sent: set[int] = set()

    def release(self) -> None:
        """The segment GETs that go first are queued: the early GETs may follow."""
        self._released.set()

    def wait(self) -> None:
        self._released.wait()

    def send(self, seq: int, submit: Callable[[], Future[bytes | None]]) -> bool:
        """Send the GET of ``seq`` (``submit``) unless one was sent already; False once closed."""
        with self._lock:
            if self._closed:
                return False
            if seq not in self._sent:
                self._sent.add(seq)
                self._futures[seq] = submit()
            return True

    def take(self, seq: int) -> Future[bytes | None] | None:
        with self._lock:
            return self._futures.pop(seq, None)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            left = list(self._futures.values())
            self._futures.clear()
        self._released.set()
        for future in left:
            future.cancel()


def _segment_bytes(ctx: StoreContext, key: str) -> bytes | None:
    """A segment's stored bytes (compressed: ``expand_segment`` unpacks them, as the reader
    checks it, one at a time); None when it is gone, too large or unreadable (the loose events
    stand for it)."""
    try:
        return ctx.backend.get(key, max_bytes=MAX_SEGMENT_BYTES).data
    except (ObjectMissing, IntegrityError):
        return None


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


#: ETags joined by "<", each a quoted MD5 (``_content_md5`` reads each as its hex digits, lower-cased).
_QUOTED_MD5S = re.compile(r'"[0-9a-fA-F]{32}"(?:<"[0-9a-fA-F]{32}")*')


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


def own_raw(ctx: StoreContext, loaded: Loaded, start: int, end: int | None) -> Iterator[RawEvent]:
    """The session's own events in [start, end], from segments then loose objects, in order
    (see ``own_batches``)."""
    for batch in own_batches(ctx, loaded, start, end):
        yield from batch


def segment_chain(segments: Iterable[tuple[int, int]], cursor: int, end: int | None) -> list[tuple[int, int]]:
    """The segments (first, last) to read from seq ``cursor`` to ``end``, chosen greedily: at
    each seq, the segment that covers it and reaches furthest (of two that reach as far, the
    shorter) among those worth their GET: the read goes on past it, or wants at least half of
    its events or ``_COVERED_EVENTS`` of them (a range of a few events at a segment's end reads
    them loose). So a read from any seq costs no more requests than one from the start. Pure.

    One pass over ``segments`` in order of first seq, and a heap of those that start by the seq
    reached: a segment that no longer covers it, or is no longer worth its GET, never is again
    (the seq only grows), so each segment is pushed and popped once: O(S log S) for S listed
    segments, whatever names were planted.
    """
    ordered = sorted(segments)
    ready: list[tuple[int, int]] = []  # (-last, -first): the furthest-reaching on top
    chain: list[tuple[int, int]] = []
    index = 0
    reach = cursor
    while end is None or reach <= end:
        while index < len(ordered) and ordered[index][0] <= reach:
            first, last = ordered[index]
            heapq.heappush(ready, (-last, -first))
            index += 1
        while ready:
            last, first = -ready[0][0], -ready[0][1]
            wanted = (last if end is None else min(last, end)) - reach + 1
            if last >= reach and (end is None or end > last or wanted >= _COVERED_EVENTS or 2 * wanted >= last - first + 1):
                break
            heapq.heappop(ready)  # it can never be chosen: drop it
        else:
            break
        heapq.heappop(ready)
        chain.append((first, last))
        reach = last + 1
    return chain


class _Loose(msgspec.Struct, frozen=True):
    """A loose event fetched by its seq, without a LIST: one of a gap's (``segment_runs``)."""

    seq: int


#: A read takes at most this many chains of segments, and reads at most this many loose events
#: between two of them (a gap: where a writer that held too few events packed no segment, as one
#: opened partway into a session does until its next boundary); past that, the rest is read loose.
_RUNS = 16
_GAP_EVENTS = 64


def segment_runs(segments: Iterable[tuple[int, int]], cursor: int, end: int | None) -> list[tuple[int, list[tuple[int, int]]]]:
    """The chains of segments (``segment_chain``) to read from seq ``cursor`` to ``end``, each
    with the seq it starts at; the events between the end of one (or ``cursor``) and the start
    of the next are read loose, by their seqs. Without them a read met a gap in the segments
    once and read every event after it loose. Pure; at most ``_RUNS`` chains and ``_RUNS`` gaps
    of up to ``_GAP_EVENTS``, whatever names were planted."""
    ordered = sorted(segments)
    firsts = [first for first, _ in ordered]
    runs: list[tuple[int, list[tuple[int, int]]]] = []
    reach = cursor
    for _ in range(2 * _RUNS):
        if len(runs) == _RUNS or (end is not None and reach > end):
            break
        chain = segment_chain(ordered, reach, end)
        if chain:
            runs.append((reach, chain))
            reach = chain[-1][1] + 1
            continue
        after = bisect.bisect_right(firsts, reach)
        if after == len(firsts) or firsts[after] - reach > _GAP_EVENTS or (end is not None and firsts[after] > end):
            break
        reach = firsts[after]  # the events before it are a gap
    return runs


def own_batches(
    ctx: StoreContext, loaded: Loaded, start: int, end: int | None, *, through_end: bool = False
) -> Iterator[list[RawEvent]]:
    """The session's own events in [start, end], in order: a checked segment's events in lists
    of up to ``_BATCH``, a loose event as a list of one (the per-event work above runs in one
    loop per list).

    Segments are read while they continue each other from ``start``, in groups of up to
    ``_GROUP``: a group's segments are fetched side by side with the LIST pages of the loose
    events they cover (one per ``_LISTED`` events, each page's start computed, none waiting on
    another), each checked on its own as it arrives, and the group is used only when the listing
    vouches for each of its events (``_vouched``). The rest (and all of it, from the first
    group that fails) comes from the loose events, which always remain. The LIST of the loose
    tail goes out with the segment GETs, and the GETs of its first events as soon as it
    answers: neither waits for a segment to be checked. With
    ``through_end`` (the caller knows that every event to ``end`` exists: an ancestor's, to the
    fork seq whose hash the fork's manifest records), a loose tail of up to ``_SHORT_RANGE``
    events is fetched by its seqs with the segments, as a gap's are, without that LIST.
    """
    manifest = loaded.manifest
    sid = manifest.sid
    cursor = max(start, loaded.first_own)
    runs = segment_runs(loaded.meta.segments, cursor, end)

    def listed_size(segment: tuple[int, int]) -> int:
        return loaded.meta.segments.get(segment, MAX_SEGMENT_BYTES)

    def size_of(segment: tuple[int, int]) -> int:
        # what it holds once decompressed, as far as its listed size tells: zstd shrinks prose
        # 3-6x (docs/format.md), and a segment never expands past the limit
        return min(listed_size(segment) * _EXPANSION, MAX_SEGMENT_BYTES)

    # the steps, in seq order: a gap's loose events (its first seq, and the seq after it), or a
    # group of segments that continue each other (never across a gap)
    steps: list[tuple[int, int] | list[tuple[int, int]]] = []
    reach = cursor
    for run_start, chain in runs:
        if run_start > reach:
            steps.append((reach, run_start))
        group_bytes = 0
        for index, link in enumerate(chain):
            size = size_of(link)
            last_step = steps[-1] if steps else None
            if index and isinstance(last_step, list) and len(last_step) < _GROUP and group_bytes + size <= _GROUP_BYTES:
                last_step.append(link)
                group_bytes += size
            else:
                steps.append([link])
                group_bytes = size
        reach = chain[-1][1] + 1
    if through_end and end is not None and 0 < end - reach + 1 <= _SHORT_RANGE:
        steps.append((reach, end + 1))  # the tail, by its seqs
        reach = end + 1
    groups = [step for step in steps if isinstance(step, list)]
    # each group's segments, then the LIST pages (by the seq they list after) of the loose events
    # it yields that no earlier group's pages cover: made as the fetches go out, so a planted
    # name's range costs at most a window of LISTs (its segment fails its check first)
    base = cursor - 1  # page k lists the names after seq base + k * _LISTED
    pages_of: list[int] = []
    listed_pages = 0
    for group in groups:
        needed = -(-((group[-1][1] if end is None else min(group[-1][1], end)) - base) // _LISTED)
        pages_of.append(max(needed - listed_pages, 0))
        listed_pages = max(listed_pages, needed)
    tail_start = reach
    tail: Future[ListPage] | None = None
    early = _EarlyGets()
    known_tail = _tail_of(ctx, sid, loaded.first_page, tail_start)
    guessed = range(0)  # the tail's seqs whose GETs go out before a LIST names them
    if loaded.first_page is not None and known_tail is None and runs:
        guessed = range(tail_start, tail_start + _TAIL_GUESS if end is None else min(tail_start + _TAIL_GUESS, end + 1))
    # the segment GETs (and the tail's LIST, with the page after it), the LIST pages that vouch for
    # them and the guessed GETs on the wide pool: all sent at once, each on a thread already started
    ctx.ready_threads(sum(len(group) for group in groups) + 2, min(listed_pages, 4 * ctx.concurrency) + len(guessed))
    if known_tail is not None and (end is None or tail_start <= end):  # listed with the manifest: GETs at once
        tail = ctx.executor().submit(_send_early, ctx, sid, known_tail, end, early)
    elif runs and (end is None or tail_start <= end):
        tail = ctx.executor().submit(_list_tail, ctx, sid, tail_start, end, early)
    try:
        pages_by_group = iter(pages_of)

        def wanted() -> Iterator[tuple[int, int] | int | _Loose]:
            page = 0
            for step in steps:
                if isinstance(step, tuple):
                    yield from (_Loose(seq) for seq in range(*step))
                    continue
                yield from step
                for _ in range(next(pages_by_group)):
                    yield base + page * _LISTED
                    page += 1

        def fetch(item: tuple[int, int] | int | _Loose) -> bytes | dict[int, str] | None:
            if isinstance(item, _Loose):
                return get_event_bytes(ctx, sid, item.seq)
            if isinstance(item, int):
                if item == 0 and loaded.first_page is not None:  # listed with the manifest
                    return _md5s_of(ctx.layout.session_prefix(sid), loaded.first_page)
                return _listed_md5s(ctx, sid, item)
            return _segment_bytes(ctx, loaded.meta.segment_key(ctx.layout, sid, item))

        budget = 2 * _GROUP_BYTES
        least = budget // (2 * ctx.concurrency)

        def weight(item: tuple[int, int] | int | _Loose) -> int:
            # a LIST page or a gap's loose event weighs nothing; a segment its listed size (what its
            # GET holds until the reader decompresses it), and at least 1 / (2 x concurrency) of the
            # budget: so no more than 2 x concurrency (+ 1) segment GETs are in flight however small
            # the segments are (planted ones: a byte each)
            return max(listed_size(item), least) if isinstance(item, tuple) else 0

        def send_guessed() -> None:
            # the segment GETs that go first are queued: the tail's GETs follow, the guessed ones at
            # once (small, on the wide pool: not queued behind segment GETs), those its LIST names
            # when it answers
            pool = ctx.wide_executor()
            for seq in guessed:
                early.send(seq, functools.partial(pool.submit, get_event_bytes, ctx, sid, seq))
            early.release()

        # a pool's worth of segment GETs in flight and the chain's LIST pages besides, up to
        # 4 x concurrency of them, on the wide pool (small, waiting on nothing: beside the segment
        # GETs, not queued behind them), two groups' bytes; then the tail's early GETs may go
        window = 2 * ctx.concurrency + min(listed_pages, 4 * ctx.concurrency)
        fetched = ctx.prefetched(
            wanted(), fetch, window, primed=send_guessed, weight=weight, budget=budget, wide=lambda item: isinstance(item, int)
        )
        covered: dict[int, str] = {}
        group_pages = iter(pages_of)
        for step in steps:
            if isinstance(step, tuple):  # a gap: its loose events, by their seqs
                for _ in range(*step):
                    loose = next(fetched)[1]
                    if not isinstance(loose, bytes):
                        break  # not there (a planted name past the head?): listed from the cursor below
                    yield [decode_raw(manifest, cursor, loose)]
                    cursor += 1
                if cursor < step[1]:
                    break
                continue
            group, pages = step, next(group_pages)
            # each segment is checked as it arrives, while the next ones are still on their way
            checked = []
            for first, last in group:
                data = next(fetched)[1]
                assert not isinstance(data, dict)
                checked.append(_checked_segment(manifest, first, last, data))
            if any(segment is None for segment in checked):
                break
            for _ in range(pages):
                page_md5s = next(fetched)[1]
                assert isinstance(page_md5s, dict)
                covered |= page_md5s
            if not _vouched(checked, covered, cursor, end):
                break
            for (first, last), segment in zip(group, checked, strict=True):
                assert segment is not None  # vouched
                high = last - first + 1 if end is None or end >= last else end - first + 1
                for low in range(max(cursor - first, 0), high, _BATCH):
                    yield segment.events(manifest, low, min(low + _BATCH, high))
                cursor = last + 1
            covered = {seq: md5 for seq, md5 in covered.items() if seq >= cursor}  # what later groups may still need
        fetched.close()
        early.release()  # the segments are done with (or there were none): the tail's GETs may go
        if end is not None and cursor > end:
            return
        # the tail's page when the loose events start where it does; else the first page's part from
        # the cursor on, or (None) they are listed from the cursor
        first_page = tail.result() if tail is not None and cursor == tail_start else _tail_of(ctx, sid, loaded.first_page, cursor)
        expected = cursor
        for seq, listed in _loose_events(ctx, sid, cursor, end, first_page, early):
            if listed is None and seq in guessed:  # its GET went before the LIST that names it
                listed = get_event_bytes(ctx, sid, seq)
            if seq != expected or listed is None:
                missing = expected if seq != expected else seq
                if missing == loaded.first_own:
                    raise missing_start(loaded, seq, listed)
                raise IntegrityError(sid, missing, "event is missing (a hole in the log)")
            yield [decode_raw(manifest, seq, listed)]
            expected += 1
    finally:
        if tail is not None:
            tail.cancel()
        early.close()


def _list_tail(ctx: StoreContext, session_id: str, start: int, end: int | None, early: _EarlyGets) -> ListPage:
    """The first LIST page of the loose events from ``start`` on (``_TAIL_FIRST_PAGE`` keys, or
    ``2 * concurrency`` if more; ``_event_names`` asks for the rest a page of 1,000 at a time);
    once it answers, the GETs of its first ``2 * concurrency`` events (to ``end``) go out into
    ``early``: the GETs the stream would send first when it reaches them."""
    prefix = ctx.layout.session_prefix(session_id)
    page = ctx.backend.list_page(
        prefix,
        start_after=ctx.layout.event_key(session_id, start - 1),
        max_keys=max(_TAIL_FIRST_PAGE, 2 * ctx.concurrency),
    )
    return _send_early(ctx, session_id, page, end, early)


def _send_early(ctx: StoreContext, session_id: str, page: ListPage, end: int | None, early: _EarlyGets) -> ListPage:
    """Send the GETs of the first ``2 * concurrency`` events ``page`` lists (to ``end``) into
    ``early``, once the segment GETs that go first are queued; return the page.

    When the page ends in event names before that many were sent (the first 1,000 names of a
    session a little longer than that: the tail starts on the first page and goes on past it),
    the next page is listed now, beside the segment GETs, and its events' GETs follow: the
    stream would list it only once it reached the page's end, a round later. The page returned
    is the two together, so the stream lists nothing twice."""
    prefix = ctx.layout.session_prefix(session_id)
    early.wait()  # behind the segment GETs that go first (or not at all: closed)
    pool = ctx.executor()
    budget = ctx.concurrency * 2
    sent = 0
    index = 0
    while True:
        for info in page.objects[index:]:
            seq = parse_seq(info.key[len(prefix) :])
            if seq is None:
                continue
            if (end is not None and seq > end) or sent >= budget:
                return page
            if not early.send(seq, functools.partial(pool.submit, get_event_bytes, ctx, session_id, seq)):
                return page
            sent += 1
        index = len(page.objects)
        last = page.objects[-1].key[len(prefix) :] if page.objects else ""
        if not page.truncated or last > _LAST_SEQ_NAME or (start := _list_on(prefix, page)) is None:
            return page  # the events end on this page
        more = ctx.backend.list_page(prefix, start_after=start)
        page = ListPage([*page.objects, *more.objects], page.prefixes, more.truncated, more.next_start_after)


def lineage(
    ctx: StoreContext, loaded: Loaded, start: int, end: int | None, *, _descendants: tuple[str, ...] = ()
) -> Iterator[tuple[Manifest, RawEvent]]:
    """Events of the session and its ancestors in [start, end], in order, with the chain
    checked (see ``lineage_batches``)."""
    for manifest, batch in lineage_batches(ctx, loaded, start, end, _descendants=_descendants):
        for raw in batch:
            yield manifest, raw


#: An ancestor's inherited range of at most this many events is fetched by its event GETs, sent
#: with its manifest's (no listing first); a longer one is read as any session is (``own_batches``).
#: So is a fork's own range, when its first page lists it whole and it is no longer than this.
_SHORT_RANGE = 32


class _Range(msgspec.Struct, frozen=True):
    """The GETs of a session's events ``low`` to ``high``, sent before the walk reaches them.
    ``listed``: a listing named each of them (a fork's own, from its first page), so one that
    is not there is a hole; else the range was computed from fork seqs, and the events may end
    before ``high`` (the walk then finds the event at the fork seq missing)."""

    low: int
    high: int
    events: list[Future[bytes | None]]
    listed: bool = False


class _Ahead(msgspec.Struct, frozen=True):
    """An ancestor's requests sent before the walk reaches it (``_send_ahead``): the ``ref`` the
    fork's ``ancestry`` gives for it, its load, and its inherited range with the GETs of its
    events when that is short (else none)."""

    ref: ForkRef
    load: _SentLoad
    range: _Range


class _SentAhead:
    """What a fork's read sent in its first round (``_send_ahead``): each ancestor's requests by
    session id, and the GETs of the fork's own listed events. The walk takes each where it
    arrives at it; ``drop`` cancels what is left."""

    def __init__(self, ancestors: dict[str, _Ahead], own: _Range | None) -> None:
        self.ancestors = ancestors
        self.own = own

    def take_own(self) -> _Range | None:
        own, self.own = self.own, None
        return own

    def drop(self, session_id: str) -> None:
        """Cancel what was sent for the ancestor ``session_id``: it is not wanted (running
        requests finish unread)."""
        item = self.ancestors.pop(session_id)
        item.load.manifest.cancel()
        cancel_load(item.load)
        for event in item.range.events:
            event.cancel()

    def drop_all(self) -> None:
        for session_id in list(self.ancestors):
            self.drop(session_id)
        own = self.take_own()
        for event in own.events if own is not None else []:
            event.cancel()


def _is_short(low: int, high: int) -> bool:
    """Whether an ancestor's inherited range ``low`` to ``high`` is read from its event GETs, sent
    ahead (no young segment is listed for it), rather than as any session's range is."""
    return 0 < high - low + 1 <= _SHORT_RANGE


def _own_range(ctx: StoreContext, loaded: Loaded, start: int, end: int | None) -> tuple[int, int] | None:
    """The fork's own events to read, ``(low, high)``, when its first page (``Loaded.first_page``)
    lists all of them (it reaches the names after the events, or ends), as consecutive seqs, at
    most ``_SHORT_RANGE``, and no segment of its covers them; else None (``own_batches`` reads
    them when the walk arrives). Pure."""
    page = loaded.first_page
    low = max(start, loaded.first_own)
    if page is None or any(last >= low for _, last in loaded.meta.segments):
        return None
    prefix = ctx.layout.session_prefix(loaded.manifest.sid)
    names = [info.key[len(prefix) :] for info in page.objects]
    if page.truncated and not (names and names[-1] > _LAST_SEQ_NAME):
        return None  # more events may follow the page
    seqs = [seq for name in names if (seq := parse_seq(name)) is not None and seq >= low]
    if end is not None:
        seqs = [seq for seq in seqs if seq <= end]
    if not seqs or seqs != list(range(low, low + len(seqs))) or len(seqs) > _SHORT_RANGE:
        return None
    return low, seqs[-1]


def _send_ahead(ctx: StoreContext, loaded: Loaded, start: int, end: int | None) -> _SentAhead:
    """For a fork whose manifest records its ``ancestry``: every ancestor's load and the event
    GETs of each short inherited range, and the GETs of the fork's own events its first page
    lists (``_own_range``), all sent at once on the wide pool (leaves). The ranges are computed
    from the refs, as the walk will find them if the refs are true; where they are not, the walk
    loads what it finds instead, and what was sent here is dropped unused. Nothing for a session
    that is no fork.

    The loads go first, the deepest ancestor's first: the walk waits for all of them before it
    reads that one's range (whose segments wait on its listing), and for the event GETs only
    as it yields their events."""
    manifest = loaded.manifest
    parent = manifest.parent
    if parent is None or parent.copied:
        return _SentAhead({}, None)
    plan: list[tuple[ForkRef, int, int]] = []  # each ancestor's ref and inherited range, deepest first
    seen: set[str] = set()
    upto = end
    for ref, above in zip([parent, *manifest.ancestry], [*manifest.ancestry, None], strict=True):
        if ref.copied or ref.sid in seen or start > ref.seq:
            break
        seen.add(ref.sid)
        upto = ref.seq if upto is None else min(ref.seq, upto)  # what the walk reads of this ancestor
        plan.insert(0, (ref, max(start, above.seq + 1 if above is not None and not above.copied else 1), upto))
    pool = ctx.wide_executor()

    def send_events(session_id: str, low: int, high: int) -> list[Future[bytes | None]]:
        return [pool.submit(get_event_bytes, ctx, session_id, seq) for seq in range(low, high + 1)]

    loads = [send_load(ctx, ref.sid, upto=None if _is_short(low, high) else high, pool=pool) for ref, low, high in plan]
    ancestors = {
        ref.sid: _Ahead(ref, sent, _Range(low, high, send_events(ref.sid, low, high) if _is_short(low, high) else []))
        for (ref, low, high), sent in zip(plan, loads, strict=True)
    }
    own = _own_range(ctx, loaded, start, end)
    return _SentAhead(ancestors, None if own is None else _Range(*own, send_events(manifest.sid, *own), listed=True))


def _short_range(loaded: Loaded, sent: _Range) -> Iterator[list[RawEvent]]:
    """The session's events ``sent.low`` to ``sent.high`` from the GETs sent ahead, as
    ``own_batches`` yields them: a missing event before one that is there, or one that was
    listed, is a hole (where it is the first, expiry or tampering: ``missing_start``); where
    none is there from some seq on, the events just end there."""
    manifest = loaded.manifest
    for index, seq in enumerate(range(sent.low, sent.high + 1)):
        data = sent.events[index].result()
        if data is None:
            rest = enumerate(sent.events[index + 1 :], seq + 1)
            later = next(((after, found) for after, event in rest if (found := event.result()) is not None), None)
            if later is None and not sent.listed:
                return
            if seq == loaded.first_own:
                raise missing_start(loaded, *(later or (seq, None)))
            raise IntegrityError(manifest.sid, seq, "event is missing (a hole in the log)")
        yield [decode_raw(manifest, seq, data)]


def lineage_batches(
    ctx: StoreContext,
    loaded: Loaded,
    start: int,
    end: int | None,
    *,
    _descendants: tuple[str, ...] = (),
    _ahead: _SentAhead | None = None,
) -> Iterator[tuple[Manifest, list[RawEvent]]]:
    """Events of the session and its ancestors in [start, end], in order, with the chain checked,
    as lists of events of one session (``own_batches``); a list holds only events that passed,
    so an event that fails is raised for after those before it are yielded.

    Each event's ``prev`` must be the hash of the event before it; the first
    event's is checked too when the range starts at 1 (against the manifest)
    or at a fork's first own seq (against the recorded parent hash). Ancestry
    deeper than ``MAX_FORK_DEPTH`` or circular is an integrity error. Once a
    session is encrypted (its manifest names a key, a rekey left a salt, or an
    earlier event is sealed), and whenever the store requires encryption, a
    plaintext event is refused.

    The walk goes from parent to parent as each manifest names it; a fork's recorded ancestry
    only sends the ancestors' requests ahead (``_send_ahead``), all in one round with the GETs
    of the fork's own listed events, and each is used only for the session, incarnation, fork
    seq and range the walk itself arrives at.
    """
    if _ahead is None:
        ahead = _send_ahead(ctx, loaded, start, end)
        try:
            yield from lineage_batches(ctx, loaded, start, end, _descendants=_descendants, _ahead=ahead)
        finally:
            ahead.drop_all()
        return
    manifest = loaded.manifest
    parent = manifest.parent
    lineage_ids = (*_descendants, f"{manifest.sid}@{manifest.uid}")
    prev: str | None = loaded.genesis if start <= loaded.first_own else None
    if parent is not None and not parent.copied:
        if len(lineage_ids) > MAX_FORK_DEPTH or f"{parent.sid}@{parent.uid}" in lineage_ids:
            raise IntegrityError(manifest.sid, None, f"fork ancestry is circular or deeper than {MAX_FORK_DEPTH} sessions")
        if start <= parent.seq:
            inherited_end = min(parent.seq, end) if end is not None else parent.seq
            sent = _ahead.ancestors.get(parent.sid)  # its short range, if any, is taken when the walk is there
            if sent is not None and (sent.ref != parent or sent.range.high != inherited_end):
                _ahead.drop(parent.sid)  # the ancestry named another incarnation, or fork seq
                sent = None
            ancestor = finish_load(ctx, sent.load) if sent else load(ctx, parent.sid, deleted_ok=True, upto=inherited_end)
            if ancestor.manifest.uid != parent.uid:
                raise IntegrityError(manifest.sid, None, f"parent {parent.sid!r} is not the session this fork was made from")
            if ancestor.meta.tombstone and not reads_deleted_parent(ctx, manifest, ancestor):
                raise IntegrityError(manifest.sid, None, f"fork of {parent.sid!r} is not one its delete kept (planted after it)")
            last: RawEvent | None = None
            owner = ancestor.manifest  # the session whose own event ``last`` is: the parent's, or an ancestor's
            for item in lineage_batches(ctx, ancestor, start, inherited_end, _descendants=lineage_ids, _ahead=_ahead):
                if item[1]:
                    owner, last = item[0], item[1][-1]
                yield item
            if end is None or end >= parent.seq:
                if last is None or last.seq != parent.seq:
                    raise IntegrityError(manifest.sid, parent.seq, "the parent's events up to the fork seq are missing")
                if last.hash != parent.hash and not _rekeyed_to(ctx, owner, parent.hash, last.hash):
                    raise IntegrityError(
                        manifest.sid, parent.seq, "the parent's event differs from the one this fork was made from"
                    )
        prev = parent.hash if start <= parent.seq + 1 else None
    encrypted = loaded.sealed_only or ctx.require_encryption
    sealed_before = False
    if _descendants:  # an ancestor: what was sent ahead for it, if anything
        sent_here = _ahead.ancestors.pop(manifest.sid, None)
        short = sent_here.range if sent_here is not None and sent_here.range.events else None
    else:
        short = _ahead.take_own()
    batches = (
        _short_range(loaded, short)
        if short is not None and short.low == max(start, loaded.first_own)
        else own_batches(ctx, loaded, start, end, through_end=bool(_descendants))
    )
    for batch in batches:
        for index, raw in enumerate(batch):
            envelope = raw.envelope
            failure = None
            if prev is not None and envelope.prev != prev and not same_event(ctx, manifest, envelope.prev, prev):
                failure = IntegrityError(
                    raw.session_id, raw.seq, "prev hash does not match the previous event (chain broken)", broken_link=True
                )
            elif envelope.body is None:  # sealed (an envelope carries exactly one of body and sealed)
                sealed_before = True
            elif encrypted or sealed_before:
                where = "in an encrypted session" if encrypted and not ctx.require_encryption else "where encryption is required"
                failure = IntegrityError(raw.session_id, raw.seq, f"plaintext event {where} (forged, or written before a rekey)")
            if failure is not None:
                if index:
                    yield manifest, batch[:index]
                raise failure
            prev = raw.hash
        yield manifest, batch


def event_hash(ctx: StoreContext, loaded: Loaded, seq: int) -> str:
    """The hash of the lineage's event at ``seq`` (an ancestor's for inherited seqs)."""
    manifest = loaded.manifest
    parent = manifest.parent
    if parent is not None and not parent.copied and seq <= parent.seq:
        if seq == parent.seq:
            return parent.hash
        return event_hash(ctx, load(ctx, parent.sid, deleted_ok=True), seq)  # bounded by the fork depth check of reads
    data = get_event_bytes(ctx, manifest.sid, seq)
    if data is None:
        raise InvalidInputError(f"session {manifest.sid!r} has no event at seq {seq}")
    return decode_raw(manifest, seq, data).hash


# ---- what readers ask for -------------------------------------------------------


def check_range(start: int, end: int | None) -> None:
    validate_seq(start)
    if end is not None:
        validate_seq(end, allow_zero=True)


def replay(ctx: StoreContext, session_id: str, *, start: int = 1, end: int | None = None) -> Iterator[Event]:
    """The audit view: every event in [start, end] (a fork's inherited ones included), streamed.

    Raises ``SessionNotFoundError``, ``SessionExpiredError``, ``IntegrityError``
    (at the first event that does not decode, authenticate or chain) or
    ``KeyRequiredError`` — lazily, as iteration reaches the problem.
    """
    check_range(start, end)
    loaded = load(ctx, session_id, upto=end, first_page=start == 1)
    for manifest, batch in lineage_batches(ctx, loaded, start, end):
        plain = manifest.kid is None  # else a plaintext body is refused by open_body
        for raw in batch:
            env = raw.envelope
            body = env.body if plain and env.body is not None else open_body(ctx, manifest, raw)
            yield Event(raw.session_id, raw.seq, env.ts, env.wid, env.kid, raw.hash, body, env.prev)


def folded(ctx: StoreContext, session_id: str) -> ContextFolder:
    """The whole lineage folded into the context view: replay's events, without making an ``Event`` of each."""
    folder = ContextFolder()
    add = folder.add
    for manifest, batch in lineage_batches(ctx, load(ctx, session_id, first_page=True), 1, None):
        plain = manifest.kid is None  # else a plaintext body is refused by open_body
        for raw in batch:
            body = raw.envelope.body
            add(raw.seq, body if plain and body is not None else open_body(ctx, manifest, raw))
    return folder


def context(ctx: StoreContext, session_id: str, *, repair: Repair = "error") -> list[Message]:
    """The context view: what an agent should send to a model next (see ``evstore._views``)."""
    if repair not in ("error", "drop", "none"):
        raise InvalidInputError(f"repair must be error, drop or none, not {repair!r:.40}")
    return folded(ctx, session_id).messages(repair)


def info(ctx: StoreContext, session_id: str) -> SessionInfo:
    loaded = load(ctx, session_id, every=True)  # every segment, to count them
    head = find_head(ctx, loaded)
    manifest = loaded.manifest
    forks = fork_points(ctx, manifest.uid, loaded.meta.forks)  # a GET per marker: info is not a hot path
    return SessionInfo(
        session_id,
        manifest.uid,
        manifest.created,
        manifest.retention,
        head,
        rekeyed_key_id(ctx, loaded),
        manifest.parent,
        sorted(forks),
        len(loaded.meta.segments),
        dict(sorted(forks.items())),
    )


def list_sessions(ctx: StoreContext, prefix: str = "", *, start_after: str = "", limit: int | None = None) -> Iterator[str]:
    """Session ids in order (deleted and expired remnants included), one LIST per 1,000."""
    if prefix and not all(c.isalnum() or c in "._-" for c in prefix):
        raise InvalidInputError(f"invalid session id prefix {prefix[:80]!r}")
    layout = ctx.layout
    after = layout.session_prefix(start_after) if start_after else ""
    count = 0
    while True:
        page = ctx.backend.list_page(layout.sessions + prefix, start_after=after, delimiter="/")
        for common in page.prefixes:
            yield common[len(layout.sessions) : -1]
            count += 1
            if limit is not None and count >= limit:
                return
        if not page.truncated:
            return
        after = page.next_start_after


def _follow_on(prefix: str, page: ListPage) -> str | None:
    """``_list_on`` for a page listed with delimiter "/", whose last entry may be a common prefix
    (``<seq>/``, junk among the events, or ``young/`` past them): where the LIST after the
    truncated ``page`` starts, past its last entry and any junk after it; None when no event can
    follow. Pure."""
    last = max(page.objects[-1].key if page.objects else "", page.prefixes[-1] if page.prefixes else "")
    name = last[len(prefix) :]
    if not last or parse_seq(name) is not None:
        return page.next_start_after
    after = seq_after(name)
    return None if after is None else max(prefix + after, page.next_start_after)


class Polled(msgspec.Struct, frozen=True):
    """What one ``poll`` found: the new events (checked, in order), and where the next LIST
    starts when the page ended among the events (None: the log's end was reached)."""

    events: list[RawEvent]
    start: str | None


def poll(ctx: StoreContext, manifest: Manifest, last: int, prev_hash: str | None, start: str | None = None) -> Polled:
    """The events after seq ``last`` that one LIST page shows (``start``: where a page ended
    among the events), each chained to the one before (to ``prev_hash`` when given).

    One LIST with ``StartAfter`` = event ``last``'s key (or ``start``) and delimiter "/": the
    new events, then the session's other names, where ``forks/``, ``rekeys/``, ``segments/``
    and ``young/`` are one common prefix each, so a page with no new event lists the manifest
    and at most six other entries whatever the session's length (without the delimiter it
    listed every segment: a full page of 1,000 keys, about 290 KB from S3, past 24,000
    events). The new events are read ``concurrency`` GETs at a time. ``SessionNotFoundError``
    once the session is deleted: the page shows its tombstone, or at the log's end no longer
    its manifest. Names planted past the events that fill the page are paged over (a LIST per
    1,000 of them) to see those two.
    """
    session_id = manifest.sid
    layout = ctx.layout
    prefix = layout.session_prefix(session_id)
    page = ctx.backend.list_page(prefix, start_after=start or layout.event_key(session_id, last), delimiter="/")
    names = [info.key[len(prefix) :] for info in page.objects]
    last_entry = max(names[-1] if names else "", page.prefixes[-1][len(prefix) :] if page.prefixes else "")
    start = None  # the next LIST is from the last event, unless this page ended among the events:
    if page.truncated and last_entry <= _LAST_SEQ_NAME:
        start = _follow_on(prefix, page)  # then from past it, and past any junk it ended in
    others = [name for name in names if name > _LAST_SEQ_NAME]
    rest = page
    while start is None and rest.truncated:  # the events end here, and planted names fill the page after them
        rest = ctx.backend.list_page(prefix, start_after=rest.next_start_after, delimiter="/")
        others += [name for info in rest.objects if (name := info.key[len(prefix) :]) in ("manifest", "tombstone")]
    if "tombstone" in others:
        raise SessionNotFoundError(session_id, "was deleted", deleted=True)  # before reading what may be its fence
    seqs = [seq for seq in map(parse_seq, names) if seq is not None]
    fetched = ctx.executor().map(lambda seq: get_event_bytes(ctx, session_id, seq), seqs)
    events: list[RawEvent] = []
    for seq, data in zip(seqs, fetched, strict=True):
        if seq != last + 1 or data is None:
            raise IntegrityError(session_id, last + 1, "event is missing (a hole in the log)")
        raw = decode_at(ctx, manifest, seq, data)
        if prev_hash is not None and raw.envelope.prev != prev_hash:
            raise IntegrityError(session_id, seq, "prev hash does not match the previous event (chain broken)", broken_link=True)
        events.append(raw)
        last, prev_hash = seq, raw.hash
    if start is None and "manifest" not in others:
        raise SessionNotFoundError(session_id, "was deleted", deleted=True)
    return Polled(events, start)


def follow(
    ctx: StoreContext,
    session_id: str,
    *,
    after: int = 0,
    after_hash: str | None = None,
    interval: float = 1.0,
    should_stop: Callable[[], bool] = lambda: False,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[Event]:
    """Events after seq ``after`` as other writers append them, until ``should_stop()``: a
    ``poll`` at a time (an idle one is one LIST of the manifest and at most six other names),
    each new event opened and chained to the previous one (to event ``after`` too when
    ``after_hash`` is given). ``sleep(interval)`` runs between polls that found the log's end.
    ``SessionNotFoundError`` once the session is deleted. For a fork, ``after`` must be at
    least the fork seq (the inherited events are the parent's; ``replay`` reads them).
    """
    loaded = load(ctx, session_id)
    if after < loaded.first_own - 1:
        raise InvalidInputError(f"follow a fork from its fork seq {loaded.first_own - 1} on (replay reads the earlier events)")
    manifest = loaded.manifest
    last = after
    prev_hash = after_hash
    start: str | None = None
    while not should_stop():
        polled = poll(ctx, manifest, last, prev_hash, start)
        for raw in polled.events:
            yield to_event(ctx, manifest, raw)
            last, prev_hash = raw.seq, raw.hash
            if should_stop():
                return
        start = polled.start
        if start is None:
            sleep(interval)
