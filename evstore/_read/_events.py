"""One event object: its bytes, decoded (``RawEvent``), opened with the session key (``Event``),
and the rekey records that say which hashes a rekey replaced.

Above ``_manifest``: a session key comes from the manifest's salt (or the salt object a rekey
wrote), and a sealed event's key id must be the manifest's or one a rekey record names.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import msgspec

from .._backends import ObjectMissing
from .._codec import (
    MAX_RECORD_BYTES,
    MAX_SMALL_OBJECT_BYTES,
    Body,
    Envelope,
    Manifest,
    RekeyRecord,
    b64decode,
    b64decode_canonical,
    decode_body,
    decode_envelope,
    fence_of,
    header_aad,
)
from .._context import StoreContext
from .._crypto import derive_session_key, open_sealed
from .._errors import IntegrityError, KeyRequiredError, SessionNotFoundError
from .._views import Event
from ._manifest import Loaded

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM


_sha256 = hashlib.sha256


class RawEvent(msgspec.Struct, frozen=True, gc=False):
    session_id: str
    seq: int
    data: bytes
    envelope: Envelope
    hash: str


def get_event_bytes(ctx: StoreContext, session_id: str, seq: int) -> bytes | None:
    """An event object's bytes (None if absent); one larger than any event could be is refused."""
    try:
        return ctx.backend.get(ctx.layout.event_key(session_id, seq), max_bytes=ctx.max_event_object_bytes).data
    except ObjectMissing:
        return None


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
