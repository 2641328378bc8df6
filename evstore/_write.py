"""The write path, as ``Store`` calls it: creating, opening and resuming writers here; the writer
itself (``Session``) and forks into a writer in ``_session``; packing events into segments
(``compact``) in ``_compaction``.

Requests:

* append, steady state: 1 PUT. A 412 costs one GET to tell a lost response of
  our own (success) from another writer's event (conflict). Once per
  ``writer_lease`` (60 s) a writer reads its manifest and listing again before
  it appends (one round trip of 2 requests): a delete's fence holds every seq
  only that long (see ``_forks``), so a writer past its lease must learn that
  its session still lives before it acknowledges.
* open an existing session: GET manifest, LIST of its non-event objects, LIST
  from the newest segment (or seq 1), GET of the head event: 4 requests while
  fewer than 64 events follow the newest segment (1,000 without segments; see
  ``_read.find_head``).
* create: LIST of the prefix (it must be empty: no remnants), PUT manifest;
  the first append needs no lookup.
* fork at a seq: GET parent manifest, LIST of its non-event objects, GET the
  parent's event at the seq, then ``_forks.fork_manifest``'s four: 7, whatever
  the parent's length; from a writer (``Session.fork``) the last four only.
"""

from __future__ import annotations

from collections import deque

import msgspec

from . import _read, _tree
from ._codec import Message, Retention
from ._compaction import compact, recent_limit
from ._compaction import write_segment as _write_segment  # noqa: F401  (tests/test_read_path.py names it here)
from ._context import StoreContext
from ._errors import InvalidInputError, SessionExistsError, SessionNotFoundError
from ._ids import validate_session_id
from ._manifests import claim, create_manifest, new_manifest
from ._session import Session, fork, head_state, origin
from ._views import ContextFolder, Repair

__all__ = ["Session", "compact", "create", "fork", "open_session", "resume", "resume_folded"]


def create(ctx: StoreContext, session_id: str, *, retention: Retention = "permanent") -> Session:
    """Create a new, empty session; ``SessionExistsError`` if the id is taken."""
    validate_session_id(session_id)
    base, replaces = claim(ctx, session_id)
    manifest = msgspec.structs.replace(new_manifest(ctx, session_id, retention, None), base=base)
    genesis = create_manifest(ctx, manifest, replaces)
    session = Session(ctx, manifest, base, genesis, manifest.kid)
    session._packer.tiles = _tree.Tiles()  # its tree is empty: it grows from the first event
    return session


def open_session(
    ctx: StoreContext,
    session_id: str,
    *,
    create_missing: bool = False,
    retention: Retention = "permanent",
    recreate: bool = True,
) -> Session:
    """A writer for the session, at its current head. With ``create_missing``, a missing session
    is created, and so is a deleted one unless ``recreate`` is False (then its
    ``SessionNotFoundError`` is raised, ``deleted`` set)."""
    sent = _read.send_load(ctx, session_id)  # the manifest GET and the listing, together
    try:
        found = sent.manifest.result()
    except BaseException:
        _read.cancel_load(sent, settle=True)
        raise
    try:
        if create_missing and found is None:
            _read.cancel_load(sent)
            raise SessionNotFoundError(session_id)
        loaded = _read.finish_load(ctx, sent, deleted_ok=False)
    except SessionNotFoundError as error:
        if not create_missing or (error.deleted and not recreate):
            raise
        try:
            return create(ctx, session_id, retention=retention)
        except SessionExistsError:
            loaded = _read.load(ctx, session_id)  # created concurrently: open what is there
    return Session(
        ctx,
        loaded.manifest,
        *head_state(ctx, loaded, _read.find_head(ctx, loaded)),
        origin=origin(loaded)[1],
        sealed=loaded.sealed_only,
    )


def resume(
    ctx: StoreContext,
    session_id: str,
    *,
    create_missing: bool = False,
    retention: Retention = "permanent",
    repair: Repair = "error",
) -> tuple[Session, list[Message]]:
    """A writer at the session's head and its context view (``resume_folded``'s folder, repaired)."""
    if repair not in ("error", "drop", "none"):
        raise InvalidInputError(f"repair must be error, drop or none, not {repair!r:.40}")
    session, folder = resume_folded(ctx, session_id, create_missing=create_missing, retention=retention)
    return session, folder.messages(repair)


def resume_folded(
    ctx: StoreContext, session_id: str, *, create_missing: bool = False, retention: Retention = "permanent"
) -> tuple[Session, ContextFolder]:
    """A writer at the session's head and its context view, from one pass over what it read.

    What a serverless agent does on every invocation, in 2 dependent round trips before its
    first append for a session of up to about 1,000 names (a fork 3, whatever its depth: see
    ``_read.lineage_batches``): the
    manifest GET with the LIST of the non-event objects and the LIST of the first 1,000 names
    (whose ETags vouch for the segments' events, and which name the loose tail); the segment
    GETs with the tail's GETs. A longer session lists its tail in round 2 (and a LIST per further
    1,000 events the segments cover), and reads it in round 3. More only for a chain of more
    than 16 segments, or for more than one LIST page of non-event objects before the newest
    young segments (see ``_read.own_batches`` and ``_read.read_meta``).
    The writer's head is the last event read (no head GET), and it holds the bytes it read
    for automatic compaction. The folder holds exactly the events up to the writer's head, so a
    caller that keeps both can fold what follows the head into it (``Session.catch_up``).
    """
    validate_session_id(session_id)
    try:
        loaded = _read.load(ctx, session_id, first_page=True)
    except SessionNotFoundError:
        if not create_missing:
            raise
        try:
            return create(ctx, session_id, retention=retention), ContextFolder()
        except SessionExistsError:
            loaded = _read.load(ctx, session_id)  # created concurrently: resume what is there
    head, head_hash = follows = origin(loaded)  # what its first own event follows
    seal_kid = None  # the head's, once an own event is read; else (after them) ``_read.rekeyed_key_id``
    folder = ContextFolder()
    keys: dict[str, int] = {}
    # what the writer keeps of the events it read: their idempotency keys, and the bytes of the
    # newest ones for automatic compaction; never every event (the context holds the messages)
    recent: deque[tuple[int, bytes]] = deque(maxlen=recent_limit(ctx))
    tiles = _tree.Tiles()  # the Merkle tiles of every event read, from seq 1, for the next checkpoint object
    for manifest, raw in _read.lineage(ctx, loaded, 1, None):
        folder.add(raw.seq, _read.open_body(ctx, manifest, raw))
        tiles.defer(bytes.fromhex(raw.hash))  # hashed into tiles only when a checkpoint is written
        if raw.session_id == session_id:
            head, head_hash, seal_kid = raw.seq, raw.hash, raw.envelope.kid
            if raw.envelope.idem is not None:
                keys.setdefault(raw.envelope.idem, raw.seq)
            recent.append((raw.seq, raw.data))
    if head < loaded.first_own:  # no event of its own: read the rekey records only now, if any
        seal_kid = _read.rekeyed_key_id(ctx, loaded)
    session = Session(ctx, loaded.manifest, head, head_hash, seal_kid, origin=follows[1], sealed=loaded.sealed_only)
    session._window_read = True  # it read every own event: their idempotency keys are known
    session._packer.tiles = tiles if tiles.size == head else None  # a session whose seqs start past 1 has none
    for key, seq in keys.items():
        session._know(seq, key)
    for seq, data in recent:
        session._packer.hold(seq, data)
    return session, folder
