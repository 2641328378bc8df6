"""The writer: ``Session`` (conditional append, resolving a taken seq, the idempotency window,
rewind, catching up, refresh and the lease), what a writer continues (``head_state``, ``origin``),
and forks into a writer (``fork``, ``Session.fork``). ``_write`` makes writers and says what each
operation requests; ``_compaction`` packs segments.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

import msgspec

from . import _read
from ._backends import ObjectExists, ObjectMissing
from ._codec import (
    FORMAT_VERSION,
    Body,
    Envelope,
    ForkRef,
    Manifest,
    Message,
    MessagesBody,
    Retention,
    RewindBody,
    b64encode,
    encode_body,
    encode_json,
    format_ts,
    header_aad,
    sha256_hex,
    validate_message,
)
from ._compaction import SegmentPacker
from ._context import WRITE_ID_METADATA, StoreContext
from ._crypto import seal
from ._errors import IntegrityError, InvalidInputError, SessionNotFoundError, WriteConflictError
from ._forks import fork_manifest
from ._ids import MAX_SEQ, validate_seq, validate_session_id
from ._manifests import create_manifest, new_manifest, require_free
from ._read import Loaded, Meta
from ._views import Event

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM


#: An idempotency key is recognised among this many of the session's newest events (or any the writer read).
IDEMPOTENCY_WINDOW = 64


def _check_idempotency_key(key: object) -> None:
    if not isinstance(key, str) or not 1 <= len(key) <= 256 or not key.isprintable():
        raise InvalidInputError("an idempotency key must be 1 to 256 printable characters")


def _as_messages(message: Message | Iterable[Message]) -> list[Message]:
    if isinstance(message, dict):
        return [validate_message(message)]
    messages = [validate_message(m) for m in message]
    if not messages:
        raise InvalidInputError("an append needs at least one message")
    return messages


class Session:
    """A writer for one session. Keeps the head in memory: a steady-state append is one PUT.

    Not thread-safe: give each thread its own writer (``store.open``); the
    store's conditional PUTs keep writers of one session from overwriting
    each other.
    """

    def __init__(
        self,
        ctx: StoreContext,
        manifest: Manifest,
        head: int,
        head_hash: str,
        seal_kid: str | None,
        *,
        origin: str | None = None,
        sealed: bool | None = None,
    ) -> None:
        self._ctx = ctx
        self.manifest = manifest
        self._head = head
        self._head_hash = head_hash
        self._seal_kid = seal_kid
        #: The ``prev`` of the session's first own event (``origin``); by default ``head_hash``, the
        #: head of a writer that starts before the session's first own event.
        self._origin = head_hash if origin is None else origin
        #: Whether the session takes only sealed events (``sealed``: ``Loaded.sealed_only`` of what the
        #: caller loaded); by default whether its manifest names a key. Never decided by the events found.
        self._sealed = manifest.kid is not None if sealed is None else sealed
        #: The bytes of this session's newest own events that this writer read or wrote, and its
        #: Merkle tiles: what automatic compaction packs as seqs reach level boundaries.
        self._packer = SegmentPacker(ctx, manifest)
        #: Idempotency key -> seq, for the events this writer wrote, or read and verified (``_verify``).
        self._keys: dict[str, int] = {}
        self._window_read = False  # whether the last IDEMPOTENCY_WINDOW events' keys were read
        #: When this writer last saw its session live (its manifest, no tombstone), on the monotonic
        #: clock and the store's: built just after its caller read them (``FENCE_HOLD``'s margin
        #: covers the gap). The lease lapses when either clock says so.
        self._lease_from = (time.monotonic(), ctx.clock())

    @property
    def id(self) -> str:
        return self.manifest.sid

    @property
    def head(self) -> int:
        """The seq of the newest event this writer knows of (0 for an empty session)."""
        return self._head

    @property
    def head_hash(self) -> str:
        return self._head_hash

    def __repr__(self) -> str:
        return f"Session({self.id!r}, head={self._head})"

    def append(
        self, message: Message | Iterable[Message], *, expected_head: int | None = None, idempotency_key: str | None = None
    ) -> int:
        """Append one message, or a list of messages as one atomic event; return its seq.

        ``expected_head``: fail with ``WriteConflictError`` unless the session's
        head is that seq (optimistic concurrency, as EventStoreDB's expected version).

        ``idempotency_key``: if an event with this key is among the session's last
        ``IDEMPOTENCY_WINDOW`` (64) events before this writer's head, or among the events
        this writer read or wrote, return its seq and write nothing — from any process, so a
        retried invocation appends once. Free when the key is known (written by this writer,
        or read by ``resume``); otherwise the first such check reads the window once (1 LIST +
        its GETs). A racing writer that lands the same key first is found by the 412 that
        follows. An event is taken for this append only once verified (``_verify``): one that
        is not (planted) raises ``IntegrityError``, never answers "already done".
        With ``expected_head`` too, only events after it are in question: free when it is this
        writer's head, and a retry of an append whose answer was lost learns whether it
        landed (its seq if it did, a conflict if something else did).
        """
        messages = _as_messages(message)
        if idempotency_key is not None:
            _check_idempotency_key(idempotency_key)
            # With the head the caller expects being this writer's, the key cannot be past it: no read.
            known = idempotency_key in self._keys or expected_head is None or expected_head != self._head
            landed = self._landed(idempotency_key) if known else None
            if landed is not None:
                return landed
        return self._append_body(MessagesBody(messages), expected_head, idempotency_key)

    def _landed(self, key: str) -> int | None:
        """The seq of the event holding ``key``, if the window (or what this writer knows) has one.

        The window is read once and verified event by event (``_verify``), each chained to the
        one before it, the first to the session's origin when the window reaches it, the last
        being this writer's head: an event planted above the true head breaks that chain where
        it joins it (within the window unless 64 planted events chain to each other above it)."""
        if key not in self._keys and not self._window_read:
            self._window_read = True
            first_own = _read.first_own_seq(self.manifest)
            first = max(self._head - IDEMPOTENCY_WINDOW + 1, first_own)
            prev = self._origin if first == first_own else None
            bare = Loaded(self.manifest, "", Meta())
            for raw in _read.own_raw(self._ctx, bare, first, self._head) if first <= self._head else ():
                self._verify(raw, prev)
                self._know(raw.seq, raw.envelope.idem)
                prev = raw.hash
            if first <= self._head and (prev is None or not self._same(prev, self._head_hash)):
                raise IntegrityError(self.id, self._head, "the newest events read do not end at this writer's head")
        return self._keys.get(key)

    def _same(self, a: str, b: str) -> bool:
        return a == b or _read.same_event(self._ctx, self.manifest, a, b)

    def _verify(self, raw: _read.RawEvent, prev: str | None) -> None:
        """Raise ``IntegrityError`` unless ``raw`` (decoded for this incarnation) may be taken for
        an event of this session: it names ``prev`` (when known: the hash of the event before it),
        it is sealed if the session takes only sealed events, and one that carries an idempotency
        key opens under the session key (its header is the AAD: a forged header fails)."""
        envelope = raw.envelope
        if prev is not None and not self._same(envelope.prev, prev):
            raise IntegrityError(self.id, raw.seq, "prev hash does not match the previous event (chain broken)")
        if envelope.body is None:
            if envelope.idem is not None:
                _read.open_body(self._ctx, self.manifest, raw)
        elif self._sealed or self._ctx.require_encryption:
            raise IntegrityError(self.id, raw.seq, "plaintext event in an encrypted session (forged)")

    def _know(self, seq: int, key: str | None) -> None:
        if key is not None:
            self._keys.setdefault(key, seq)

    def rewind(self, to_seq: int, *, keep: int | None = None, expected_head: int | None = None) -> int:
        """Withdraw every message after ``to_seq`` (after its first ``keep`` messages) from the
        context view. Nothing is deleted: the audit view keeps every event."""
        validate_seq(to_seq, allow_zero=True)
        if to_seq > self._head:
            raise InvalidInputError(f"cannot rewind to seq {to_seq}: the head is {self._head}")
        if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int) or keep < 0):
            raise InvalidInputError("keep must be a non-negative integer")
        return self._append_body(RewindBody(to_seq, keep), expected_head)

    def pop(self) -> Message | None:
        """Withdraw the newest message of the context view and return it (None when empty).

        Reads the session to find it: O(N) requests, unlike append.
        """
        live = _read.folded(self._ctx, self.id).positioned()
        self._adopt_head()
        if not live:
            return None
        position, message = live[-1]
        self._append_body(RewindBody(position.seq, position.index), None)
        return message

    def clear(self) -> int:
        """Withdraw every message from the context view (a rewind to seq 0)."""
        return self._append_body(RewindBody(0, None), None)

    def fork(self, target: str, *, retention: Retention | None = None) -> Session:
        """Fork this session at this writer's head into ``target``, without reading the parent:
        LIST target prefix, PUT marker, PUT manifest, HEAD own tombstone."""
        validate_session_id(target)
        if target == self.id:
            raise InvalidInputError("a session cannot be forked into itself")
        if self._head == 0:
            raise InvalidInputError(f"session {self.id!r} has no events to fork")
        if self.manifest.retention == "ephemeral":
            return fork(self._ctx, self.id, target, at=self._head, retention=retention)
        manifest = fork_manifest(self._ctx, self.manifest, target, self._head, self._head_hash, retention)
        return Session(self._ctx, manifest, self._head, self._head_hash, manifest.kid)

    def catch_up(self) -> list[Event]:
        """The events other writers appended after this writer's head, in order; the writer
        moves to the last of them (its next append goes after it).

        One LIST after the head (``_read.poll``: with delimiter "/", so one with nothing new
        lists a few names at any length), then a GET per new event: what a long-lived handle
        costs per turn, where ``refresh`` costs 3 requests and tells the head only. Each new
        event is verified as the idempotency window's are (``_verify``): chained to this
        writer's head, sealed when the session takes only sealed events, opened. Their keys
        and bytes are kept as if this writer had read them (idempotency, compaction).
        ``SessionNotFoundError`` once the session is deleted; ``IntegrityError`` for an event
        that does not continue the head (a planted or re-created session's)."""
        ctx = self._ctx
        events: list[Event] = []
        start: str | None = None
        while True:
            polled = _read.poll(ctx, self.manifest, self._head, None, start)  # chained here: a rekey's hashes too
            for raw in polled.events:
                self._verify(raw, self._head_hash)
                events.append(_read.to_event(ctx, self.manifest, raw))
                self._packer.hold_next(raw.seq, raw.data)
                self._know(raw.seq, raw.envelope.idem)
                self._head, self._head_hash, self._seal_kid = raw.seq, raw.hash, raw.envelope.kid
            start = polled.start
            if start is None:
                return events

    def head_event(self) -> Event | None:
        """The event at this writer's head (one GET), the one its next append continues: its hash
        must be ``head_hash``, else ``IntegrityError``. None at seq 0, or below the session's first
        own event (a fork's inherited head)."""
        if self._head < _read.first_own_seq(self.manifest):
            return None
        data = _read.get_event_bytes(self._ctx, self.id, self._head)
        raw = _read.decode_at(self._ctx, self.manifest, self._head, data) if data is not None else None
        if raw is None or not self._same(raw.hash, self._head_hash):
            raise IntegrityError(self.id, self._head, "the head event is not the one this writer continues")
        self._verify(raw, None)
        return _read.to_event(self._ctx, self.manifest, raw)

    def refresh(self) -> int:
        """Adopt events other writers appended since this writer's head; return the new head."""
        self._adopt_head()
        return self._head

    def _adopt_head(self) -> None:
        ctx = self._ctx
        loaded = self._confirm_alive()
        known = self._head if self._head >= loaded.first_own else 0
        head = _read.find_head(ctx, loaded, known)
        if head > self._head:
            self._head, self._head_hash, self._seal_kid = head_state(ctx, loaded, head)
            self._window_read = False  # other writers' events came: the window moved

    def _confirm_alive(self) -> Loaded:
        """Read the manifest and listing again (one round trip) and renew the lease; raise
        ``SessionNotFoundError`` or ``SessionExpiredError`` unless this writer's session lives."""
        started = (time.monotonic(), self._ctx.clock())
        loaded = _read.load(self._ctx, self.id)
        if loaded.manifest.uid != self.manifest.uid:
            raise SessionNotFoundError(self.id, "was deleted and created again", deleted=True)
        self._lease_from = started
        self._sealed = self._sealed or loaded.sealed_only  # a rekey may have encrypted it meanwhile
        return loaded

    def _lease_lapsed(self) -> bool:
        since, since_clock = self._lease_from
        lease = self._ctx.writer_lease
        return time.monotonic() - since >= lease or (self._ctx.clock() - since_clock).total_seconds() >= lease

    def _seal_key(self) -> tuple[str | None, AESGCM | None]:
        """The key id and key this writer seals its next event with; never none in a session
        that takes only sealed events (``Loaded.sealed_only``), whatever its events say."""
        kid = self._seal_kid
        if kid is None:
            if self._ctx.require_encryption:
                raise InvalidInputError(f"session {self.id!r} is plaintext and encryption is required: rekey it first")
            if self._sealed:
                raise WriteConflictError(
                    self.id, self._head + 1, "it was encrypted since this writer read its head: open it again"
                )
            return None, None
        return kid, _read.session_key(self._ctx, self.manifest, kid)

    def _append_body(self, body: Body, expected_head: int | None, idempotency_key: str | None = None) -> int:
        ctx = self._ctx
        if expected_head is not None and expected_head != self._head:
            raise WriteConflictError(self.id, expected_head + 1, f"expected head {expected_head} but it is {self._head}")
        plaintext = encode_body(body, ctx.max_event_bytes)
        if self._lease_lapsed():
            self._confirm_alive()  # before the sealing is chosen: a rekey meanwhile seals what follows
        kid, key = self._seal_key()
        seq = self._head + 1
        if seq > MAX_SEQ:
            raise IntegrityError(self.id, seq, "no seq is left after the head (an object planted at the highest seq?)")
        write_id = os.urandom(16).hex()
        envelope = Envelope(
            FORMAT_VERSION, self.id, self.manifest.uid, seq, format_ts(ctx.clock()), write_id, self._head_hash, kid
        )
        envelope = msgspec.structs.replace(envelope, idem=idempotency_key)
        if key is None:
            envelope = msgspec.structs.replace(envelope, body=body)
        else:
            envelope = msgspec.structs.replace(envelope, sealed=b64encode(seal(key, plaintext, header_aad(envelope))))
        data = encode_json(envelope)
        try:
            ctx.backend.create(
                ctx.layout.event_key(self.id, seq),
                data,
                metadata={WRITE_ID_METADATA: write_id},
                tags=ctx.tags_for(self.manifest.retention),
            )
        except ObjectExists:
            data = self._resolve_taken(seq, data, write_id, plaintext, idempotency_key)
        if self._lease_lapsed():
            self._confirm_alive()  # the PUT outlasted the lease: only a live session's append is acknowledged
        self._head, self._head_hash = seq, sha256_hex(data)
        self._know(seq, idempotency_key)
        if ctx.auto_compact is not None:
            self._packer.hold_next(seq, data)
            self._packer.pack(seq, ctx.auto_compact)
            self._packer.grow_tree(seq, self._head_hash)
        return seq

    def _resolve_taken(self, seq: int, data: bytes, write_id: str, plaintext: bytes, idempotency_key: str | None) -> bytes:
        """A 412 at ``seq``: our own earlier attempt (lost response) is success; so is the same
        idempotency key, landed by another process; anything else is a conflict.

        Our attempt is known by its bytes (they carry this append's random write id), never by
        what the object's metadata or envelope claims: a stranger who saw the write id (in a local
        store's temporary file, say) could copy it onto a forged event. The one other form of our
        attempt is the same event re-sealed by a rekey since it landed: taken when it names our
        write id, follows our head and opens to our body."""
        ctx = self._ctx
        try:
            stored = ctx.backend.get(ctx.layout.event_key(self.id, seq), max_bytes=ctx.max_event_object_bytes)
        except ObjectMissing:
            raise WriteConflictError(self.id, seq, "the event there was removed meanwhile") from None
        if stored.data == data:
            return data
        try:
            raw = _read.decode_at(ctx, self.manifest, seq, stored.data)  # a delete's fence: not found
        except IntegrityError:
            raise WriteConflictError(self.id, seq, "an object that is no event of this session is there") from None
        envelope = raw.envelope
        if idempotency_key is not None and envelope.idem == idempotency_key:
            self._verify(raw, self._head_hash)  # on this writer's head, sealed as the session is: else tampering
            return stored.data  # the same append, landed by another process: its seq is the answer
        if envelope.wid == write_id:
            self._verify(raw, self._head_hash)
            if encode_json(_read.open_body(ctx, self.manifest, raw)) == plaintext:
                return stored.data
        raise WriteConflictError(self.id, seq)


def origin(loaded: Loaded) -> tuple[int, str]:
    """(seq, hash) the session's first own event follows: a fork's seq and the parent's event
    there, or the session's base and its manifest."""
    parent = loaded.manifest.parent
    if parent is not None and not parent.copied:
        return parent.seq, parent.hash
    return loaded.manifest.base, loaded.genesis


def head_state(ctx: StoreContext, loaded: Loaded, head: int) -> tuple[int, str, str | None]:
    """(head, hash of the head event, key id to seal with): what the next append continues.

    A session keeps sealing under the key id of its newest event (``_read.rekeyed_key_id`` at
    first), so rotating the active key never mixes keys into an old session; ``rekey`` moves it
    to the active key. A plaintext head in a session that takes only sealed events
    (``Loaded.sealed_only``) is refused (``IntegrityError``), as reads refuse it: no writer continues it.
    """
    manifest = loaded.manifest
    if head < loaded.first_own:
        return (*origin(loaded), _read.rekeyed_key_id(ctx, loaded))
    data = _read.get_event_bytes(ctx, manifest.sid, head)
    if data is None:
        raise IntegrityError(manifest.sid, head, "head event vanished while opening")
    raw = _read.decode_at(ctx, manifest, head, data)
    if raw.envelope.body is not None and loaded.sealed_only:
        raise IntegrityError(manifest.sid, head, "plaintext event in an encrypted session (forged, or written before a rekey)")
    if raw.envelope.kid is not None and ctx.keyring.get(raw.envelope.kid) is not None:
        _read.open_body(ctx, manifest, raw)  # a wrong key under the right id must not seal what follows
    return head, raw.hash, raw.envelope.kid


def fork(ctx: StoreContext, source: str, target: str, *, at: int | None = None, retention: Retention | None = None) -> Session:
    """Fork ``source`` at ``at`` (default: its head) into a new session ``target``; return its writer.

    A fork of an ephemeral session copies the events up to ``at`` instead of
    referencing them, since the bucket's lifecycle rules would otherwise remove
    them under the fork.
    """
    validate_session_id(target)
    if at is not None:
        validate_seq(at)
    if source == target:
        raise InvalidInputError("a session cannot be forked into itself")
    loaded = _read.load(ctx, source)
    if at is None:
        at = _read.find_head(ctx, loaded)
        if at == 0:
            raise InvalidInputError(f"session {source!r} has no events to fork")
    if loaded.manifest.retention == "ephemeral":
        return _fork_by_copy(ctx, loaded, target, at, retention or "ephemeral")
    at_hash = _read.event_hash(ctx, loaded, at)
    manifest = fork_manifest(ctx, loaded.manifest, target, at, at_hash, retention)
    return Session(ctx, manifest, at, at_hash, manifest.kid)


def _fork_by_copy(ctx: StoreContext, loaded: Loaded, target: str, at: int, retention: Retention) -> Session:
    events = list(_read.replay(ctx, loaded.manifest.sid, end=at))
    if not events or events[-1].seq != at:
        raise InvalidInputError(f"session {loaded.manifest.sid!r} has no event at seq {at}")
    ref = ForkRef(loaded.manifest.sid, loaded.manifest.uid, at, events[-1].hash, copied=True)
    manifest = new_manifest(ctx, target, retention, ref)
    require_free(ctx, target)
    session = Session(ctx, manifest, 0, create_manifest(ctx, manifest), manifest.kid)
    for event in events:
        session._append_body(event.body, None)
    return session
