"""The store: the public facade over the parts of evstore.

``Store`` holds one ``StoreContext`` (backend, layout, keyring, clock, limits,
caches) and delegates each call to the module that owns its concern:

* ``_read``: manifest and listing -> a verified event stream (replay, context, info, list, follow);
* ``_write``: the writer (``Session``), create, open, forks that start a writer, compaction;
* ``_forks``: fork manifests and markers, delete, purge;
* ``_audit``: verify and receipts, rekey, shred;
* ``_retention``: gc and lifecycle rules.

The request count of each operation is documented in the module that makes the requests.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ._backends import ObjectStore
from ._chain import Receipt, VerifyResult
from ._codec import DEFAULT_MAX_EVENT_BYTES, Message, Retention
from ._context import DEFAULT_AUTO_COMPACT, DEFAULT_GRACE, DEFAULT_WRITER_LEASE, StoreContext, utc_now
from ._ids import Layout
from ._lazy import LazyModule, lazy_names
from ._lifecycle import DEFAULT_EPHEMERAL_DAYS
from ._views import Event, Repair

if TYPE_CHECKING:
    from . import _audit, _fleet, _forks, _proofs, _read, _retention, _write
    from ._audit import Audit, RekeyResult, ShredResult
    from ._crypto import Keyring
    from ._fleet import SessionVerdict
    from ._forks import DeleteResult
    from ._proofs import ConsistencyProof, InclusionProof, TreeCheck, TreeHead
    from ._read import SessionInfo
    from ._retention import ExpiringObject, GcReport, OnRemove
    from ._write import Session
else:  # each part loads on first use (the read and write paths: half of evstore's code to compile)
    _audit, _fleet, _forks, _proofs, _read, _retention, _write = (
        LazyModule(f"evstore._{m}") for m in ["audit", "fleet", "forks", "proofs", "read", "retention", "write"]
    )
__getattr__ = lazy_names("evstore", __name__, {"DeleteResult": "_forks", "Session": "_write", "SessionInfo": "_read"})

__all__ = ["DeleteResult", "Session", "SessionInfo", "Store", "VerifyResult"]


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
        concurrency: int = 32,
        auto_compact: int | None = DEFAULT_AUTO_COMPACT,
        writer_lease: float = DEFAULT_WRITER_LEASE,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.shared = StoreContext(
            backend,
            root=root,
            keyring=keyring,
            require_encryption=require_encryption,
            max_event_bytes=max_event_bytes,
            concurrency=concurrency,
            auto_compact=auto_compact,
            writer_lease=writer_lease,
            clock=clock,
        )

    # What callers configured, as read-only views of the shared context.
    @property
    def backend(self) -> ObjectStore:
        return self.shared.backend

    @property
    def layout(self) -> Layout:
        return self.shared.layout

    @property
    def keyring(self) -> Keyring:
        return self.shared.keyring

    @property
    def require_encryption(self) -> bool:
        return self.shared.require_encryption

    @property
    def max_event_bytes(self) -> int:
        return self.shared.max_event_bytes

    @property
    def concurrency(self) -> int:
        return self.shared.concurrency

    @property
    def auto_compact(self) -> int | None:
        return self.shared.auto_compact

    @property
    def clock(self) -> Callable[[], datetime]:
        return self.shared.clock

    def __repr__(self) -> str:
        return f"Store({self.backend.location!r}, root={self.layout.root!r})"

    def close(self) -> None:
        self.shared.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- reading ------------------------------------------------------------

    def replay(self, session_id: str, *, start: int = 1, end: int | None = None) -> Iterator[Event]:
        """The audit view: every event in [start, end] (a fork's inherited ones included), streamed."""
        return _read.replay(self.shared, session_id, start=start, end=end)

    def context(self, session_id: str, *, repair: Repair = "error") -> list[Message]:
        """The context view: what an agent should send to a model next (see ``evstore._views``)."""
        return _read.context(self.shared, session_id, repair=repair)

    def info(self, session_id: str) -> SessionInfo:
        return _read.info(self.shared, session_id)

    def list_sessions(self, prefix: str = "", *, start_after: str = "", limit: int | None = None) -> Iterator[str]:
        """Session ids in order (deleted and expired remnants included), one LIST per 1,000."""
        return _read.list_sessions(self.shared, prefix, start_after=start_after, limit=limit)

    def follow(
        self,
        session_id: str,
        *,
        after: int = 0,
        after_hash: str | None = None,
        interval: float = 1.0,
        should_stop: Callable[[], bool] = lambda: False,
        sleep: Callable[[float], None] = time.sleep,
    ) -> Iterator[Event]:
        """Events after seq ``after`` as other writers append them (see ``_read.follow``)."""
        return _read.follow(
            self.shared, session_id, after=after, after_hash=after_hash, interval=interval, should_stop=should_stop, sleep=sleep
        )

    # ---- writing ------------------------------------------------------------

    def create(self, session_id: str, *, retention: Retention = "permanent") -> Session:
        """Create a new, empty session; ``SessionExistsError`` if the id is taken."""
        return _write.create(self.shared, session_id, retention=retention)

    def open(
        self, session_id: str, *, create: bool = False, retention: Retention = "permanent", recreate: bool = True
    ) -> Session:
        """A writer for the session, at its current head. With ``create``, a missing session is
        created, and a deleted one too (a new session under its id) unless ``recreate`` is False:
        then it raises ``SessionNotFoundError`` with ``deleted`` set."""
        return _write.open_session(self.shared, session_id, create_missing=create, retention=retention, recreate=recreate)

    def resume(
        self, session_id: str, *, create: bool = False, retention: Retention = "permanent", repair: Repair = "error"
    ) -> tuple[Session, list[Message]]:
        """A writer at the head and the context view, from one pass: ``writer, context = store.resume(id)``."""
        return _write.resume(self.shared, session_id, create_missing=create, retention=retention, repair=repair)

    def fork(self, source: str, target: str, *, at: int | None = None, retention: Retention | None = None) -> Session:
        """Fork ``source`` at ``at`` (default: its head) into a new session ``target``; return its writer."""
        return _write.fork(self.shared, source, target, at=at, retention=retention)

    def compact(self, session_id: str, *, segment_size: int = 1000) -> list[tuple[int, int]]:
        """Pack full runs of ``segment_size`` loose events into segment objects; return the new ones."""
        return _write.compact(self.shared, session_id, segment_size=segment_size)

    # ---- forks and deletion ---------------------------------------------------

    def delete(self, session_id: str) -> DeleteResult:
        """Delete a session. Its objects stay while a live fork needs them (gc reclaims them later)."""
        return _forks.delete(self.shared, session_id)

    def live_forks(self, session_id: str, uid: str) -> list[str]:
        """Forks of the session whose manifests still exist (a deleted fork's too, while it is kept)."""
        return _forks.forks_of(self.shared, session_id, uid)

    def purge(self, session_id: str) -> int:
        """Remove every object of the session, the tombstone last; return how many."""
        return _forks.purge(self.shared, session_id)

    # ---- audit ----------------------------------------------------------------

    def verify(self, session_id: str, *, expect: Receipt | None = None) -> VerifyResult:
        """Check contiguity, every prev, every GCM tag a configured key can open; return the receipt."""
        return _audit.verify(self.shared, session_id, expect=expect)

    def verify_tree(self, session_id: str, expected: TreeHead, *, full: bool = False) -> TreeCheck:
        """That the session still extends ``expected``: a consistency proof from checkpoint objects (a few requests)."""
        return _proofs.verify_tree(self.shared, session_id, expected, full=full)

    def tree_head(self, session_id: str, *, size: int | None = None, checkpoint: bool = False) -> TreeHead:
        """The RFC 9162 Merkle root of the first ``size`` events' hashes (all; ``checkpoint``: the newest checkpoint object's)."""
        return _proofs.tree_head(self.shared, session_id, size, checkpoint=checkpoint)

    def prove(self, session_id: str, seq: int, *, size: int | None = None, checkpoint: bool = False) -> InclusionProof:
        """That event ``seq`` is in the tree of the first ``size`` events: O(log n) hashes (``check_proof``)."""
        return _proofs.prove(self.shared, session_id, seq, size, checkpoint=checkpoint)

    def prove_consistency(self, session_id: str, old_size: int, *, size: int | None = None) -> ConsistencyProof:
        """That the tree of the first ``old_size`` events is a prefix of today's (or of ``size``'s: checkpoint objects serve)."""
        return _proofs.prove_consistency(self.shared, session_id, old_size, size)

    def verify_all(self, *, prefix: str = "", since: datetime | None = None, start_after: str = "") -> Iterator[SessionVerdict]:
        """``verify`` of every session (``prefix``; ``since``: only those written to since), a few
        at a time, in id order: a ``SessionVerdict`` each (ok, tampered, expired, deleted, unreadable)."""
        return _fleet.verify_all(self.shared, prefix=prefix, since=since, start_after=start_after)

    def audit(self, session_id: str) -> Audit:
        """``verify``, and when it fails at a seq, the verified part before it (``Audit.verified``)
        with the failure (``Audit.failure``): what an auditor's report shows."""
        return _audit.audit(self.shared, session_id)

    def rekey(self, session_id: str) -> RekeyResult:
        """Re-seal the session's events under the active key (encrypting a plaintext session)."""
        return _audit.rekey(self.shared, session_id)

    def shred(self, session_id: str, *, include_forks: bool = False) -> ShredResult:
        """Fence the session as ``delete`` does, then destroy its salt and its objects' content: no
        surviving copy can be opened again, and no append is acknowledged after it (see ``_audit.shred``)."""
        return _audit.shred(self.shared, session_id, include_forks=include_forks)

    # ---- retention ------------------------------------------------------------

    def tags_for(self, retention: Retention) -> dict[str, str]:
        return self.shared.tags_for(retention)

    def gc(
        self,
        *,
        dry_run: bool = False,
        grace: timedelta = DEFAULT_GRACE,
        apply_lifecycle: bool = False,
        keep: int | None = None,
        prefix: str = "",
        now: datetime | None = None,
        on_remove: OnRemove | None = None,
    ) -> GcReport:
        """Remove what no live session or fork needs (see ``evstore._retention``)."""
        return _retention.collect(
            self.shared,
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
        return _retention.apply_lifecycle_rules(self.shared, ephemeral_days)

    def lifecycle_rules(self) -> list[dict[str, Any]]:
        return self.backend.get_lifecycle()

    def preview_lifecycle(self, at: datetime) -> Iterator[ExpiringObject]:
        """Objects the installed rules will have expired by ``at``."""
        return _retention.preview(self.shared, at)
