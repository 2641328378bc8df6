"""Strands Agents' snapshot persistence on evstore: ``EvstoreStorage`` and ``EvstoreSnapshotSessionManager``.

Strands' newer ``SnapshotSessionManager`` saves the whole agent as one JSON snapshot through its
``Storage`` interface (``write``/``read``/``delete``/``list`` of bytes under ``/``-separated keys).
``EvstoreStorage`` is that interface over an evstore ``Store`` (tested with strands-agents 1.62;
this module imports ``strands``, ``import evstore`` never does)::

    from strands import Agent
    from evstore.integrations.strands_storage import snapshot_session_manager

    agent = Agent(session_manager=snapshot_session_manager("chat-42", evstore.open_store("s3://bucket/agents")))

Design: **one evstore session per key directory**, one event per write. A key's directory (all
but its last part) names the session: ``prefix + "s"`` and, for each part, ``.`` and the part
escaped as evstore id characters (``integrations._names``, lower-case hex); the last part is
the name. So an agent's ``snapshot_latest.json`` has a session of its own, its immutable
snapshots another. Each ``write`` appends one event, a message ``{"role": "system", "content":
null, "meta": {"strands_storage": {"name": NAME, "text": ...}}}`` (``"base64"`` in place of
``"text"`` for bytes that are not UTF-8): nothing is overwritten, ``evstore replay`` shows
every version, and with a keyring every snapshot is sealed. ``delete`` appends a record
``{"name": NAME, "deleted": true}`` (the history stays: delete the evstore sessions, or
crypto-shred them, where it must not).

A read looks backwards from the head: the newest event naming the key answers it. A fresh handle
reads the latest snapshot in 9 requests at any history length (opening the writer: the manifest,
two LISTs, the head event; then that event through ``Store.replay``: the manifest, its LISTs,
the event); a handle that read or wrote the directory before reads only what other writers
appended since (one LIST when nothing). A write is one conditional PUT at the head this handle
knows (exactly-once, as every evstore append): when another process wrote the directory
meanwhile, ``WriteConflictError`` is raised and nothing is stored, and every later write there
raises it again (no request) until a read of the directory re-reads it from its head: a write
made from what the other process replaced never lands. ``list`` reads every event of each
directory it covers (one LIST finds the directories), so it costs what their histories hold;
Strands lists only for ``list_snapshot_ids`` and ``delete_session``. A directory's session id
must fit evstore's 128 characters (a key that does not raises ``StorageError``).

``EvstoreSnapshotSessionManager`` is Strands' ``SnapshotSessionManager`` that goes on after such
a conflict: the agent call whose save lost raises ``WriteConflictError`` once; at the agent's
next invocation, before its prompt is added, the agent is restored from the latest snapshot (the
other process's), its unsaved turn dropped, and the invocation continues from there. To run the
failed prompt again, call the agent with it again. A plain ``SnapshotSessionManager`` over
``EvstoreStorage`` raises the conflict too, but keeps the stale agent: every later save would
raise again until the agent is built anew.
"""

from __future__ import annotations

import base64
import binascii
import builtins
import re
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from strands.hooks import BeforeInvocationEvent, HookRegistry
from strands.session import SnapshotSessionManager
from strands.storage.search.keyword import KeywordSearchStrategy
from strands.storage.storage import Storage, _NamespacedStorage
from strands.types.exceptions import StorageError

from .._async import AsyncStore
from .._codec import Message, Retention
from .._errors import InvalidInputError, SessionNotFoundError, WriteConflictError
from .._ids import validate_session_id
from .._store import Session, Store
from .._views import Event
from ._common import meta_record
from ._names import escape, unescape

if TYPE_CHECKING:
    from strands.storage.storage import StorageSearchResult

__all__ = ["EvstoreSnapshotSessionManager", "EvstoreStorage", "snapshot_session_manager"]

T = TypeVar("T")
#: The meta key of every record this module writes.
RECORD_KEY = "strands_storage"
#: How many events a read looks back at first (the head alone), then twice as many each time, up to _MAX_STEP.
_FIRST_STEP = 1
_MAX_STEP = 256


def split_key(key: str) -> tuple[list[str], str]:
    """(directory parts, name) of a key, normalised as Strands' own storages do (runs of ``/``
    collapsed, outer ``/`` stripped); ``StorageError`` for an empty key, a backslash or a ``..``
    part. Pure."""
    if "\\" in key:
        raise StorageError(f"invalid storage key {key[:200]!r}: backslashes are not allowed")
    parts = [part for part in key.split("/") if part]
    if not parts:
        raise StorageError("a storage key must not be empty")
    if ".." in parts:
        raise StorageError(f"invalid storage key {key[:200]!r}: '..' path segments are not allowed")
    return parts[:-1], parts[-1]


def _id_part(part: str) -> str:
    return "." + escape(part.encode(), upper=False)


def record(name: str, data: bytes | None) -> Message:
    """The message of one write (``data``) or delete (None) of ``name``. Pure."""
    entry: dict[str, Any] = {"name": name}
    if data is None:
        entry["deleted"] = True
    else:
        try:
            entry["text"] = data.decode("utf-8")
        except UnicodeDecodeError:
            entry["base64"] = base64.b64encode(data).decode("ascii")
    return {"role": "system", "content": None, "meta": {RECORD_KEY: entry}}


def parse_record(message: Message) -> tuple[str, bytes | None] | None:
    """(name, data or None for a delete) of a message ``record`` made, else None (a message of
    another tool is no write of a key). Pure."""
    entry = meta_record(message, RECORD_KEY)
    if entry is None or not isinstance(entry.get("name"), str):
        return None
    name: str = entry["name"]
    if entry.get("deleted") is True:
        return name, None
    if isinstance(entry.get("text"), str):
        return name, entry["text"].encode("utf-8")
    if isinstance(entry.get("base64"), str):
        try:
            return name, base64.b64decode(entry["base64"], validate=True)
        except (binascii.Error, ValueError):
            return None
    return None


class _Entry:
    """What a directory's log says of one name: the seq of the newest event naming it, whether
    that event deletes it, and its data (None when deleted, or not kept: then read again)."""

    __slots__ = ("data", "deleted", "seq")

    def __init__(self, seq: int, data: bytes | None, *, deleted: bool) -> None:
        self.seq = seq
        self.data = data
        self.deleted = deleted


class _Directory:
    """One directory's evstore session as this handle saw it. ``entries`` holds, for each name
    named by an event in ``[low, writer.head]``, the newest such event: an older event of a
    name never replaces what a newer one said."""

    def __init__(self, writer: Session) -> None:
        self.writer = writer
        self.low = writer.head + 1
        self.entries: dict[str, _Entry] = {}

    def fold_newer(self, events: list[Event]) -> None:
        for event in events:
            for message in event.messages:
                found = parse_record(message)
                if found is not None:
                    self.entries[found[0]] = _Entry(event.seq, found[1], deleted=found[1] is None)

    def fold_older(self, events: list[Event], keep: bool) -> None:
        """Fold events older than ``low`` (in order); ``keep``: keep their data too."""
        for event in reversed(events):
            for message in reversed(event.messages):
                found = parse_record(message)
                if found is not None and found[0] not in self.entries:
                    self.entries[found[0]] = _Entry(event.seq, found[1] if keep else None, deleted=found[1] is None)
            self.low = min(self.low, event.seq)


class EvstoreStorage:
    """Strands' ``Storage`` over an evstore ``Store`` (see the module docstring).

    ``prefix`` starts every evstore session id this storage names; ``retention`` applies to the
    sessions it creates. Blocking store calls run in the pool of an ``evstore.AsyncStore``
    (pass one to share its pool; a ``Store`` gets a one-thread pool of its own). Thread-safe.
    """

    def __init__(self, store: Store | AsyncStore, *, prefix: str = "", retention: Retention = "permanent") -> None:
        try:
            validate_session_id(prefix + "s")
        except InvalidInputError as error:
            raise ValueError(f"prefix {prefix!r} cannot start an evstore session id: {error}") from None
        self.astore = store if isinstance(store, AsyncStore) else AsyncStore(store, max_workers=1)
        self.store = self.astore.store
        self.prefix = prefix
        self.retention: Retention = retention
        self._directories: dict[str, _Directory] = {}
        #: Directories whose last write raised ``WriteConflictError``: the next call re-reads them.
        self._stale: set[str] = set()
        #: Keys whose write lost to another writer, until ``take_conflicts`` hands them out.
        self._conflicts: set[str] = set()
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        return f"EvstoreStorage({self.store!r}, prefix={self.prefix!r})"

    # ---- names --------------------------------------------------------------

    def session_id(self, parts: list[str]) -> str:
        """The evstore session id of a directory (its parts); ``StorageError`` when it is no valid id."""
        session_id = self.prefix + "s" + "".join(_id_part(part) for part in parts)
        try:
            return validate_session_id(session_id)
        except InvalidInputError:
            shown = "/".join(parts)[:200]
            size = len(session_id)
            raise StorageError(f"the directory {shown!r} makes a session id of {size} characters (at most 128)") from None

    def directory_of(self, session_id: str) -> list[str] | None:
        """The directory parts a session id of this storage names, or None (another tool's id)."""
        base = self.prefix + "s"
        if not session_id.startswith(base):
            return None
        rest = session_id[len(base) :]
        if not rest:
            return []
        if not rest.startswith("."):
            return None
        parts = []
        for piece in rest[1:].split("."):
            data = unescape(piece, upper=False)
            if not data:
                return None
            try:
                parts.append(data.decode("utf-8"))
            except UnicodeDecodeError:
                return None
        return parts

    # ---- the blocking side (under the lock) ---------------------------------

    def _directory(self, session_id: str, *, create: bool = False) -> _Directory | None:
        """The directory's log brought up to date: what other writers appended is folded in (one
        LIST when nothing), or, when this handle has none or its last write conflicted, opened
        afresh at its head. None when the session does not exist (``create``: it is created)."""
        directory = self._directories.get(session_id) if session_id not in self._stale else None
        if directory is not None:
            try:
                directory.fold_newer(directory.writer.catch_up())
                return directory
            except SessionNotFoundError:
                del self._directories[session_id]
                if not create:
                    return None
        try:
            writer = self.store.open(session_id, create=create, retention=self.retention)
        except SessionNotFoundError:
            return None
        directory = self._directories[session_id] = _Directory(writer)
        self._stale.discard(session_id)
        return directory

    def _known(self, session_id: str) -> _Directory | None:
        """The directory's log for a write: as this handle last saw it (no request), or None when it
        has none. ``WriteConflictError`` (no request) when its last write conflicted and nothing
        read it since: what would be written was made from what the other writer replaced, so it
        is refused until the caller reads the key again (``EvstoreSnapshotSessionManager`` restores
        the agent from it)."""
        directory = self._directories.get(session_id)
        if session_id in self._stale and directory is not None:
            raise WriteConflictError(session_id, directory.writer.head + 1, "another writer wrote here: read the key again first")
        return directory

    def _read_back(self, directory: _Directory, until: Callable[[], bool], *, keep: bool) -> None:
        """Fold older events, newest first, until ``until()`` or the first event is folded: a few
        at first, twice as many each time (each a ``Store.replay`` of that range)."""
        step = _FIRST_STEP
        sid = directory.writer.id
        while directory.low > 1 and not until():
            start = max(1, directory.low - step)
            directory.fold_older(list(self.store.replay(sid, start=start, end=directory.low - 1)), keep)
            directory.low = start
            step = min(step * 2, _MAX_STEP)

    def _entry(self, session_id: str, name: str) -> _Entry | None:
        directory = self._directory(session_id)
        if directory is None:
            return None
        self._read_back(directory, lambda: name in directory.entries, keep=True)
        entry = directory.entries.get(name)
        if entry is not None and not entry.deleted and entry.data is None:  # not kept: read again
            (event,) = self.store.replay(session_id, start=entry.seq, end=entry.seq)
            found = [found for message in event.messages if (found := parse_record(message)) and found[0] == name]
            entry.data = found[-1][1]
        return entry

    def _write(self, key: str, data: bytes | None) -> None:
        parts, name = split_key(key)
        session_id = self.session_id(parts)
        with self._lock:
            try:
                self._write_locked(session_id, name, data)
            except WriteConflictError:
                self._conflicts.add(key)
                raise

    def _write_locked(self, session_id: str, name: str, data: bytes | None) -> None:
        """One conditional event at the head this handle knows of the directory (a handle that
        knows none opens it at its head, created if missing); a delete reads the directory first
        and writes only where the name holds data."""
        if data is None:
            entry = self._entry(session_id, name)
            if entry is None or entry.deleted:
                return
            directory = self._directories[session_id]
        else:
            found = self._known(session_id) or self._directory(session_id, create=True)
            assert found is not None  # created when missing
            directory = found
        writer = directory.writer
        try:
            seq = writer.append(record(name, data), expected_head=writer.head)
        except WriteConflictError:
            self._stale.add(session_id)
            raise
        directory.entries[name] = _Entry(seq, data, deleted=data is None)

    def _read(self, key: str) -> bytes | None:
        parts, name = split_key(key)
        with self._lock:
            entry = self._entry(self.session_id(parts), name)
            return entry.data if entry is not None else None

    def _list(self, query: str) -> builtins.list[str]:
        if "\\" in query or ".." in query.split("/"):
            raise StorageError(f"invalid storage prefix {query[:200]!r}")
        query = re.sub("/+", "/", query).lstrip("/")
        *head, fragment = query.split("/")
        with self._lock:
            base = self.session_id(head)
            listed = self.store.list_sessions(base + (_id_part(fragment) if fragment else "."))
            keys = []
            for session_id in [base, *listed]:
                parts = self.directory_of(session_id)
                if parts is None:
                    continue
                directory = self._directory(session_id)
                if directory is None:
                    continue
                self._read_back(directory, lambda: False, keep=False)
                path = "".join(part + "/" for part in parts)
                keys += [path + name for name, entry in directory.entries.items() if not entry.deleted]
            return sorted(key for key in keys if key.startswith(query))

    def take_conflicts(self, chosen: Callable[[str], bool]) -> bool:
        """Whether a write of a ``chosen`` key raised ``WriteConflictError`` since it was last asked
        (those keys are then forgotten)."""
        with self._lock:
            taken = {key for key in self._conflicts if chosen(key)}
            self._conflicts -= taken
            return bool(taken)

    # ---- Strands' Storage ---------------------------------------------------

    async def _run(self, work: Callable[..., T], *args: Any) -> T:
        return await self.astore.run(work, *args)

    async def write(self, key: str, data: bytes) -> None:
        """Append one event holding ``data`` as the key's newest version (one PUT at steady state)."""
        await self._run(self._write, key, bytes(data))

    async def read(self, key: str) -> bytes | None:
        """The key's newest version, or None (never written, or deleted)."""
        return await self._run(self._read, key)

    async def delete(self, key: str) -> None:
        """Append a delete record for the key (a no-op when it holds nothing)."""
        await self._run(self._write, key, None)

    async def list(self, query: str = "") -> builtins.list[str]:
        """The keys that start with ``query`` and hold data, sorted."""
        return await self._run(self._list, query)

    async def search(self, query: str) -> builtins.list[StorageSearchResult]:
        """Strands' keyword search over every key (its default for a storage)."""
        return await KeywordSearchStrategy().search(self, query)

    def namespace(self, prefix: str) -> Storage:
        """A view of this storage whose keys start with ``prefix/`` (Strands' own namespaced view,
        which its session manager takes as already namespaced, as the shipped storages' views)."""
        return _NamespacedStorage(self, prefix)


class EvstoreSnapshotSessionManager(SnapshotSessionManager):
    """Strands' ``SnapshotSessionManager`` over an ``EvstoreStorage`` that recovers an agent whose
    save lost a race (see the module docstring).

    Contract: when a save of an agent raises ``WriteConflictError`` (another process saved the
    same agent since this one read or wrote it), the error propagates out of that agent call,
    once. At the agent's next invocation, before its prompt is added, the agent is restored from
    the latest snapshot, exactly as ``restore_snapshot`` restores it (messages, state,
    conversation manager: the other process's turns included, the failed call's dropped), and
    the invocation continues from there.
    """

    def __init__(self, session_id: str, *, storage: EvstoreStorage, **kwargs: Any) -> None:
        super().__init__(session_id, storage=storage, **kwargs)
        self.evstore_storage = storage

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        super().register_hooks(registry, **kwargs)
        registry.add_callback(BeforeInvocationEvent, self._restore_if_stale)

    def _owns(self, key: str, agent_id: str) -> bool:
        """Whether ``key`` is one of the agent's snapshot keys (Strands' layout,
        ``[<namespace>/]<session>/scopes/agent/<agent>/snapshots/...``)."""
        scope = f"{self.session_id}/scopes/agent/{agent_id}/snapshots/"
        return key.startswith(scope) or f"/{scope}" in key

    async def _restore_if_stale(self, event: BeforeInvocationEvent) -> None:
        agent = event.agent
        if self.evstore_storage.take_conflicts(lambda key: self._owns(key, agent.agent_id)):
            await self.restore_snapshot(agent)


def snapshot_session_manager(
    session_id: str, store: Store | AsyncStore, *, prefix: str = "", retention: Retention = "permanent", **kwargs: Any
) -> EvstoreSnapshotSessionManager:
    """An ``EvstoreSnapshotSessionManager`` (Strands' ``SnapshotSessionManager``, recovering from
    a conflict) for ``session_id`` over an ``EvstoreStorage`` of ``store``."""
    return EvstoreSnapshotSessionManager(session_id, storage=EvstoreStorage(store, prefix=prefix, retention=retention), **kwargs)
