"""pytest plugin (loaded with ``-p`` into Strands Agents' own session tests): Strands' session
repositories become evstore's ``EvstoreSessionRepository``.

* ``FileSessionManager(session_id, storage_dir)`` is replaced by an ``EvstoreSessionManager``
  (the ``RepositorySessionManager`` that ``session_manager`` returns) that is its own
  repository, an ``EvstoreSessionRepository`` over ``LocalStore(storage_dir)``;
* ``S3SessionManager(session_id, bucket, prefix, ..., region_name, endpoint_url)`` likewise over
  ``S3Store(bucket)`` (the test's moto) with the store root ``prefix``;
* the tests' ``MockedSessionRepository`` (an in-memory repository) by an
  ``EvstoreSessionRepository`` over a ``MemoryStore``.

and for the snapshot manager's tests (Strands' ``SnapshotSessionManager`` over its ``Storage``):

* ``LocalFileStorage(base_dir)`` is replaced by ``EvstoreStorage`` over ``LocalStore(base_dir)``.

Tests of the file and S3 layouts (paths, keys, JSON files, symlinks, boto client options) are
skipped with the reason below. Every other test runs unchanged.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from evstore import LocalStore, MemoryStore, Store
from evstore.integrations.strands import EvstoreSessionManager, EvstoreSessionRepository
from evstore.integrations.strands_storage import EvstoreStorage

created: list[str] = []  # kinds of the substituted repositories made: the summary line proves the substitution


class EvstoreFileSessionManager(EvstoreSessionRepository):
    """``FileSessionManager``'s constructor: a session manager that is its own evstore repository."""

    def __init__(self, session_id: str, storage_dir: str | None = None, **kwargs: Any) -> None:
        self.storage_dir = storage_dir or str(Path.home() / ".strands" / "sessions")
        EvstoreSessionRepository.__init__(self, Store(LocalStore(Path(self.storage_dir))))
        EvstoreSessionManager.__init__(self, session_id=session_id, session_repository=self, **kwargs)  # type: ignore[arg-type]
        created.append("file")


class EvstoreS3SessionManager(EvstoreSessionRepository):
    """``S3SessionManager``'s constructor over evstore's ``S3Store`` of the same bucket."""

    def __init__(
        self,
        session_id: str,
        bucket: str,
        prefix: str = "",
        boto_session: Any = None,
        boto_client_config: Any = None,
        region_name: str | None = None,
        endpoint_url: str | None = None,
        **kwargs: Any,
    ) -> None:
        import boto3

        from evstore._backends._s3 import S3Store

        session = boto_session or boto3.session.Session(region_name=region_name)
        client = session.client("s3", region_name=region_name, endpoint_url=endpoint_url, config=boto_client_config)
        self.bucket = bucket
        EvstoreSessionRepository.__init__(self, Store(S3Store(bucket, client=client), root=prefix))
        EvstoreSessionManager.__init__(self, session_id=session_id, session_repository=self, **kwargs)  # type: ignore[arg-type]
        created.append("s3")


class EvstoreLocalFileStorage(EvstoreStorage):
    """``LocalFileStorage(base_dir)``'s constructor: an ``EvstoreStorage`` over ``LocalStore(base_dir)``."""

    def __init__(self, base_dir: str = "./.strands/", **kwargs: Any) -> None:
        self.base_dir = base_dir
        super().__init__(Store(LocalStore(Path(base_dir))))
        created.append("storage")


class EvstoreMockedSessionRepository(EvstoreSessionRepository):
    """The tests' in-memory repository, as evstore over a ``MemoryStore``."""

    def __init__(self) -> None:
        super().__init__(Store(MemoryStore()))
        created.append("memory")


def _manager_class(name: str, base: type) -> type:
    # an EvstoreSessionManager (a RepositorySessionManager) whose repository methods are evstore's (first in the MRO)
    return type(name, (base, EvstoreSessionManager), {})


def pytest_configure(config: pytest.Config) -> None:
    sys.path.insert(0, str(config.rootpath))  # the sdist's ``tests`` package (its fixtures)
    import strands.session
    import strands.session.file_session_manager
    import strands.session.s3_session_manager

    import tests.fixtures.mock_session_repository as mocked

    file_manager = _manager_class("FileSessionManager", EvstoreFileSessionManager)
    s3_manager = _manager_class("S3SessionManager", EvstoreS3SessionManager)
    strands.session.FileSessionManager = file_manager  # type: ignore[attr-defined]
    strands.session.file_session_manager.FileSessionManager = file_manager  # type: ignore[attr-defined]
    strands.session.S3SessionManager = s3_manager  # type: ignore[attr-defined]
    strands.session.s3_session_manager.S3SessionManager = s3_manager  # type: ignore[attr-defined]
    mocked.MockedSessionRepository = EvstoreMockedSessionRepository  # type: ignore[attr-defined]
    import strands.storage

    strands.storage.LocalFileStorage = EvstoreLocalFileStorage  # type: ignore[misc]


_LAYOUT = "probes the file layout of FileSessionManager (paths, JSON files on disk)"
_S3_LAYOUT = "probes the S3 layout or boto client of S3SessionManager (keys, user agent, config)"
_SYMLINK = "symlink attacks on FileSessionManager's directory layout: evstore writes no such paths"

_SNAPSHOT = "test_snapshot_session_manager.py"
_STORAGE_NAME = "asserts the class name LocalFileStorage recorded in the snapshot (evstore's is EvstoreLocalFileStorage)"
_FILE = "test_file_session_manager.py"
_S3 = "test_s3_session_manager.py"
#: (module, test name without parameters) -> reason for skipping it
SKIPS: dict[tuple[str, str], str] = {
    (_SNAPSHOT, "test_save_writes_external_ref_for_durable_storage"): _STORAGE_NAME,
    **{
        (_FILE, name): _LAYOUT
        for name in (
            "test_create_session",  # asserts session.json under _get_session_path
            "test_delete_session",  # asserts the session directory is gone
            "test_create_agent",  # asserts agent.json on disk
            "test_create_message",  # asserts message_<id>.json on disk
            "test_message_durable_id_persists",  # reads the message file on disk
            "test_corrupted_json_file",  # calls FileSessionManager._read_file
            "test__get_session_path_invalid_session_id",  # private path helpers
            "test__get_agent_path_invalid_agent_id",
            "test__get_message_path_invalid_message_id",
            "test_create_multi_agent",  # asserts multi_agent.json on disk
            "test_create_session_multi_agent_directory_structure",
        )
    },
    **{
        (_S3, name): _S3_LAYOUT
        for name in (
            "test_init_s3_session_manager",  # the boto client's user agent
            "test_init_s3_session_manager_with_config",
            "test_init_s3_session_manager_with_existing_user_agent",
            "test_init_s3_session_manager_with_endpoint_url",
            "test_create_session",  # GETs session.json by key
            "test_delete_session",  # HEADs session.json by key
            "test_create_agent",  # GETs agent.json by key
            "test_create_message",  # GETs message_<id>.json by key
            "test__get_session_path_prefix_normalization",  # private key helpers
            "test__get_session_path_invalid_session_id",
            "test__get_agent_path_invalid_agent_id",
            "test__get_message_path_invalid_message_id",
            "test_create_multi_agent",  # GETs multi_agent.json by key
        )
    },
}

_DESELECTED_MODULES: dict[str, str] = {}


_deselected: list[int] = []


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    kept, deselected = [], []
    for item in items:
        if item.path.name in _DESELECTED_MODULES:
            deselected.append(item)
            continue
        name = getattr(item, "originalname", item.name)
        reason = SKIPS.get((item.path.name, name))
        if reason is None and item.path.name == "test_file_session_manager_symlink_protection.py":
            reason = _SYMLINK
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=f"evstore: {reason}"))
        kept.append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept
        _deselected.append(len(deselected))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for module, reason in _DESELECTED_MODULES.items():
        terminalreporter.write_line(f"evstore: deselected {sum(_deselected)} tests of {module}: {reason}")
    kinds = {kind: created.count(kind) for kind in sorted(set(created))}
    terminalreporter.write_line(f"evstore-substituted repositories: {sum(kinds.values())} {kinds}")
