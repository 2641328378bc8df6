"""A session's manifest and the listing of its other objects: ``load`` and what it finds.

The lowest room of the read path: one GET of the manifest and a LIST of the names after the
events (tombstone, salt, rekey records, segments, fork markers), and which forks a (deleted)
session keeps alive. Nothing here reads an event.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

import msgspec

from .._backends import ListPage, ObjectInfo, ObjectMissing
from .._codec import MAX_SMALL_OBJECT_BYTES, Manifest, decode_manifest, fence_of, sha256_hex
from .._context import FENCE_HOLD, StoreContext
from .._errors import IntegrityError, InvalidInputError, SessionExpiredError, SessionNotFoundError
from .._ids import YOUNG, Layout, parse_fork_marker, parse_segment, parse_seq, validate_session_id

if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor


#: Names per LIST page of the loose events a chain of segments covers (S3's most): the pages
#: go out side by side with the segment GETs, one per this many events (``_vouching._listed_md5s``);
#: the first of them is listed with the manifest for a read from seq 1 (``_list_first``).
_LISTED = 1000

#: A read of the non-event objects stops at the page that shows this many young segments
#: (``young/``, listed last, newest first): automatic compaction's chain after its newest top-level
#: segment is among the newest 81 (63 of the lowest level, 15 and 3 of the next). Planted names that
#: push them out cost requests (their loose events are read), not truth.
_YOUNG_NEEDED = 128


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
