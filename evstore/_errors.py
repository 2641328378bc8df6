"""The exceptions evstore raises.

Every failure the library reports is an ``EvstoreError``; the command maps
each class to its own exit code (documented in the README)::

    EvstoreError                      1  unexpected failure
     ├── StoreUnavailableError        1  the store did not answer, or refused access
     ├── InvalidInputError            2  bad session id, message, URL, option
     │    └── KeyRequiredError        2  an encrypted session needs a key that is not configured
     ├── SessionNotFoundError         3  no such session (never created, or deleted)
     ├── WriteConflictError           4  another writer took the seq
     │    └── SessionExistsError      4  a session of that id already exists
     ├── IntegrityError               5  an object does not decode, does not belong where
     │                                   it is, fails its tag, or breaks the chain
     └── SessionExpiredError          6  the session's manifest or first events are gone

Messages are one line and never contain key material or message content.
"""

from __future__ import annotations

__all__ = [
    "EvstoreError",
    "IntegrityError",
    "InvalidInputError",
    "KeyRequiredError",
    "SessionExistsError",
    "SessionExpiredError",
    "SessionNotFoundError",
    "StoreUnavailableError",
    "WriteConflictError",
]


class EvstoreError(Exception):
    """Root of every error evstore raises."""


class StoreUnavailableError(EvstoreError):
    """The object store failed, timed out, or refused the request."""


class InvalidInputError(EvstoreError):
    """Input was refused before any request was made."""


class KeyRequiredError(InvalidInputError):
    """The session is encrypted under a key id that is not configured."""

    def __init__(self, session_id: str, key_id: str) -> None:
        super().__init__(
            f"session {session_id!r} is encrypted with key id {key_id!r}: "
            "set EVSTORE_KEY or EVSTORE_KEYRING to a keyring that holds it"
        )
        self.session_id = session_id
        self.key_id = key_id


class SessionNotFoundError(EvstoreError):
    """The session does not exist, or was deleted."""

    def __init__(
        self, session_id: str, detail: str = "not found", *, deleted: bool = False, kept_for_forks: tuple[str, ...] = ()
    ) -> None:
        super().__init__(f"session {session_id!r} {detail}")
        self.session_id = session_id
        #: The session was deleted (its id had a live session), rather than never created.
        self.deleted = deleted
        #: The live forks that read a deleted session's events: its id stays taken while they live.
        self.kept_for_forks = kept_for_forks


class WriteConflictError(EvstoreError):
    """Another writer appended at ``seq`` first; refresh and try again."""

    def __init__(self, session_id: str, seq: int, detail: str = "") -> None:
        message = f"seq {seq} of session {session_id!r} was taken by another writer"
        super().__init__(message + (f": {detail}" if detail else " (refresh and retry)"))
        self.session_id = session_id
        self.seq = seq


class SessionExistsError(WriteConflictError):
    """Creating (or forking into) a session whose id is taken."""

    def __init__(self, session_id: str, detail: str = "already exists") -> None:
        EvstoreError.__init__(self, f"session {session_id!r} {detail}")
        self.session_id = session_id
        self.seq = 0


class IntegrityError(EvstoreError):
    """A stored object is not what the log says it must be."""

    def __init__(self, session_id: str, seq: int | None, detail: str, *, broken_link: bool = False) -> None:
        where = f"seq {seq} of session {session_id!r}" if seq is not None else f"session {session_id!r}"
        super().__init__(f"integrity failure at {where}: {detail}")
        self.session_id = session_id
        self.seq = seq
        #: What is wrong, without where.
        self.detail = detail
        #: The event at ``seq`` does not chain to the event before it: either of the two may have been altered.
        self.broken_link = broken_link


class SessionExpiredError(EvstoreError):
    """The session's manifest or first events were removed by retention."""

    def __init__(self, session_id: str, detail: str) -> None:
        super().__init__(f"session {session_id!r} has expired: {detail}")
        self.session_id = session_id
