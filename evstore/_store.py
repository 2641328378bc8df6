"""The store: sessions over an object-store backend. It owns the invariants of
the design (single writer per seq, exactly-once appends, the hash chain, forks
that never break); the pure pieces (ids, codec, crypto, views) do the rest.

Requests per operation (N = events, S = segments):

* append, steady state: 1 PUT. A 412 costs one GET to tell a lost response of
  our own (success) from another writer's event (conflict).
* open an existing session for append: GET manifest, LIST of its non-event
  objects, LIST from the newest segment (or seq 1), GET of the head event:
  4 requests while fewer than 1,000 events follow the newest segment; beyond
  that, HEAD probes that gallop and bisect: O(log N) in the worst case.
* create: LIST of the prefix (it must be empty: no remnants), PUT manifest;
  the first append needs no lookup.
* fork at a seq: GET parent manifest, LIST of its non-event objects, GET the
  parent's event at the seq, LIST of the target prefix, PUT marker, PUT
  manifest, HEAD parent tombstone: 7, whatever the parent's length; from a
  writer (``Session.fork``) the last four only.
* replay: GET manifest, LIST of non-event objects, one GET per segment, then
  a LIST per 1,000 loose events and their GETs, ``concurrency`` at a time.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from . import _lifecycle
from ._backends import ObjectExists, ObjectMissing, ObjectStore
from ._chain import Receipt
from ._codec import (
    DEFAULT_MAX_EVENT_BYTES,
    FORMAT_VERSION,
    RETENTIONS,
    Body,
    Envelope,
    ForkRef,
    Manifest,
    Message,
    MessagesBody,
    Retention,
    RewindBody,
    Tombstone,
    b64decode,
    b64encode,
    decode_body,
    decode_envelope,
    decode_manifest,
    encode_body,
    encode_json,
    encode_manifest,
    format_ts,
    header_aad,
    pack_segment,
    sha256_hex,
    unpack_segment,
    validate_message,
)
from ._crypto import Keyring, derive_session_key, new_salt, open_sealed, seal
from ._errors import (
    IntegrityError,
    InvalidInputError,
    KeyRequiredError,
    SessionExistsError,
    SessionExpiredError,
    SessionNotFoundError,
    StoreUnavailableError,
    WriteConflictError,
)
from ._ids import Layout, parse_fork_marker, parse_segment, parse_seq, validate_seq, validate_session_id
from ._lifecycle import DEFAULT_EPHEMERAL_DAYS
from ._views import ContextFolder, Event, Repair

if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor

    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    from ._gc import ExpiringObject, GcReport, OnRemove
    from ._rekey import RekeyRecord, RekeyResult, ShredResult

#: Object metadata (``x-amz-meta-evstore-write-id``) naming the append that wrote an event.
WRITE_ID_METADATA = "evstore-write-id"
#: The tag every object of an ephemeral session carries, set by the PUT itself.
RETENTION_TAG = _lifecycle.RETENTION_TAG
_DEFAULT_GRACE = timedelta(days=1)
A = TypeVar("A")
B = TypeVar("B")


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

    @property
    def encrypted(self) -> bool:
        return self.key_id is not None


class DeleteResult(msgspec.Struct, frozen=True):
    session_id: str
    removed: int
    kept_for_forks: list[str]


class VerifyResult(msgspec.Struct, frozen=True):
    session_id: str
    receipt: Receipt
    events: int
    sealed_checked: int
    sealed_unchecked: int
    expected: Receipt | None = None
    #: The expected receipt names an event a rekey re-sealed: it is extended, as recorded in a rekey record.
    superseded_by_rekey: bool = False


class _Meta(msgspec.Struct, frozen=True):
    """A session's objects other than events, from one listing."""

    tombstone: bool = False
    segments: list[tuple[int, int]] = msgspec.field(default_factory=list)
    forks: list[tuple[str, str]] = msgspec.field(default_factory=list)


class _Loaded(msgspec.Struct, frozen=True):
    manifest: Manifest
    genesis: str  # sha256 of the manifest bytes: the prev of seq 1
    meta: _Meta

    @property
    def first_own(self) -> int:
        parent = self.manifest.parent
        return parent.seq + 1 if parent is not None and not parent.copied else 1


class _RawEvent(msgspec.Struct, frozen=True):
    session_id: str
    seq: int
    data: bytes
    envelope: Envelope
    hash: str


def _now() -> datetime:
    return datetime.now(UTC)


def _as_messages(message: Message | Iterable[Message]) -> list[Message]:
    if isinstance(message, dict):
        return [validate_message(message)]
    messages = [validate_message(m) for m in message]
    if not messages:
        raise InvalidInputError("an append needs at least one message")
    return messages


class Store:
    """Sessions in one store root of one backend. Safe to share between threads."""

    def __init__(
        self,
        backend: ObjectStore,
        *,
        root: str = "",
        keyring: Keyring | None = None,
        require_encryption: bool = False,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        concurrency: int = 16,
        auto_compact: int | None = None,
        clock: Callable[[], datetime] = _now,
    ) -> None:
        if auto_compact is not None and not 2 <= auto_compact <= 100_000:
            raise InvalidInputError("auto_compact must be a segment size from 2 to 100000")
        self.backend = backend
        #: Segment size for writers to pack their own appends as they go (None: only ``compact``).
        self.auto_compact = auto_compact
        self.layout = Layout(root)
        self.keyring = keyring or Keyring()
        self.require_encryption = require_encryption
        self.max_event_bytes = max_event_bytes
        self.concurrency = max(1, concurrency)
        self.clock = clock
        self._keys: dict[tuple[str, str, str], AESGCM] = {}
        self._record_cache: dict[str, list[RekeyRecord]] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Store({self.backend.location!r}, root={self.layout.root!r})"

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        self.backend.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- reading the pieces of a session ----------------------------------

    def _read_manifest(self, session_id: str) -> tuple[Manifest, str] | None:
        try:
            stored = self.backend.get(self.layout.manifest_key(session_id))
        except ObjectMissing:
            return None
        return decode_manifest(stored.data, session_id), sha256_hex(stored.data)

    def _read_meta(self, session_id: str) -> _Meta:
        prefix = self.layout.session_prefix(session_id)
        tombstone = False
        segments: list[tuple[int, int]] = []
        forks: list[tuple[str, str]] = []
        for info in self.backend.list(prefix, start_after=self.layout.after_events(session_id)):
            name = info.key[len(prefix) :]
            if name == "tombstone":
                tombstone = True
            elif (segment := parse_segment(name)) is not None:
                segments.append(segment)
            elif (fork := parse_fork_marker(name)) is not None:
                forks.append(fork)
        return _Meta(tombstone, sorted(segments), forks)

    def _first_name(self, session_id: str) -> str | None:
        """The session-relative name of the session's first object (events sort first): one LIST."""
        prefix = self.layout.session_prefix(session_id)
        page = self.backend.list_page(prefix, max_keys=1)
        return page.objects[0].key[len(prefix) :] if page.objects else None

    def _gone(self, session_id: str) -> SessionNotFoundError | SessionExpiredError:
        """The error for a session without a manifest: expired if events remain, else not found."""
        first = self._first_name(session_id)
        if first is not None and parse_seq(first) is not None:
            return SessionExpiredError(session_id, "its manifest is gone but events remain")
        if first == "tombstone":
            return SessionNotFoundError(session_id, "was deleted")
        return SessionNotFoundError(session_id)

    def _load(self, session_id: str, *, deleted_ok: bool = False, found: tuple[Manifest, str] | None = None) -> _Loaded:
        validate_session_id(session_id)
        found = found or self._read_manifest(session_id)
        if found is None:
            raise self._gone(session_id)
        manifest, genesis = found
        meta = self._read_meta(session_id)
        if meta.tombstone and not deleted_ok:
            raise SessionNotFoundError(session_id, "was deleted")
        return _Loaded(manifest, genesis, meta)

    def has_object(self, key: str) -> bool:
        """Whether ``key`` exists: one HEAD."""
        try:
            self.backend.head(key)
        except ObjectMissing:
            return False
        return True

    def _find_head(self, loaded: _Loaded, known: int = 0) -> int:
        """The highest seq of the session, starting from its newest segment or ``known``
        (a seq the caller knows exists: a writer's own head).

        One LIST when fewer than 1,000 events follow the newest segment;
        otherwise HEAD probes gallop up from the end of that page (doubling the
        step) and then bisect, until 1,000 events remain for a final LIST.
        Raises ``SessionExpiredError`` when the session's first own event is gone.
        """
        session_id = loaded.manifest.sid
        prefix = self.layout.session_prefix(session_id)
        floor = max([known, *(last for _, last in loaded.meta.segments)])

        def tail_from(seq: int) -> tuple[list[int], bool]:
            start = self.layout.event_key(session_id, seq) if seq else ""
            page = self.backend.list_page(prefix, start_after=start)
            seqs = [s for o in page.objects if (s := parse_seq(o.key[len(prefix) :])) is not None]
            return seqs, page.truncated and len(seqs) == len(page.objects)

        seqs, more = tail_from(floor)
        if floor == 0 and seqs and seqs[0] > loaded.first_own:
            raise SessionExpiredError(session_id, f"its first events are gone (seq {loaded.first_own} is missing)")
        low = seqs[-1] if seqs else floor
        if not more:
            return max(low, loaded.first_own - 1)
        step = 1000
        while self.has_object(self.layout.event_key(session_id, low + step)):
            low += step
            step *= 2
        high = low + step  # known absent
        while high - low > 1000:
            middle = (low + high) // 2
            if self.has_object(self.layout.event_key(session_id, middle)):
                low = middle
            else:
                high = middle
        seqs, _ = tail_from(low)
        return seqs[-1] if seqs else low

    def _session_key(self, manifest: Manifest, key_id: str) -> AESGCM:
        cache_key = (manifest.sid, manifest.uid, key_id)
        key = self._keys.get(cache_key)
        if key is None:
            master = self.keyring.get(key_id)
            if master is None:
                raise KeyRequiredError(manifest.sid, key_id)
            salt = self._salt(manifest)
            key = derive_session_key(master, salt, manifest.sid)
            self._keys[cache_key] = key
        return key

    def _salt(self, manifest: Manifest) -> bytes:
        if manifest.salt is not None:
            return b64decode(manifest.salt)
        # a plaintext session encrypted later by rekey keeps its salt beside the manifest
        try:
            stored = self.backend.get(self.layout.session_prefix(manifest.sid) + "salt")
        except ObjectMissing:
            raise IntegrityError(manifest.sid, None, "sealed events but no salt: the session was shredded") from None
        salt = b64decode(stored.data.decode("ascii", "replace"))
        if len(salt) != 32:
            raise IntegrityError(manifest.sid, None, "salt object is not 32 bytes of base64")
        return salt

    def _open_body(self, manifest: Manifest, raw: _RawEvent) -> Body:
        envelope = raw.envelope
        if envelope.body is not None:
            if manifest.kid is not None:
                raise IntegrityError(raw.session_id, raw.seq, "plaintext event in an encrypted session (forged)")
            return envelope.body
        assert envelope.sealed is not None and envelope.kid is not None
        self._check_key_id(manifest, raw)
        key = self._session_key(manifest, envelope.kid)
        try:
            sealed = b64decode(envelope.sealed)
        except ValueError:
            sealed = b""
        if b64encode(sealed) != envelope.sealed:  # non-canonical base64 decodes alike: refuse any altered byte
            raise IntegrityError(raw.session_id, raw.seq, "sealed body is not canonical base64")
        plaintext = open_sealed(key, sealed, header_aad(envelope))
        if plaintext is None:
            raise IntegrityError(
                raw.session_id, raw.seq, f"authentication failed under key id {envelope.kid!r} (wrong key or altered object)"
            )
        return decode_body(plaintext, raw.session_id, raw.seq)

    def _check_key_id(self, manifest: Manifest, raw: _RawEvent) -> None:
        """A sealed event names the session's key id, or one a rekey record moved it to."""
        kid = raw.envelope.kid
        if kid != manifest.kid and kid not in {r.kid for r in self._records(manifest.sid)}:
            raise IntegrityError(raw.session_id, raw.seq, f"sealed under key id {kid!r:.70}, which this session never used")

    def _decode_raw(self, manifest: Manifest, seq: int, data: bytes) -> _RawEvent:
        envelope = decode_envelope(data, manifest.sid, seq)
        if envelope.uid != manifest.uid:
            raise IntegrityError(manifest.sid, seq, "event belongs to another incarnation of the session")
        return _RawEvent(manifest.sid, seq, data, envelope, sha256_hex(data))

    # ---- the event stream ---------------------------------------------------

    def _executor(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                from concurrent.futures import ThreadPoolExecutor

                self._pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="evstore-get")
            return self._pool

    def _get_event_bytes(self, session_id: str, seq: int) -> bytes | None:
        try:
            return self.backend.get(self.layout.event_key(session_id, seq)).data
        except ObjectMissing:
            return None

    def _prefetched(self, items: Iterable[A], fetch: Callable[[A], B], window: int) -> Iterator[tuple[A, B]]:
        """(item, fetch(item)) in the order of ``items``, with up to ``window`` fetches in flight."""
        pending: deque[tuple[A, Future[B]]] = deque()
        pool = self._executor()
        try:
            for item in items:
                pending.append((item, pool.submit(fetch, item)))
                if len(pending) >= window:
                    done, future = pending.popleft()
                    yield done, future.result()
            while pending:
                done, future = pending.popleft()
                yield done, future.result()
        finally:
            for _, future in pending:
                future.cancel()

    def _loose_events(self, session_id: str, start: int, end: int | None) -> Iterator[tuple[int, bytes | None]]:
        """(seq, bytes) of listed events from ``start`` on, in order, ``2 * concurrency`` GETs in flight."""
        prefix = self.layout.session_prefix(session_id)
        after = self.layout.event_key(session_id, start - 1) if start > 1 else ""

        def seqs() -> Iterator[int]:
            for info in self.backend.list(prefix, start_after=after):
                seq = parse_seq(info.key[len(prefix) :])
                if seq is None or (end is not None and seq > end):
                    return
                yield seq

        return self._prefetched(seqs(), lambda seq: self._get_event_bytes(session_id, seq), self.concurrency * 2)

    def _segment_events(self, session_id: str, uid: str, first: int, last: int) -> list[tuple[int, bytes]]:
        key = self.layout.segment_key(session_id, first, last)
        try:
            data = self.backend.get(key).data
        except ObjectMissing:
            return []
        return unpack_segment(data, session_id, uid, first, last)

    def _own_raw(self, loaded: _Loaded, start: int, end: int | None) -> Iterator[_RawEvent]:
        """The session's own events in [start, end], from segments then loose objects, in order.

        Segments are read while they continue each other from ``start``, a few
        GETs ahead; the rest comes from the loose events, which always remain.
        """
        manifest = loaded.manifest
        sid = manifest.sid
        cursor = max(start, loaded.first_own)
        chain: list[tuple[int, int]] = []
        for first, last in loaded.meta.segments:
            reach = chain[-1][1] + 1 if chain else cursor
            if first <= reach <= last and (end is None or reach <= end):
                chain.append((first, last))
        fetch = lambda segment: self._segment_events(sid, manifest.uid, *segment)  # noqa: E731
        for (_, last), events in self._prefetched(chain, fetch, 4):
            if not events:
                break  # removed meanwhile (rekey, gc): the loose events are still there
            for seq, data in events:
                if seq >= cursor and (end is None or seq <= end):
                    yield self._decode_raw(manifest, seq, data)
            cursor = last + 1
        if end is not None and cursor > end:
            return
        expected = cursor
        for seq, listed in self._loose_events(sid, cursor, end):
            if seq != expected or listed is None:
                missing = expected if seq != expected else seq
                if missing == loaded.first_own:
                    raise SessionExpiredError(sid, f"its first events are gone (seq {missing} is missing)")
                raise IntegrityError(sid, missing, "event is missing (a hole in the log)")
            yield self._decode_raw(manifest, seq, listed)
            expected += 1

    def _lineage(self, loaded: _Loaded, start: int, end: int | None) -> Iterator[tuple[Manifest, _RawEvent]]:
        """Events of the session and its ancestors in [start, end], in order, with the chain checked.

        Each event's ``prev`` must be the hash of the event before it; the first
        event's is checked too when the range starts at 1 (against the manifest)
        or at a fork's first own seq (against the recorded parent hash).
        """
        manifest = loaded.manifest
        parent = manifest.parent
        prev: str | None = loaded.genesis if start <= 1 else None
        if parent is not None and not parent.copied:
            if start <= parent.seq:
                ancestor = self._load(parent.sid, deleted_ok=True)
                if ancestor.manifest.uid != parent.uid:
                    raise IntegrityError(manifest.sid, None, f"parent {parent.sid!r} is not the session this fork was made from")
                last: _RawEvent | None = None
                for item in self._lineage(ancestor, start, min(parent.seq, end) if end is not None else parent.seq):
                    last = item[1]
                    yield item
                if end is None or end >= parent.seq:
                    if last is None or last.seq != parent.seq:
                        raise IntegrityError(manifest.sid, parent.seq, "the parent's events up to the fork seq are missing")
                    if last.hash != parent.hash and self.canonical_hash(parent.sid, parent.hash) != last.hash:
                        raise IntegrityError(
                            manifest.sid, parent.seq, "the parent's event differs from the one this fork was made from"
                        )
            prev = parent.hash if start <= parent.seq + 1 else None
        for raw in self._own_raw(loaded, start, end):
            if prev is not None and raw.envelope.prev != prev and not self._same_event(manifest.sid, raw.envelope.prev, prev):
                raise IntegrityError(raw.session_id, raw.seq, "prev hash does not match the previous event (chain broken)")
            prev = raw.hash
            yield manifest, raw

    def _records(self, session_id: str) -> list[RekeyRecord]:
        """The session's rekey records (see ``evstore._rekey``), cached."""
        records = self._record_cache.get(session_id)
        if records is None:
            from ._rekey import load_records

            records = self._record_cache[session_id] = load_records(self, session_id)
        return records

    def _aliases(self, session_id: str) -> dict[str, str]:
        """Old hash -> new hash of every event a rekey re-sealed."""
        return {old: new for r in self._records(session_id) for old, new in zip(r.old, r.new, strict=True)}

    def canonical_hash(self, session_id: str, digest: str) -> str:
        """The current hash of the event that ``digest`` named, following rekey records."""
        aliases = self._aliases(session_id)
        seen = set()
        while digest in aliases and digest not in seen:
            seen.add(digest)
            digest = aliases[digest]
        return digest

    def _same_event(self, session_id: str, a: str, b: str) -> bool:
        self._forget_aliases(session_id)  # a mismatch is rare: read the records afresh
        return self.canonical_hash(session_id, a) == self.canonical_hash(session_id, b)

    def _forget_aliases(self, session_id: str) -> None:
        self._record_cache.pop(session_id, None)

    def _forget_keys(self, session_id: str) -> None:
        for cached in [k for k in self._keys if k[0] == session_id]:
            del self._keys[cached]

    def _check_range(self, start: int, end: int | None) -> None:
        validate_seq(start)
        if end is not None:
            validate_seq(end, allow_zero=True)

    # ---- public reading -----------------------------------------------------

    def replay(self, session_id: str, *, start: int = 1, end: int | None = None) -> Iterator[Event]:
        """The audit view: every event in [start, end] (a fork's inherited ones included), streamed.

        Raises ``SessionNotFoundError``, ``SessionExpiredError``, ``IntegrityError``
        (at the first event that does not decode, authenticate or chain) or
        ``KeyRequiredError`` — lazily, as iteration reaches the problem.
        """
        self._check_range(start, end)
        loaded = self._load(session_id)
        for manifest, raw in self._lineage(loaded, start, end):
            env = raw.envelope
            yield Event(raw.session_id, raw.seq, env.ts, env.wid, env.kid, raw.hash, self._open_body(manifest, raw))

    def _folded(self, session_id: str) -> ContextFolder:
        folder = ContextFolder()
        for event in self.replay(session_id):
            folder.add(event.seq, event.body)
        return folder

    def context(self, session_id: str, *, repair: Repair = "error") -> list[Message]:
        """The context view: what an agent should send to a model next (see ``evstore._views``)."""
        if repair not in ("error", "drop", "none"):
            raise InvalidInputError(f"repair must be error, drop or none, not {repair!r:.40}")
        return self._folded(session_id).messages(repair)

    def info(self, session_id: str) -> SessionInfo:
        loaded = self._load(session_id)
        head = self._find_head(loaded)
        manifest = loaded.manifest
        forks = self._live_forks(manifest.uid, loaded.meta.forks)  # a GET per marker: info is not a hot path
        return SessionInfo(
            session_id,
            manifest.uid,
            manifest.created,
            manifest.retention,
            head,
            manifest.kid,
            manifest.parent,
            sorted(set(forks)),
            len(loaded.meta.segments),
        )

    def list_sessions(self, prefix: str = "", *, start_after: str = "", limit: int | None = None) -> Iterator[str]:
        """Session ids in order (deleted and expired remnants included), one LIST per 1,000."""
        if prefix and not all(c.isalnum() or c in "._-" for c in prefix):
            raise InvalidInputError(f"invalid session id prefix {prefix[:80]!r}")
        after = self.layout.session_prefix(start_after) if start_after else ""
        count = 0
        while True:
            page = self.backend.list_page(self.layout.sessions + prefix, start_after=after, delimiter="/")
            for common in page.prefixes:
                yield common[len(self.layout.sessions) : -1]
                count += 1
                if limit is not None and count >= limit:
                    return
            if not page.truncated:
                return
            after = page.next_start_after

    def verify(self, session_id: str, *, expect: Receipt | None = None) -> VerifyResult:
        """Check contiguity, every prev, every GCM tag a configured key can open; return the receipt.

        With ``expect``, fail (``IntegrityError``) unless the log still extends
        that receipt: its event at ``expect.seq`` has ``expect.hash``.
        """
        loaded = self._load(session_id)
        head = Receipt(0, loaded.genesis)
        events = checked = unchecked = 0
        expected_found = expect is None
        if expect is not None and expect.seq == 0:  # the receipt of an empty session names its manifest
            if expect.hash != loaded.genesis:
                raise IntegrityError(session_id, None, "does not match the receipt of its empty log (history rewritten)")
            expected_found = True
        superseded = False
        for manifest, raw in self._lineage(loaded, 1, None):
            events += 1
            if raw.envelope.kid is not None:
                if self.keyring.get(raw.envelope.kid) is None:
                    self._check_key_id(manifest, raw)
                    unchecked += 1
                else:
                    self._open_body(manifest, raw)
                    checked += 1
            else:
                self._open_body(manifest, raw)
            if expect is not None and raw.seq == expect.seq:
                if raw.hash != expect.hash:
                    if self.canonical_hash(raw.session_id, expect.hash) != raw.hash:
                        raise IntegrityError(
                            session_id, raw.seq, f"does not match receipt {expect.seq}:{expect.hash[:12]}… (history rewritten)"
                        )
                    superseded = True
                expected_found = True
            head = Receipt(raw.seq, raw.hash)
        if not expected_found:
            assert expect is not None
            raise IntegrityError(
                session_id, expect.seq, f"receipt names seq {expect.seq} but the log ends at {head.seq} (truncated)"
            )
        return VerifyResult(session_id, head, events, checked, unchecked, expect, superseded)

    # ---- writing ------------------------------------------------------------

    def _new_manifest(self, session_id: str, retention: Retention, parent: ForkRef | None) -> Manifest:
        if retention not in RETENTIONS:
            raise InvalidInputError(f"retention must be permanent or ephemeral, not {retention!r:.40}")
        kid = self.keyring.active
        if kid is None and self.require_encryption:
            raise InvalidInputError("encryption is required but no key is configured (EVSTORE_KEY or EVSTORE_KEYRING)")
        return Manifest(
            FORMAT_VERSION,
            session_id,
            os.urandom(16).hex(),
            format_ts(self.clock()),
            retention,
            parent,
            kid,
            b64encode(new_salt()) if kid is not None else None,
        )

    def tags_for(self, retention: Retention) -> dict[str, str]:
        return {RETENTION_TAG: "ephemeral"} if retention == "ephemeral" else {}

    def _create_manifest(self, manifest: Manifest) -> str:
        """PUT the manifest if the id is free; return the sha256 of its bytes."""
        sid = manifest.sid
        self._require_free(sid)
        data = encode_manifest(manifest)
        try:
            self._create_once(self.layout.manifest_key(sid), data, self.tags_for(manifest.retention))
        except ObjectExists:
            raise SessionExistsError(sid) from None
        return sha256_hex(data)

    def _create_once(self, key: str, data: bytes, tags: Mapping[str, str]) -> None:
        """Create ``key`` (``If-None-Match``). A 412 whose stored bytes are ours is our own
        earlier attempt, whose answer was lost and which botocore retried: success.
        Otherwise ``ObjectExists``. The bytes are unique (they carry a random uid or time)."""
        try:
            self.backend.create(key, data, tags=tags)
        except ObjectExists:
            try:
                if self.backend.get(key).data == data:
                    return
            except ObjectMissing:
                pass
            raise

    def _require_free(self, session_id: str) -> None:
        """A new session may only start in an empty prefix: never over the remnants of an
        expired or deleted one (their events would collide with its seqs)."""
        first = self._first_name(session_id)
        if first is None:
            return
        if self._read_manifest(session_id) is not None:
            raise SessionExistsError(session_id)  # alive, or deleted and kept for its forks
        if parse_seq(first) is not None:
            raise SessionExpiredError(session_id, "its manifest is gone but events remain (gc removes them)")
        raise SessionExistsError(session_id, "was removed but left objects that gc removes")

    def create(self, session_id: str, *, retention: Retention = "permanent") -> Session:
        """Create a new, empty session; ``SessionExistsError`` if the id is taken."""
        validate_session_id(session_id)
        manifest = self._new_manifest(session_id, retention, None)
        genesis = self._create_manifest(manifest)
        return Session(self, manifest, 0, genesis, manifest.kid)

    def open(self, session_id: str, *, create: bool = False, retention: Retention = "permanent") -> Session:
        """A writer for the session, at its current head. With ``create``, a missing session is created."""
        validate_session_id(session_id)
        found = self._read_manifest(session_id)
        if create and found is None:
            try:
                return self.create(session_id, retention=retention)
            except SessionExistsError:
                pass  # created concurrently (or deleted): open what is there
        loaded = self._load(session_id, found=found)
        return Session(self, loaded.manifest, *self._head_state(loaded, self._find_head(loaded)))

    def _head_state(self, loaded: _Loaded, head: int) -> tuple[int, str, str | None]:
        """(head, hash of the head event, key id to seal with): what the next append continues.

        A session keeps sealing under the key id of its newest event (its
        manifest's at first), so rotating the active key never mixes keys
        into an old session; ``rekey`` moves it to the active key.
        """
        manifest = loaded.manifest
        parent = manifest.parent
        if head < loaded.first_own:
            if parent is not None and not parent.copied:
                return parent.seq, parent.hash, manifest.kid
            return 0, loaded.genesis, manifest.kid
        data = self._get_event_bytes(manifest.sid, head)
        if data is None:
            raise IntegrityError(manifest.sid, head, "head event vanished while opening")
        raw = self._decode_raw(manifest, head, data)
        return head, raw.hash, raw.envelope.kid

    def _event_hash(self, loaded: _Loaded, seq: int) -> str:
        """The hash of the lineage's event at ``seq`` (an ancestor's for inherited seqs)."""
        manifest = loaded.manifest
        parent = manifest.parent
        if parent is not None and not parent.copied and seq <= parent.seq:
            if seq == parent.seq:
                return parent.hash
            return self._event_hash(self._load(parent.sid, deleted_ok=True), seq)
        data = self._get_event_bytes(manifest.sid, seq)
        if data is None:
            raise InvalidInputError(f"session {manifest.sid!r} has no event at seq {seq}")
        return self._decode_raw(manifest, seq, data).hash

    def fork(self, source: str, target: str, *, at: int | None = None, retention: Retention | None = None) -> Session:
        """Fork ``source`` at ``at`` (default: its head) into a new session ``target``; return its writer.

        The fork is a manifest that names the parent, the fork seq and the hash
        of the parent's event there, plus a marker in the parent's prefix that
        keeps the parent's events while the fork lives: O(1) requests. A fork
        of an ephemeral session copies the events up to ``at`` instead, since
        the bucket's lifecycle rules would otherwise remove them under the fork.
        """
        validate_session_id(target)
        if at is not None:
            validate_seq(at)
        if source == target:
            raise InvalidInputError("a session cannot be forked into itself")
        loaded = self._load(source)
        if at is None:
            at = self._find_head(loaded)
            if at == 0:
                raise InvalidInputError(f"session {source!r} has no events to fork")
        if loaded.manifest.retention == "ephemeral":
            return self._fork_by_copy(loaded, target, at, retention or "ephemeral")
        return self._fork_manifest(loaded.manifest, target, at, self._event_hash(loaded, at), retention)

    def _fork_manifest(self, parent: Manifest, target: str, at: int, at_hash: str, retention: Retention | None) -> Session:
        """Create the fork's marker, then its manifest (the commit point), then check the parent lives."""
        source = parent.sid
        retention = retention or parent.retention
        ref = ForkRef(source, parent.uid, at, at_hash)
        manifest = self._new_manifest(target, retention, ref)
        self._require_free(target)
        marker = self.layout.fork_marker_key(source, target, manifest.uid)
        self._create_once(marker, encode_json({"seq": at, "uid": manifest.uid}), self.tags_for(retention))
        try:
            self._create_once(self.layout.manifest_key(target), encode_manifest(manifest), self.tags_for(retention))
        except ObjectExists:
            # best effort (a writer role may not delete): gc removes a marker whose fork does not exist
            with contextlib.suppress(StoreUnavailableError):
                self.backend.delete_many([marker])
            raise SessionExistsError(target) from None
        if self.has_object(self.layout.tombstone_key(source)):
            # a delete of the parent raced us and did not see the marker: back out
            self.backend.delete_many([self.layout.manifest_key(target), marker])
            raise SessionNotFoundError(source, "was deleted")
        return Session(self, manifest, ref.seq, ref.hash, manifest.kid)

    def _fork_by_copy(self, loaded: _Loaded, target: str, at: int, retention: Retention) -> Session:
        events = list(self.replay(loaded.manifest.sid, end=at))
        if not events or events[-1].seq != at:
            raise InvalidInputError(f"session {loaded.manifest.sid!r} has no event at seq {at}")
        ref = ForkRef(loaded.manifest.sid, loaded.manifest.uid, at, events[-1].hash, copied=True)
        manifest = self._new_manifest(target, retention, ref)
        session = Session(self, manifest, 0, self._create_manifest(manifest), manifest.kid)
        for event in events:
            session._append_body(event.body, None)
        return session

    def delete(self, session_id: str) -> DeleteResult:
        """Delete a session. Its objects stay while a live fork needs them (gc reclaims them later)."""
        loaded = self._load(session_id)
        manifest = loaded.manifest
        tombstone = Tombstone(session_id, manifest.uid, format_ts(self.clock()))
        try:
            self._create_once(self.layout.tombstone_key(session_id), encode_json(tombstone), self.tags_for(manifest.retention))
        except ObjectExists:
            raise SessionNotFoundError(session_id, "was deleted") from None
        live = self.live_forks(session_id, manifest.uid)
        if live:
            return DeleteResult(session_id, 0, live)
        return DeleteResult(session_id, self.purge(session_id), [])

    def live_forks(self, session_id: str, uid: str) -> list[str]:
        """Forks of the session whose manifests still exist (a deleted fork's too, while it is kept)."""
        return self._live_forks(uid, self._read_meta(session_id).forks)

    def _live_forks(self, uid: str, markers: list[tuple[str, str]]) -> list[str]:
        live = []
        for child, child_uid in markers:
            try:
                found = self._read_manifest(validate_session_id(child))
            except (InvalidInputError, IntegrityError):
                continue  # not a marker evstore wrote, or a child that does not decode: it keeps nothing alive
            if found is not None and found[0].uid == child_uid and found[0].parent is not None and found[0].parent.uid == uid:
                live.append(child)
        return sorted(live)

    def purge(self, session_id: str) -> int:
        """Remove every object of the session, the tombstone last; return how many."""
        prefix = self.layout.session_prefix(session_id)
        tombstone = self.layout.tombstone_key(session_id)
        removed = 0
        batch: list[str] = []
        tombstoned = False
        for info in self.backend.list(prefix):
            if info.key == tombstone:
                tombstoned = True
                continue
            batch.append(info.key)
            if len(batch) == 1000:
                self.backend.delete_many(batch)
                removed += len(batch)
                batch = []
        self.backend.delete_many(batch)
        removed += len(batch)
        if tombstoned:
            self.backend.delete_many([tombstone])
            removed += 1
        return removed

    def compact(self, session_id: str, *, segment_size: int = 1000) -> list[tuple[int, int]]:
        """Pack full runs of ``segment_size`` loose events into segment objects; return the new ones.

        Loose events are never deleted, so no seq slot is ever freed: a stale
        writer still meets ``If-None-Match`` at every seq. A segment holds the
        exact bytes of its events, so the chain and verify read it as they read them.
        """
        if not 2 <= segment_size <= 100_000:
            raise InvalidInputError("segment size must be from 2 to 100000")
        loaded = self._load(session_id)
        manifest = loaded.manifest
        start = max([loaded.first_own] + [last + 1 for _, last in loaded.meta.segments])
        made: list[tuple[int, int]] = []
        run: list[tuple[int, bytes]] = []
        for raw in self._own_raw(_Loaded(manifest, loaded.genesis, _Meta()), start, None):
            run.append((raw.seq, raw.data))
            if len(run) == segment_size:
                first, last = run[0][0], run[-1][0]
                with contextlib.suppress(ObjectExists):  # another compactor made the same segment
                    self.backend.create(
                        self.layout.segment_key(session_id, first, last),
                        pack_segment(session_id, manifest.uid, run),
                        tags=self.tags_for(manifest.retention),
                    )
                made.append((first, last))
                run = []
        return made

    # ---- keys and retention (implemented in _rekey and _gc) ----------------

    def rekey(self, session_id: str) -> RekeyResult:
        """Re-seal the session's events under the active key (encrypting a plaintext session)."""
        from ._rekey import rekey

        return rekey(self, session_id)

    def shred(self, session_id: str, *, include_forks: bool = False) -> ShredResult:
        """Destroy the session's salt, then its objects: no surviving copy can be opened again."""
        from ._rekey import shred

        return shred(self, session_id, include_forks=include_forks)

    def gc(
        self,
        *,
        dry_run: bool = False,
        grace: timedelta = _DEFAULT_GRACE,
        apply_lifecycle: bool = False,
        keep: int | None = None,
        prefix: str = "",
        now: datetime | None = None,
        on_remove: OnRemove | None = None,
    ) -> GcReport:
        """Remove what no live session or fork needs (see ``evstore._gc``)."""
        from ._gc import collect

        return collect(
            self,
            dry_run=dry_run,
            grace=grace,
            apply_lifecycle=apply_lifecycle,
            keep=keep,
            prefix=prefix,
            now=now,
            on_remove=on_remove,
        )

    def apply_lifecycle(self, ephemeral_days: int = DEFAULT_EPHEMERAL_DAYS) -> tuple[bool, list[dict[str, Any]]]:
        """Install the ephemeral-expiry and abort-uploads rules, merged with the bucket's; idempotent."""
        from ._gc import apply_lifecycle_rules

        return apply_lifecycle_rules(self, ephemeral_days)

    def lifecycle_rules(self) -> list[dict[str, Any]]:
        return self.backend.get_lifecycle()

    def preview_lifecycle(self, at: datetime) -> Iterator[ExpiringObject]:
        """Objects the installed rules will have expired by ``at``."""
        from ._gc import preview

        return preview(self, at)


class Session:
    """A writer for one session. Keeps the head in memory: a steady-state append is one PUT.

    Not thread-safe: give each thread its own writer (``store.open``); the
    store's conditional PUTs keep writers of one session from overwriting
    each other.
    """

    def __init__(self, store: Store, manifest: Manifest, head: int, head_hash: str, seal_kid: str | None) -> None:
        self.store = store
        self.manifest = manifest
        self._head = head
        self._head_hash = head_hash
        self._seal_kid = seal_kid
        self._run: list[tuple[int, bytes]] = []  # own appends since the last segment boundary (auto_compact)

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

    def append(self, message: Message | Iterable[Message], *, expected_head: int | None = None) -> int:
        """Append one message, or a list of messages as one atomic event; return its seq.

        ``expected_head``: fail with ``WriteConflictError`` unless the session's
        head is that seq (optimistic concurrency, as EventStoreDB's expected version).
        """
        return self._append_body(MessagesBody(_as_messages(message)), expected_head)

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
        live = self.store._folded(self.id).positioned()
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
        store = self.store
        validate_session_id(target)
        if target == self.id:
            raise InvalidInputError("a session cannot be forked into itself")
        if self._head == 0:
            raise InvalidInputError(f"session {self.id!r} has no events to fork")
        if self.manifest.retention == "ephemeral":
            return store.fork(self.id, target, at=self._head, retention=retention)
        return store._fork_manifest(self.manifest, target, self._head, self._head_hash, retention)

    def refresh(self) -> int:
        """Adopt events other writers appended since this writer's head; return the new head."""
        self._adopt_head()
        return self._head

    def _adopt_head(self) -> None:
        store = self.store
        loaded = store._load(self.id)
        if loaded.manifest.uid != self.manifest.uid:
            raise SessionNotFoundError(self.id, "was deleted and created again")
        known = self._head if self._head >= loaded.first_own else 0
        head = store._find_head(loaded, known)
        if head > self._head:
            self._head, self._head_hash, self._seal_kid = store._head_state(loaded, head)

    def _seal_key(self) -> tuple[str | None, AESGCM | None]:
        store = self.store
        kid = self._seal_kid
        if kid is None:
            if store.require_encryption:
                raise InvalidInputError(f"session {self.id!r} is plaintext and encryption is required: rekey it first")
            return None, None
        return kid, store._session_key(self.manifest, kid)

    def _append_body(self, body: Body, expected_head: int | None) -> int:
        store = self.store
        if expected_head is not None and expected_head != self._head:
            raise WriteConflictError(self.id, expected_head + 1, f"expected head {expected_head} but it is {self._head}")
        plaintext = encode_body(body, store.max_event_bytes)
        kid, key = self._seal_key()
        seq = self._head + 1
        write_id = os.urandom(16).hex()
        envelope = Envelope(
            FORMAT_VERSION, self.id, self.manifest.uid, seq, format_ts(store.clock()), write_id, self._head_hash, kid
        )
        if key is None:
            envelope = msgspec.structs.replace(envelope, body=body)
        else:
            envelope = msgspec.structs.replace(envelope, sealed=b64encode(seal(key, plaintext, header_aad(envelope))))
        data = encode_json(envelope)
        key_name = store.layout.event_key(self.id, seq)
        try:
            store.backend.create(
                key_name, data, metadata={WRITE_ID_METADATA: write_id}, tags=store.tags_for(self.manifest.retention)
            )
        except ObjectExists:
            data = self._resolve_taken(seq, write_id)
        self._head, self._head_hash = seq, sha256_hex(data)
        if store.auto_compact is not None:
            self._pack_as_we_go(seq, data, store.auto_compact)
        return seq

    def _pack_as_we_go(self, seq: int, data: bytes, size: int) -> None:
        """Keep this writer's run of appends; at each multiple of ``size`` write it as a segment
        (one extra PUT per ``size`` appends). A run that another writer interleaved, or that
        began before this writer opened, is left to ``compact``."""
        if self._run and self._run[-1][0] != seq - 1:
            self._run = []
        if self._run or (seq - 1) % size == 0:
            self._run.append((seq, data))
        if seq % size == 0 and len(self._run) == size:
            store = self.store
            with contextlib.suppress(ObjectExists):
                store.backend.create(
                    store.layout.segment_key(self.id, self._run[0][0], seq),
                    pack_segment(self.id, self.manifest.uid, self._run),
                    tags=store.tags_for(self.manifest.retention),
                )
            self._run = []

    def _resolve_taken(self, seq: int, write_id: str) -> bytes:
        """A 412 at ``seq``: our own earlier attempt (lost response) is success, else a conflict."""
        store = self.store
        try:
            stored = store.backend.get(store.layout.event_key(self.id, seq))
        except ObjectMissing:
            raise WriteConflictError(self.id, seq, "the event there was removed meanwhile") from None
        if stored.metadata.get(WRITE_ID_METADATA) == write_id:
            return stored.data
        raise WriteConflictError(self.id, seq)
