"""Object-store backends. ``S3Store`` is imported lazily: boto3 is slow to import; so are
``LocalStore`` and ``MemoryStore``, which an S3 user never needs."""

from typing import TYPE_CHECKING, Any

from ._base import (
    Forwarding,
    IncompleteUpload,
    KeysPage,
    LifecycleRule,
    ListPage,
    ObjectExists,
    ObjectInfo,
    ObjectMissing,
    ObjectRefused,
    ObjectStore,
    PreconditionFailed,
    StoredObject,
)

if TYPE_CHECKING:
    from ._local import LocalStore
    from ._memory import MemoryStore

#: Backends loaded on first use, by the module that holds them.
_LAZY = {"LocalStore": "_local", "MemoryStore": "_memory"}

__all__ = [
    "Forwarding",
    "IncompleteUpload",
    "KeysPage",
    "LifecycleRule",
    "ListPage",
    "LocalStore",
    "MemoryStore",
    "ObjectExists",
    "ObjectInfo",
    "ObjectMissing",
    "ObjectRefused",
    "ObjectStore",
    "PreconditionFailed",
    "StoredObject",
]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    globals()[name] = value  # later lookups find it without coming here
    return value
