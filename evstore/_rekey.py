"""Re-sealing a session under the active key, and crypto-shredding.

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
from typing import TYPE_CHECKING

import msgspec

from ._backends import ObjectExists, ObjectMissing, PreconditionFailed
from ._codec import FORMAT_VERSION, b64encode, encode_json, format_ts, header_aad, sha256_hex
from ._crypto import new_salt, seal
from ._errors import InvalidInputError, WriteConflictError
from ._store import WRITE_ID_METADATA, _Loaded

if TYPE_CHECKING:
    from ._store import Store

_MAX_ROUNDS = 8


class RekeyRecord(msgspec.Struct, frozen=True):
    sid: str
    uid: str
    at: str
    kid: str
    first: int
    old: list[str]
    new: list[str]


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


def _salt_key(store: Store, session_id: str) -> str:
    return store.layout.session_prefix(session_id) + "salt"


def _ensure_salt(store: Store, loaded: _Loaded) -> None:
    """A plaintext session gets a salt object before its first sealed event (created once)."""
    if loaded.manifest.salt is not None:
        return
    with contextlib.suppress(ObjectExists):  # an earlier or concurrent rekey made it
        store.backend.create(
            _salt_key(store, loaded.manifest.sid), b64encode(new_salt()).encode(), tags=store.tags_for(loaded.manifest.retention)
        )


def rekey(store: Store, session_id: str) -> RekeyResult:
    kid = store.keyring.active
    if kid is None:
        raise InvalidInputError("rekey needs an active key (EVSTORE_KEY or a keyring with an active key)")
    loaded = store._load(session_id)
    manifest = loaded.manifest
    _ensure_salt(store, loaded)
    key = store._session_key(manifest, kid)
    prefix = store.layout.session_prefix(session_id)
    segments = [store.layout.segment_key(session_id, a, b) for a, b in loaded.meta.segments]
    if segments:
        store.backend.delete_many(segments)
    bare = _Loaded(manifest, loaded.genesis, type(loaded.meta)())
    resealed = current = 0
    records: list[str] = []
    start = loaded.first_own
    prev_new: str | None = None  # hash of the re-sealed event before ``start``
    for _ in range(_MAX_ROUNDS):
        plans: list[tuple[int, str, bytes, str, dict[str, str]]] = []  # seq, old hash, new bytes, etag, metadata
        for raw in store._own_raw(bare, start, None):
            stored = store.backend.get(store.layout.event_key(session_id, raw.seq))
            if sha256_hex(stored.data) != raw.hash:
                raise WriteConflictError(session_id, raw.seq, "the event changed while rekey read it")
            env = raw.envelope
            prev = prev_new if prev_new is not None else env.prev
            if env.kid == kid and env.prev == prev:
                current += 1
                prev_new = raw.hash
                continue
            body = store._open_body(manifest, raw)
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
            format_ts(store.clock()),
            kid,
            plans[0][0],
            [p[1] for p in plans],
            [sha256_hex(p[2]) for p in plans],
        )
        record_key = f"{prefix}rekeys/{format_ts(store.clock())}-{os.urandom(4).hex()}"
        store.backend.create(record_key, encode_json(record), tags=store.tags_for(manifest.retention))
        records.append(record_key)
        store._forget_aliases(session_id)
        for seq, _, data, etag, metadata in plans:
            try:
                store.backend.replace(
                    store.layout.event_key(session_id, seq),
                    data,
                    etag=etag,
                    metadata=metadata,
                    tags=store.tags_for(manifest.retention),
                )
            except PreconditionFailed:
                # a retried replace whose first attempt succeeded meets its own bytes: that is success
                if store.backend.get(store.layout.event_key(session_id, seq)).data != data:
                    raise WriteConflictError(session_id, seq, "the event was replaced concurrently (another rekey?)") from None
            resealed += 1
        start = plans[-1][0] + 1
    return RekeyResult(session_id, kid, resealed, current, records)


def shred(store: Store, session_id: str, *, include_forks: bool = False) -> ShredResult:
    loaded = store._load(session_id, deleted_ok=True)
    manifest = loaded.manifest
    forks = store.live_forks(session_id, manifest.uid)
    if forks and not include_forks:
        raise InvalidInputError(
            f"session {session_id!r} has live forks that read its events ({', '.join(forks)[:200]}): "
            "shred them too (--include-forks) or delete them first"
        )
    shredded_forks: list[str] = []
    for child in forks:
        result = shred(store, child, include_forks=True)
        shredded_forks += [child, *result.shredded_forks]
    salt_key = _salt_key(store, session_id)
    salt_object = store.has_object(salt_key)
    # the salt goes first: from here on no surviving copy of an event can be opened
    store.backend.delete_many([store.layout.manifest_key(session_id), salt_key])
    removed = 1 + salt_object + store.purge(session_id)
    had_salt = manifest.salt is not None or salt_object
    store._forget_keys(session_id)
    return ShredResult(session_id, removed, had_salt, shredded_forks)


def load_records(store: Store, session_id: str) -> list[RekeyRecord]:
    prefix = store.layout.session_prefix(session_id) + "rekeys/"
    records = []
    for info in store.backend.list(prefix):
        try:
            record = msgspec.json.decode(store.backend.get(info.key).data, type=RekeyRecord)
        except (ObjectMissing, msgspec.DecodeError, msgspec.ValidationError):
            continue  # not a record evstore wrote: it vouches for nothing
        if record.sid == session_id and len(record.old) == len(record.new):
            records.append(record)
    return records
