"""Object-store backends. ``S3Store`` is imported lazily: boto3 is slow to import."""

from ._base import (
    Forwarding,
    IncompleteUpload,
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
from ._local import LocalStore
from ._memory import MemoryStore

__all__ = [
    "Forwarding",
    "IncompleteUpload",
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
