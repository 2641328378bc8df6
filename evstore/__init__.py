"""evstore: an event-sourced session store for AI agents on S3-compatible storage.

Every message is one immutable object at ``sessions/<id>/<seq>``, written with
``If-None-Match: *`` the moment it exists. See the README for a tour.
"""

import typing

from ._backends import ObjectStore
from ._chain import Receipt
from ._codec import Message, Retention
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
from ._lazy import lazy_names as _lazy_names
from ._store import Store, VerifyResult
from ._views import Event, Repair

if typing.TYPE_CHECKING:
    from ._async import AsyncSession, AsyncStore, Outcome
    from ._backends import LocalStore, MemoryStore
    from ._crypto import Keyring, generate_key
    from ._forks import DeleteResult
    from ._proofs import ConsistencyProof, InclusionProof, TreeHead, check_proof
    from ._read import SessionInfo
    from ._url import default_store_url, open_store
    from ._write import Session

__version__ = "0.1.0"

#: Public names loaded on first use, by the module that holds them: the async API imports asyncio
#: (about half of what ``import evstore`` would cost otherwise), which a sync caller never needs;
#: an S3 user never needs the local and memory stores, and most processes never prove. The read
#: and write paths (half of evstore's own code to compile), keys and store URLs load with the first
#: call that needs them.
_LAZY = {
    **dict.fromkeys(("AsyncSession", "AsyncStore", "Outcome"), "_async"),
    **dict.fromkeys(("LocalStore", "MemoryStore"), "_backends"),
    **dict.fromkeys(("ConsistencyProof", "InclusionProof", "TreeHead", "check_proof"), "_proofs"),
    **dict.fromkeys(("Keyring", "generate_key"), "_crypto"),
    **dict.fromkeys(("default_store_url", "open_store"), "_url"),
    "DeleteResult": "_forks",
    "SessionInfo": "_read",
    "Session": "_write",
}

__all__ = [
    "AsyncSession",
    "AsyncStore",
    "ConsistencyProof",
    "DeleteResult",
    "Event",
    "EvstoreError",
    "InclusionProof",
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
    "TreeHead",
    "VerifyResult",
    "WriteConflictError",
    "check_proof",
    "default_store_url",
    "generate_key",
    "open_store",
]


__getattr__ = _lazy_names(__name__, __name__, _LAZY)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
