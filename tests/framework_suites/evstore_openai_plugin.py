"""pytest plugin (loaded with ``-p`` into the OpenAI Agents SDK's own test run): every
``SQLiteSession`` becomes an evstore-backed ``EvstoreSession``.

``SQLiteSession(session_id, db_path=":memory:", ..., session_settings=None)`` is replaced,
before the SDK's test modules import it, by ``EvstoreSQLiteSession``: an ``EvstoreSession``
over a ``LocalStore`` in ``<db_path>.evstore`` (one store per path, shared by the sessions
of that path, as one SQLite file is) or, for ``":memory:"``, a ``MemoryStore`` of its own (as
an in-memory SQLite database is private to its connection). Session ids that are not valid
evstore ids are hex-encoded. ``close()`` closes nothing (the store needs no connection).

Tests that probe SQLite internals (connections, file locks, raw rows, rollbacks of a SQL
transaction) or SQLiteSession-only behaviour outside the ``Session`` protocol are skipped
with the reason below; every other test runs unchanged. In the runner test modules only
the tests that use ``SQLiteSession`` run (the rest are not session tests: deselected).
"""

from __future__ import annotations

import inspect
import re
import threading
from pathlib import Path
from typing import Any

import pytest

from evstore import LocalStore, MemoryStore, Store
from evstore.integrations.openai_agents import EvstoreSession

_VALID_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_stores: dict[Path, Store] = {}
_stores_lock = threading.Lock()


def _evstore_id(session_id: str) -> str:
    if _VALID_ID.fullmatch(session_id) and ".." not in session_id:
        return session_id
    return "h-" + session_id.encode().hex()[:120]


def _store_for(db_path: str | Path) -> Store:
    if str(db_path) == ":memory:":
        return Store(MemoryStore())
    path = Path(db_path).resolve()
    with _stores_lock:
        store = _stores.get(path)
        if store is None or not path.parent.exists():  # a new temporary directory at the same path
            store = _stores[path] = Store(LocalStore(Path(str(path) + ".evstore")))
        return store


class EvstoreSQLiteSession(EvstoreSession):
    """``SQLiteSession``'s constructor over evstore (the table names are ignored)."""

    created = 0  # instances made: the summary line proves the substitution happened

    def __init__(
        self,
        session_id: str,
        db_path: str | Path = ":memory:",
        sessions_table: str = "agent_sessions",
        messages_table: str = "agent_messages",
        session_settings: Any = None,
    ) -> None:
        super().__init__(_evstore_id(session_id), _store_for(db_path), session_settings=session_settings)
        EvstoreSQLiteSession.created += 1
        self.session_id = session_id  # the SDK's id, as given
        self.db_path = db_path
        self.sessions_table = sessions_table
        self.messages_table = messages_table

    def close(self) -> None:
        """Nothing to close: evstore holds no connection."""


def _substitute() -> None:
    # The modules that import SQLiteSession are imported before the substitution, so that
    # their own references stay the real class: code that special-cases a native SQLiteSession
    # (its private SQL paths) must treat evstore's session as the generic Session it is.
    import agents
    import agents.extensions.memory.encrypt_session
    import agents.memory
    import agents.memory.openai_responses_compaction_session
    import agents.memory.sqlite_session

    for module in (agents, agents.memory, agents.memory.sqlite_session):
        module.SQLiteSession = EvstoreSQLiteSession  # type: ignore[attr-defined,misc]


_substitute()  # at plugin import: before any test module runs ``from agents import SQLiteSession``

_INTERNALS = "probes SQLite internals (connections, locks, raw rows, SQL transactions)"
_LIFECYCLE = "SQLiteSession.close() lifecycle: not part of the Session protocol (evstore holds no connection)"
_CORRUPT = "inserts a corrupt SQL row by hand; evstore rejects a corrupt object as IntegrityError instead of skipping it"

_ATOMIC_POP = (
    "needs SQLiteSession's private _pop_item_with_validation (authentication inside a SQL"
    " transaction), which EncryptedSession documents as SQLite-only; other sessions take the generic pop"
)
_SNAPSHOT = (
    "needs SQLiteSession's private _get_compaction_snapshot (a SQL suffix replacement),"
    " which the SDK uses only for a session whose type is SQLiteSession"
)

#: test name (without parameters) -> reason for skipping it
SKIPS: dict[str, str] = {
    "test_sqlite_session_close_closes_worker_thread_connections": _INTERNALS,
    "test_sqlite_session_reaps_connections_from_exited_worker_threads": _INTERNALS,
    "test_sqlite_session_closes_retired_connections_before_the_next_allocation": _INTERNALS,
    "test_sqlite_session_keeps_connections_of_live_worker_threads": _INTERNALS,
    "test_sqlite_session_closed_rejects_empty_add_items": _LIFECYCLE,
    "test_sqlite_session_pop_item_skips_corrupt_most_recent": _CORRUPT,
    "test_sqlite_session_pop_item_returns_none_after_dropping_only_corrupt_rows": _CORRUPT,
    "test_sqlite_session_get_items_limit_skips_corrupt_newest_rows": _CORRUPT,
    "test_sqlite_session_get_items_session_settings_limit_skips_corrupt_rows": _CORRUPT,
    "test_sqlite_session_file_lock_is_shared_across_instances": _INTERNALS,
    "test_sqlite_session_failed_add_items_releases_write_lock": _INTERNALS,
    "test_sqlite_session_failed_clear_session_rolls_back": _INTERNALS,
    "test_sqlite_session_failed_pop_item_releases_write_lock": _INTERNALS,
    "test_sqlite_session_rollback_failure_evicts_connection": _INTERNALS,
    "test_sqlite_session_close_retries_quarantined_connection": _INTERNALS,
    "test_sqlite_session_post_commit_cancellation_propagates_after_known_outcome": (
        "pauses a sqlite3 commit; the same contract (cancel waits for the write's outcome) is"
        " tested on evstore in tests/test_openai_agents.py"
    ),
    # tests/extensions/memory/test_encrypt_session.py
    "test_encrypted_pop_wrong_key_preserves_recoverable_history": _ATOMIC_POP,
    "test_encrypted_pop_rechecks_authentication_after_expired_tail": _ATOMIC_POP,
    "test_encrypted_pop_cancellation_waits_for_authentication_rollback": _ATOMIC_POP,
    "test_encrypted_pop_authentication_is_atomic_with_concurrent_mutations": _ATOMIC_POP + "; " + _INTERNALS,
    "test_encrypted_pop_wrong_key_preserves_row_identity": _ATOMIC_POP + "; " + _INTERNALS,
    "test_encrypted_compaction_skips_unencrypted_stored_history": _SNAPSHOT,
}

_RUNNER_MODULES = ("test_agent_runner.py", "test_agent_runner_streamed.py")


def _uses_sqlite_session(item: pytest.Item) -> bool:
    function = getattr(item, "function", None)
    try:
        return function is not None and "SQLiteSession" in inspect.getsource(function)
    except (OSError, TypeError):
        return False


_deselected: list[int] = []


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    kept, deselected = [], []
    for item in items:
        if item.path.name in _RUNNER_MODULES and not _uses_sqlite_session(item):
            deselected.append(item)
            continue
        name = getattr(item, "originalname", item.name)
        reason = SKIPS.get(name)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=f"evstore: {reason}"))
        kept.append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept
        _deselected.append(len(deselected))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _deselected:
        terminalreporter.write_line(
            f"evstore: deselected {sum(_deselected)} tests of {', '.join(_RUNNER_MODULES)}: they use no SQLiteSession"
        )
    terminalreporter.write_line(f"evstore-substituted sessions: {EvstoreSQLiteSession.created}")
