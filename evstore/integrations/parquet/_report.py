"""What an export reports: each session's outcome (one of ``STATUSES``) and the export's totals.
Pure: the outcome of a session is read from the error that ended its replay."""

from __future__ import annotations

import msgspec

from ..._errors import EvstoreError, IntegrityError, KeyRequiredError, SessionExpiredError, SessionNotFoundError

STATUSES = ("exported", "tampered", "expired", "deleted", "remnant", "locked", "unreadable")


class SessionOutcome(msgspec.Struct, frozen=True):
    """How one session was exported: ``status`` (one of ``STATUSES``), its rows when exported,
    else the reason it was skipped."""

    session_id: str
    status: str
    detail: str = ""
    events: int = 0


class ExportReport(msgspec.Struct):
    """What an export wrote: ``rows`` in ``files`` (paths or keys, relative to the destination),
    the sessions by status, and each skipped session's outcome, in id order."""

    destination: str
    rows: int = 0
    files: list[str] = msgspec.field(default_factory=list)
    counts: dict[str, int] = msgspec.field(default_factory=lambda: dict.fromkeys(STATUSES, 0))
    skipped: list[SessionOutcome] = msgspec.field(default_factory=list)


def outcome_of(session_id: str, exc: EvstoreError) -> SessionOutcome:
    if isinstance(exc, IntegrityError):
        return SessionOutcome(session_id, "tampered", str(exc))
    if isinstance(exc, SessionExpiredError):
        return SessionOutcome(session_id, "expired", str(exc))
    if isinstance(exc, SessionNotFoundError):
        return SessionOutcome(session_id, "deleted" if exc.deleted else "remnant", str(exc))
    if isinstance(exc, KeyRequiredError):
        return SessionOutcome(session_id, "locked", str(exc))
    return SessionOutcome(session_id, "unreadable", str(exc))
