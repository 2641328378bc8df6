"""The curated public surface of ``evstore`` and what importing it costs."""

from __future__ import annotations

import subprocess
import sys
import types

import evstore


def test_all_is_sorted_and_names_exactly_the_public_attributes() -> None:
    assert evstore.__all__ == sorted(evstore.__all__)
    public = {
        name
        for name, value in vars(evstore).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public == set(evstore.__all__)


def test_every_error_is_an_evstore_error() -> None:
    errors = [getattr(evstore, n) for n in evstore.__all__ if n.endswith("Error")]
    assert errors and all(issubclass(e, evstore.EvstoreError) for e in errors)


def test_importing_evstore_loads_no_sdk_crypto_or_framework() -> None:
    heavy = ("boto3", "botocore", "cryptography", "agents", "strands", "google.adk", "pydantic_ai")
    code = f"import sys, evstore; print(sorted(m for m in {heavy!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"


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
