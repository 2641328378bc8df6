"""ADK's own error types, each also the evstore error it is: what the service raises where ADK's
services raise theirs (see the package docstring)."""

from __future__ import annotations

from google.adk.errors import StaleSessionError as _AdkStaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError as _AdkAlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError as _AdkSessionNotFoundError

from ... import SessionExistsError, WriteConflictError
from ... import SessionNotFoundError as StoreSessionNotFoundError

__all__ = ["AlreadyExistsError", "SessionNotFoundError", "StaleSessionError"]

_STALE = "The session has been modified in storage since it was loaded. Reload the session before appending more events."


class AlreadyExistsError(_AdkAlreadyExistsError, SessionExistsError):
    """ADK's ``AlreadyExistsError`` for an existing (app, user, session id); also evstore's ``SessionExistsError``."""

    def __init__(self, session_id: str, message: str) -> None:
        Exception.__init__(self, message)
        self.message = message
        self.session_id = session_id
        self.seq = 0


class StaleSessionError(_AdkStaleSessionError, WriteConflictError):
    """ADK's ``StaleSessionError`` for an append from a superseded session object; also ``WriteConflictError``."""

    def __init__(self, session_id: str, seq: int) -> None:
        Exception.__init__(self, _STALE)
        self.session_id = session_id
        self.seq = seq


class SessionNotFoundError(_AdkSessionNotFoundError, StoreSessionNotFoundError):
    """ADK's ``SessionNotFoundError`` for an append to a missing session; also evstore's."""

    def __init__(self, session_id: str, message: str) -> None:
        Exception.__init__(self, message)
        self.session_id = session_id
