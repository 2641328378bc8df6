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

Shred destroys the session's salt (manifest, and the salt object of a
session encrypted by rekey), then every object: a copy of an event that
survives elsewhere can never be opened again, since its key was derived from
that salt.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

import msgspec

from . import _read
from ._backends import ObjectExists, PreconditionFailed
from ._chain import Receipt
from ._codec import FORMAT_VERSION, RekeyRecord, b64encode, encode_json, format_ts, header_aad, sha256_hex
from ._context import WRITE_ID_METADATA, StoreContext
from ._crypto import new_salt, seal
from ._errors import IntegrityError, InvalidInputError, WriteConflictError
from ._forks import forks_of, purge
from ._read import Loaded, Meta, salt_key

_MAX_ROUNDS = 8


class VerifyResult(msgspec.Struct, frozen=True):
    session_id: str
    receipt: Receipt
    events: int
    sealed_checked: int
    sealed_unchecked: int
    expected: Receipt | None = None
    #: The expected receipt names an event a rekey re-sealed: it is extended, as recorded in a rekey record.
    superseded_by_rekey: bool = False


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
    objects_removed: int
    salt_destroyed: bool
    shredded_forks: list[str]


def _ensure_salt(ctx: StoreContext, loaded: Loaded) -> None:
    """A plaintext session gets a salt object before its first sealed event (created once)."""
    if loaded.manifest.salt is not None:
        return
    with contextlib.suppress(ObjectExists):  # an earlier or concurrent rekey made it
        ctx.backend.create(
            salt_key(ctx, loaded.manifest.sid), b64encode(new_salt()).encode(), tags=ctx.tags_for(loaded.manifest.retention)
        )


def rekey(ctx: StoreContext, session_id: str) -> RekeyResult:
    """Re-seal the session's events under the active key (encrypting a plaintext session)."""
    kid = ctx.keyring.active
    if kid is None:
        raise InvalidInputError("rekey needs an active key (EVSTORE_KEY or a keyring with an active key)")
    loaded = _read.load(ctx, session_id, every=True)
    manifest = loaded.manifest
    _ensure_salt(ctx, loaded)
    key = _read.session_key(ctx, manifest, kid)
    prefix = ctx.layout.session_prefix(session_id)
    segments = [loaded.meta.segment_key(ctx.layout, session_id, segment) for segment in loaded.meta.segments]
    if segments:
        ctx.backend.delete_many(segments)
    bare = Loaded(manifest, loaded.genesis, Meta())
    resealed = current = 0
    records: list[str] = []
    start = loaded.first_own
    prev_new: str | None = None  # hash of the re-sealed event before ``start``
    for _ in range(_MAX_ROUNDS):
        plans: list[tuple[int, str, bytes, str, dict[str, str]]] = []  # seq, old hash, new bytes, etag, metadata
        for raw in _read.own_raw(ctx, bare, start, None):
            stored = ctx.backend.get(ctx.layout.event_key(session_id, raw.seq))
            if sha256_hex(stored.data) != raw.hash:
                raise WriteConflictError(session_id, raw.seq, "the event changed while rekey read it")
            env = raw.envelope
            prev = prev_new if prev_new is not None else env.prev
            if env.kid == kid and env.prev == prev:
                current += 1
                prev_new = raw.hash
                continue
            body = _read.open_body(ctx, manifest, raw)
            new_env = msgspec.structs.replace(env, v=FORMAT_VERSION, prev=prev, kid=kid, body=None, sealed=None)
            plaintext = encode_json(body)
            new_env = msgspec.structs.replace(new_env, sealed=b64encode(seal(key, plaintext, header_aad(new_env))))
            data = encode_json(new_env)
            plans.append((raw.seq, raw.hash, data, stored.etag, {WRITE_ID_METADATA: env.wid}))
            prev_new = sha256_hex(data)
        if not plans:
            break
        record = RekeyRecord(
            session_id,
            manifest.uid,
            format_ts(ctx.clock()),
            kid,
            plans[0][0],
            [p[1] for p in plans],
            [sha256_hex(p[2]) for p in plans],
        )
        record_key = f"{prefix}rekeys/{format_ts(ctx.clock())}-{os.urandom(4).hex()}"
        ctx.backend.create(record_key, encode_json(record), tags=ctx.tags_for(manifest.retention))
        records.append(record_key)
        ctx.forget_records(session_id)
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
        start = plans[-1][0] + 1
    return RekeyResult(session_id, kid, resealed, current, records)


def shred(ctx: StoreContext, session_id: str, *, include_forks: bool = False) -> ShredResult:
    """Destroy the session's salt, then its objects: no surviving copy can be opened again."""
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
    salt_object_key = salt_key(ctx, session_id)
    salt_object = ctx.has_object(salt_object_key)
    # the salt goes first: from here on no surviving copy of an event can be opened
    ctx.backend.delete_many([ctx.layout.manifest_key(session_id), salt_object_key])
    removed = 1 + salt_object + purge(ctx, session_id)
    had_salt = manifest.salt is not None or salt_object
    ctx.forget_keys(session_id)
    return ShredResult(session_id, removed, had_salt, shredded_forks)
