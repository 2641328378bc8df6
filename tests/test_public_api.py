"""The curated public surface of ``evstore`` and what importing it costs."""

from __future__ import annotations

import types

import evstore

from .helpers import python_output


def test_all_is_sorted_and_names_exactly_the_public_attributes() -> None:
    assert evstore.__all__ == sorted(evstore.__all__)
    public = {  # dir(): the names loaded on first use (the async API) as well as the rest
        name
        for name in dir(evstore)
        if not name.startswith("_") and not isinstance(getattr(evstore, name), types.ModuleType)
    }
    assert public == set(evstore.__all__)


def test_the_async_names_load_on_first_use_and_behave_as_attributes() -> None:
    code = (
        "import sys, evstore\n"
        "before = 'evstore._async' in sys.modules or 'asyncio' in sys.modules\n"
        "from evstore import AsyncStore\n"
        "from evstore._async import AsyncStore as direct, Outcome\n"
        "assert AsyncStore is direct and evstore.Outcome is Outcome and 'AsyncStore' in vars(evstore)\n"
        "ns = {}\n"
        "exec('from evstore import *', ns)\n"
        "assert ns['AsyncSession'] is evstore.AsyncSession\n"
        "try:\n"
        "    evstore.NoSuchName\n"
        "except AttributeError as exc:\n"
        "    assert 'NoSuchName' in str(exc)\n"
        "else:\n"
        "    raise AssertionError('no AttributeError')\n"
        "print(before)\n"
    )
    assert python_output(code) == "False"


def test_the_names_of_the_parts_load_with_their_part_and_are_the_same_objects() -> None:
    code = (
        "import sys, evstore\n"
        "from evstore import DeleteResult, Keyring, Session, SessionInfo, default_store_url, open_store\n"
        "from evstore._store import Session as via_store, SessionInfo as info_via_store\n"
        "import evstore._crypto, evstore._forks, evstore._read, evstore._url, evstore._write\n"
        "assert Session is via_store is evstore._write.Session and SessionInfo is info_via_store is evstore._read.SessionInfo\n"
        "assert DeleteResult is evstore._forks.DeleteResult and Keyring is evstore._crypto.Keyring\n"
        "assert open_store is evstore._url.open_store and default_store_url is evstore._url.default_store_url\n"
        "assert evstore.Store(evstore.MemoryStore()).keyring == Keyring()\n"
        "print('ok')\n"
    )
    assert python_output(code) == "ok"


def test_every_error_is_an_evstore_error() -> None:
    errors = [getattr(evstore, n) for n in evstore.__all__ if n.endswith("Error")]
    assert errors and all(issubclass(e, evstore.EvstoreError) for e in errors)


def test_importing_evstore_loads_no_sdk_crypto_or_framework() -> None:
    # structural, not timed: what ``import evstore`` must leave for the call that needs it. asyncio
    # (with ssl, socket, subprocess, concurrent.futures and logging behind it) is the async API's,
    # loaded when evstore.AsyncStore is first named; click is the CLI's
    heavy = (
        "boto3",
        "botocore",
        "urllib3",
        "cryptography",
        "asyncio",
        "concurrent.futures",
        "ssl",
        "logging",
        "click",
        "agents",
        "strands",
        "google.adk",
        "pydantic_ai",
        "langgraph",
        "evstore._async",
        "evstore._backends._s3",
        # the read and write paths, keys and store URLs: loaded by the first call that needs them
        "evstore._read",
        "evstore._write",
        "evstore._forks",
        "evstore._manifests",
        "evstore._crypto",
        "evstore._url",
        "evstore.integrations",
        "pyarrow",
    )
    code = f"import sys, evstore; print(sorted(m for m in {heavy!r} if m in sys.modules))"
    assert python_output(code) == "[]"


def test_the_async_api_keeps_the_names_adapters_build_on() -> None:
    import asyncio
    import inspect

    store = evstore.Store(evstore.MemoryStore())
    astore = evstore.AsyncStore(store, max_workers=1)
    assert astore.store is store
    assert inspect.iscoroutinefunction(evstore.AsyncStore.run)
    assert asyncio.run(astore.run(sum, [1, 2])) == 3
    for name in ("create", "open", "context", "info", "list_sessions", "fork", "delete", "verify", "aclose"):
        assert inspect.iscoroutinefunction(getattr(evstore.AsyncStore, name)), name
    for name in ("append", "rewind", "pop", "clear", "refresh", "fork"):
        assert inspect.iscoroutinefunction(getattr(evstore.AsyncSession, name)), name
