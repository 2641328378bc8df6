"""Audit: verify and its receipts, re-sealing a session under the active key (rekey and
its records), and crypto-shredding.

Verify reads the whole lineage through the read path and checks contiguity, every
``prev``, and every GCM tag a configured key can open; its receipt (head seq and
hash) lets an auditor re-check later that the log still extends it.

Rekey rewrites history, so it first records what it rewrites: a rekey record
``sessions/<sid>/rekeys/<time>-<id>`` (created with ``If-None-Match``) holds,
for every seq it re-seals, the hash of the old object and of the new one. The
chain then accepts either hash of a re-sealed event as its successor's
``prev``: a reader in the middle of a rekey, a writer that appended with the
old hash, and a receipt issued before the rekey all stay checkable — the
receipt as *superseded* by that record, never silently invalid.

Each event is replaced conditionally on the ETag it was read with, keeping
its seq, timestamp, write id and message. Events appended meanwhile are
re-sealed in further rounds (bounded). Segments hold old bytes, so rekey
removes them first; ``compact`` rebuilds them.

Shred fences the session as delete does, then destroys its salt (the manifest's,
and the salt object of a session encrypted by rekey), then every object's
content: a copy of an event that survives elsewhere can never be opened again,
since its key was derived from that salt, and no append lands after it.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

import msgspec

from . import _read
from ._backends import ObjectExists, ObjectInfo, ObjectMissing, PreconditionFailed
from ._chain import Receipt, VerifyResult
from ._codec import (
    FORMAT_VERSION,
    MAX_SMALL_OBJECT_BYTES,
    Body,
    Manifest,
    RekeyRecord,
    b64encode,
    encode_json,
    encode_manifest,
    fence_of,
    format_ts,
    header_aad,
    parse_ts,
    sha256_hex,
)
from ._context import FENCE_HOLD, WRITE_ID_METADATA, StoreContext
from ._crypto import new_salt, seal
from ._errors import IntegrityError, InvalidInputError, WriteConflictError
from ._forks import fence, forks_of
from ._ids import parse_seq
from ._read import Loaded, Meta, RawEvent, salt_key

_MAX_ROUNDS = 8


def verify(ctx: StoreContext, session_id: str, *, expect: Receipt | None = None, end: int | None = None) -> VerifyResult:
    """Check contiguity, every prev, every GCM tag a configured key can open; return the receipt.

    With ``expect``, fail (``IntegrityError``) unless the log still extends
    that receipt: its event at ``expect.seq`` has ``expect.hash``. With ``end``,
    only the events up to that seq are checked (the receipt is of that part).
    """
    loaded = _read.load(ctx, session_id, upto=end)
    head = Receipt(loaded.manifest.base, loaded.genesis)
    events = checked = unchecked = 0
    expected_found = expect is None
    if expect is not None and expect.seq == head.seq:  # the receipt of an empty session names its manifest
        if expect.hash != loaded.genesis:
            raise IntegrityError(session_id, None, "does not match the receipt of its empty log (history rewritten)")
        expected_found = True
    superseded = False
    for manifest, raw in _read.lineage(ctx, loaded, 1, end):
        events += 1
        if raw.envelope.kid is not None:
            if ctx.keyring.get(raw.envelope.kid) is None:
                _read.check_key_id(ctx, manifest, raw)
                unchecked += 1
            else:
                _read.open_body(ctx, manifest, raw)
                checked += 1
        else:
            _read.open_body(ctx, manifest, raw)
        if expect is not None and raw.seq == expect.seq:
            if raw.hash != expect.hash:
                if _read.canonical_hash(ctx, manifest, expect.hash) != raw.hash:
                    raise IntegrityError(
                        session_id, raw.seq, f"does not match receipt {expect.seq}:{expect.hash[:12]}… (history rewritten)"
                    )
                superseded = True
            expected_found = True
        head = Receipt(raw.seq, raw.hash)
    if not expected_found:
        assert expect is not None
        raise IntegrityError(session_id, expect.seq, f"receipt names seq {expect.seq} but the log ends at {head.seq} (truncated)")
    return VerifyResult(session_id, head, events, checked, unchecked, expect, superseded)


@dataclass(frozen=True)
class Audit:
    """What ``audit`` found: the verified part of the session and, if verification failed, where."""

    #: The verified part: the whole session, or the events before the failure.
    verified: VerifyResult
    #: The first failure (at ``failure.seq``), or None: nothing from there on is verified.
    failure: IntegrityError | None = None


def audit(ctx: StoreContext, session_id: str) -> Audit:
    """``verify``, and when it fails at a seq, the verified part before it (the events that
    chain intact from the manifest): what an auditor's report shows. A failure that no
    verified part precedes (the manifest, the ancestry) is raised."""
    try:
        return Audit(verify(ctx, session_id))
    except IntegrityError as failure:
        if failure.seq is None:
            raise
        try:
            return Audit(verify(ctx, session_id, end=failure.seq - 1), failure)
        except IntegrityError:
            raise failure from None


@dataclass(frozen=True)
class RekeyResult:
    session_id: str
    key_id: str
    resealed: int
    already_current: int
    records: list[str]


@dataclass(frozen=True)
class ShredResult:
    session_id: str
    #: Objects destroyed: the event objects emptied (each now holds the fence's bytes) and every
    #: other object removed (segments, salt object, rekey records, fork markers).
    objects_removed: int
    salt_destroyed: bool
    shredded_forks: list[str]
    #: The seq of the fence (as ``delete``'s): no append is acknowledged at it or below it.
    fenced_at: int = 0
    #: When gc may remove what is left (the manifest without its salt, the tombstone, the emptied
    #: seq slots): ``FENCE_HOLD`` after the fence, as for ``delete``.
    removable_after: str = ""


def _ensure_salt(ctx: StoreContext, loaded: Loaded) -> None:
    """A plaintext session gets a salt object before its first sealed event (created once)."""
    if loaded.manifest.salt is not None:
        return
    with contextlib.suppress(ObjectExists):  # an earlier or concurrent rekey made it
        ctx.backend.create(
            salt_key(ctx, loaded.manifest.sid), b64encode(new_salt()).encode(), tags=ctx.tags_for(loaded.manifest.retention)
        )


@dataclass(frozen=True)
class _Checked:
    """An own event as rekey read and checked it, before it writes anything."""

    raw: RawEvent
    #: The ETag it was read with: its replacement is conditional on it.
    etag: str
    #: Its body, opened, when rekey re-seals it; None when it stays as it is (``current``).
    body: Body | None


def _read_round(
    ctx: StoreContext, manifest: Manifest, bare: Loaded, start: int, kid: str, before: str, *, keep_first: bool
) -> list[_Checked]:
    """Read the session's own events from ``start`` to its head, and check each as a reader
    would, before rekey writes anything: it is the object stored now, it chains to the event
    before it (the first to ``before``: the session's origin, or the hash the event before
    ``start`` has now; a hash a rekey record maps to it counts), and each one to re-seal opens.
    An event stays as it is (``current``) when it is sealed under ``kid`` and every event before
    it in this rekey stays too, its ``prev`` naming that one's hash (with ``keep_first``, the
    first event keeps the ``prev`` it has). Raises ``IntegrityError`` (a damaged or forged
    event, a key the session needs and the keyring lacks) before any write: the caller writes
    only once the whole round is read."""
    session_id = manifest.sid
    found: list[_Checked] = []
    prev = before
    resealing = False
    for raw in _read.own_raw(ctx, bare, start, None):
        stored = ctx.backend.get(ctx.layout.event_key(session_id, raw.seq))
        if sha256_hex(stored.data) != raw.hash:
            raise WriteConflictError(session_id, raw.seq, "the event changed while rekey read it")
        env = raw.envelope
        if env.prev != prev and not _read.same_event(ctx, manifest, env.prev, prev):
            raise IntegrityError(
                session_id, raw.seq, "prev hash does not match the previous event (chain broken)", broken_link=True
            )
        kept_prev = env.prev == prev or (keep_first and not found)
        resealing = resealing or env.kid != kid or not kept_prev
        found.append(_Checked(raw, stored.etag, _read.open_body(ctx, manifest, raw) if resealing else None))
        prev = raw.hash
    return found


def rekey(ctx: StoreContext, session_id: str) -> RekeyResult:
    """Re-seal the session's events under the active key (encrypting a plaintext session).

    Each round reads and checks every event it re-seals (``_read_round``) before its first
    write, so a rekey that fails on a damaged event or a missing key leaves the session as it
    was. Then: the salt object (a plaintext session), the segments removed, the rekey record,
    each event replaced. Interrupted between those writes, it leaves a state that running it
    again completes (docs/security.md)."""
    kid = ctx.keyring.active
    if kid is None:
        raise InvalidInputError("rekey needs an active key (EVSTORE_KEY or a keyring with an active key)")
    loaded = _read.load(ctx, session_id, every=True)
    manifest = loaded.manifest
    parent = manifest.parent
    origin = parent.hash if parent is not None and not parent.copied else loaded.genesis
    bare = Loaded(manifest, loaded.genesis, Meta())
    start = loaded.first_own
    checked = _read_round(ctx, manifest, bare, start, kid, origin, keep_first=True)
    if manifest.salt is not None or loaded.meta.salted:
        key = _read.session_key(ctx, manifest, kid)  # a junk salt object fails here, before any write
    else:
        _ensure_salt(ctx, loaded)  # the first write
        key = _read.session_key(ctx, manifest, kid)
    segments = [loaded.meta.segment_key(ctx.layout, session_id, segment) for segment in loaded.meta.segments]
    if segments:
        ctx.backend.delete_many(segments)
    resealed = current = 0
    records: list[str] = []
    prev_new: str | None = None  # hash of the re-sealed event before ``start``
    for round_ in range(_MAX_ROUNDS):
        if round_:
            assert prev_new is not None
            checked = _read_round(ctx, manifest, bare, start, kid, prev_new, keep_first=False)
        plans: list[tuple[int, str, bytes, str, dict[str, str]]] = []  # seq, old hash, new bytes, etag, metadata
        for item in checked:
            raw, env = item.raw, item.raw.envelope
            if item.body is None:
                current += 1
                prev_new = raw.hash
                continue
            prev = prev_new if prev_new is not None else env.prev
            new_env = msgspec.structs.replace(env, v=FORMAT_VERSION, prev=prev, kid=kid, body=None, sealed=None)
            plaintext = encode_json(item.body)
            new_env = msgspec.structs.replace(new_env, sealed=b64encode(seal(key, plaintext, header_aad(new_env))))
            data = encode_json(new_env)
            plans.append((raw.seq, raw.hash, data, item.etag, {WRITE_ID_METADATA: env.wid}))
            prev_new = sha256_hex(data)
        if checked:
            start = checked[-1].raw.seq + 1
        if not plans:
            break
        records.append(_write_record(ctx, manifest, kid, plans[0][0], [p[1] for p in plans], [sha256_hex(p[2]) for p in plans]))
        for seq, _, data, etag, metadata in plans:
            try:
                ctx.backend.replace(
                    ctx.layout.event_key(session_id, seq),
                    data,
                    etag=etag,
                    metadata=metadata,
                    tags=ctx.tags_for(manifest.retention),
                )
            except PreconditionFailed:
                # a retried replace whose first attempt succeeded meets its own bytes: that is success
                if ctx.backend.get(ctx.layout.event_key(session_id, seq)).data != data:
                    raise WriteConflictError(session_id, seq, "the event was replaced concurrently (another rekey?)") from None
            resealed += 1
    if not (records or current) and _read.rekeyed_key_id(ctx, loaded) != kid:
        # no event of its own (a fork rekeyed before its first): a record with nothing re-sealed
        # declares the key id its first event will be sealed under (``_read.check_key_id``)
        records.append(_write_record(ctx, manifest, kid, start, [], []))
    return RekeyResult(session_id, kid, resealed, current, records)


def _write_record(ctx: StoreContext, manifest: Manifest, kid: str, first: int, old: list[str], new: list[str]) -> str:
    """Create a rekey record (``RekeyRecord``) of the session; its key."""
    at = format_ts(ctx.clock())
    record = RekeyRecord(manifest.sid, manifest.uid, at, kid, first, old, new)
    key = f"{ctx.layout.session_prefix(manifest.sid)}rekeys/{at}-{os.urandom(4).hex()}"
    ctx.backend.create(key, encode_json(record), tags=ctx.tags_for(manifest.retention))
    ctx.forget_records(manifest.sid)
    return key


def shred(ctx: StoreContext, session_id: str, *, include_forks: bool = False) -> ShredResult:
    """Fence the session as ``delete`` does, then destroy its salt and every object's content:
    no surviving copy can be opened again, and no writer's append is acknowledged after it.

    The fence goes first, then the salt (the manifest is replaced by one without it, the salt
    object removed), then the event objects are overwritten with the fence's bytes, conditionally
    on their ETags, and every other object is removed. The seq slots stay taken: a writer still
    inside its lease, whatever head it holds, meets a 412 at its next seq and reads the delete
    (``SessionNotFoundError``), where removed events would have let its PUT land, acknowledged
    and unreadable. gc removes what is left after ``FENCE_HOLD``, as for a deleted session.
    Requests: ``delete``'s, GET tombstone, HEAD salt object, a GET and a conditional PUT of the
    manifest (an encrypted session), a LIST per 1,000 objects, a conditional PUT per event
    (2 x ``concurrency`` in flight) and a DELETE per 1,000 others.
    """
    loaded = _read.load(ctx, session_id, deleted_ok=True)
    manifest = loaded.manifest
    forks = forks_of(ctx, session_id, manifest.uid)
    if forks and not include_forks:
        raise InvalidInputError(
            f"session {session_id!r} has live forks that read its events ({', '.join(forks)[:200]}): "
            "shred them too (--include-forks) or delete them first"
        )
    shredded_forks: list[str] = []
    for child in forks:
        result = shred(ctx, child, include_forks=True)
        shredded_forks += [child, *result.shredded_forks]
    fenced = fence(ctx, loaded)  # None: deleted and fenced already, its fence stands
    layout = ctx.layout
    tombstone = ctx.backend.get(layout.tombstone_key(session_id), max_bytes=MAX_SMALL_OBJECT_BYTES).data
    salt_object_key = salt_key(ctx, session_id)
    salt_object = ctx.has_object(salt_object_key)
    # the salt goes first: from here on no surviving copy of an event can be opened
    if manifest.salt is not None:
        stored = ctx.backend.get(layout.manifest_key(session_id), max_bytes=MAX_SMALL_OBJECT_BYTES)
        saltless = encode_manifest(msgspec.structs.replace(manifest, kid=None, salt=None))
        tags = ctx.tags_for(manifest.retention)
        try:
            ctx.backend.replace(layout.manifest_key(session_id), saltless, etag=stored.etag, tags=tags)
        except PreconditionFailed:
            raise WriteConflictError(session_id, 0, "its manifest changed while shred read it: run it again") from None
    if salt_object:
        ctx.backend.delete_many([salt_object_key])
    ctx.forget_keys(session_id)
    if fenced is None:  # fenced by an earlier delete: its fence is the highest seq, its tombstone says when
        fenced_at = _read.find_head(ctx, loaded, require_start=False)
        deleted = fence_of(tombstone)
        removable_after = format_ts(parse_ts(deleted.deleted) + FENCE_HOLD) if deleted is not None else ""
    else:
        fenced_at, removable_after = fenced.fenced_at, fenced.removable_after
    removed = salt_object + _empty_objects(ctx, loaded, tombstone, fenced_at)
    return ShredResult(session_id, removed, manifest.salt is not None or salt_object, shredded_forks, fenced_at, removable_after)


def _empty_objects(ctx: StoreContext, loaded: Loaded, fence_bytes: bytes, fenced_at: int) -> int:
    """Overwrite each of the session's event objects below the fence at ``fenced_at`` with
    ``fence_bytes`` (its slot stays taken) and remove every other object but the manifest, the
    tombstone and the fence; return how many. Names past the fence were planted after it: gc
    removes them with the rest."""
    session_id = loaded.manifest.sid
    prefix = ctx.layout.session_prefix(session_id)
    kept = {ctx.layout.manifest_key(session_id), ctx.layout.tombstone_key(session_id)}
    tags = ctx.tags_for(loaded.manifest.retention)
    events: list[ObjectInfo] = []
    others: list[str] = []
    for info in ctx.backend.list(prefix):
        seq = parse_seq(info.key[len(prefix) :])
        if seq is not None:
            if seq < fenced_at:
                events.append(info)
        elif info.key not in kept:
            others.append(info.key)

    def overwrite(info: ObjectInfo) -> bool:
        """Whether the object at ``info.key`` now holds ``fence_bytes`` (False: it is gone)."""
        etag = info.etag
        for _ in range(_MAX_ROUNDS):
            try:
                ctx.backend.replace(info.key, fence_bytes, etag=etag, tags=tags)
                return True
            except PreconditionFailed:
                try:  # changed since it was listed (a rekey re-sealed it), or listed without an ETag
                    etag = ctx.backend.head(info.key).etag
                except ObjectMissing:
                    return False  # removed meanwhile (expiry of an old event): no writer's next seq
        seq = parse_seq(info.key[len(prefix) :]) or 0
        raise WriteConflictError(session_id, seq, "the event kept changing while shred emptied it: run it again")

    emptied = sum(done for _, done in ctx.prefetched(events, overwrite, ctx.concurrency * 2))
    for start in range(0, len(others), 1000):
        ctx.backend.delete_many(others[start : start + 1000])
    return emptied + len(others)
