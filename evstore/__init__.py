"""evstore: an event-sourced session store for AI agents on S3-compatible storage.

Every message is one immutable object at ``sessions/<id>/<seq>``, written with
``If-None-Match: *`` the moment it exists. See the README for a tour.
"""

from ._async import AsyncSession, AsyncStore, Outcome
from ._backends import LocalStore, MemoryStore, ObjectStore
from ._chain import Receipt
from ._codec import Message, Retention
from ._crypto import Keyring, generate_key
from ._errors import (
    EvstoreError,
    IntegrityError,
    InvalidInputError,
    KeyRequiredError,
    SessionExistsError,
    SessionExpiredError,
    SessionNotFoundError,
    StoreUnavailableError,
    WriteConflictError,
)
from ._store import DeleteResult, Session, SessionInfo, Store, VerifyResult
from ._url import default_store_url, open_store
from ._views import Event, Repair

__version__ = "0.1.0"

__all__ = [
    "AsyncSession",
    "AsyncStore",
    "DeleteResult",
    "Event",
    "EvstoreError",
    "IntegrityError",
    "InvalidInputError",
    "KeyRequiredError",
    "Keyring",
    "LocalStore",
    "MemoryStore",
    "Message",
    "ObjectStore",
    "Outcome",
    "Receipt",
    "Repair",
    "Retention",
    "Session",
    "SessionExistsError",
    "SessionExpiredError",
    "SessionInfo",
    "SessionNotFoundError",
    "Store",
    "StoreUnavailableError",
    "VerifyResult",
    "WriteConflictError",
    "default_store_url",
    "generate_key",
    "open_store",
]
