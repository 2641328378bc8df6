"""How ADK sessions are laid out in evstore (see the package docstring): the evstore ids of a
session and of its app's and user's state logs, and the records their events hold. Pure: nothing
here makes a request.

A record is ``meta.adk`` of an event's one message, ``{"v": 1, "kind": ...}``: ``session`` (the
creation), ``event`` (one ADK event), ``app_state`` / ``user_state`` (one delta of a scope). A
session object's revision is its marker, ``<uid>:<head>:<state seq>``.
"""

from __future__ import annotations

import copy
import logging
from typing import Any, cast

import pydantic
import pydantic_core
from google.adk.events.event import Event
from google.adk.sessions.state import State

from ... import Event as StoreEvent
from ... import IntegrityError, InvalidInputError, Message
from .._common import meta_record
from .._names import escape, unescape

__all__ = [
    "META_KEY",
    "RECORD_VERSION",
    "app_state_evstore_id",
    "decode_part",
    "dump_event",
    "encode_part",
    "event_text",
    "logger",
    "merged",
    "parse_marker",
    "parse_session_id",
    "record_in",
    "record_of",
    "record_time",
    "revision_marker",
    "scoped_source",
    "session_evstore_id",
    "split_state",
    "stored_event",
    "user_state_evstore_id",
]

#: The service's log: named for the package, which every module of it logs as.
logger = logging.getLogger("evstore.integrations.adk")

#: The meta key of every record the service writes.
META_KEY = "adk"
RECORD_VERSION = 1
_MAX_ID = 128


# ---- name parts ----------------------------------------------------------------


def encode_part(text: str) -> str:
    """One name part as evstore id characters (reversible; see the package docstring)."""
    return escape(text.encode("utf-8", "surrogatepass"), upper=True) if text else "_"


def decode_part(part: str) -> str | None:
    """The name ``encode_part`` made ``part`` from, or None when ``part`` is not such an encoding."""
    if part == "_":
        return ""
    data = unescape(part, upper=True)
    if data is None:
        return None
    try:
        text = data.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return None
    return text if text and encode_part(text) == part else None


# ---- evstore ids ---------------------------------------------------------------


def _checked(evstore_id: str, what: str) -> str:
    if len(evstore_id) > _MAX_ID:
        raise InvalidInputError(f"ADK {what} encodes to an evstore id of {len(evstore_id)} characters; at most {_MAX_ID} fit")
    return evstore_id


def session_evstore_id(prefix: str, app_name: str, user_id: str, session_id: str) -> str:
    """The evstore id holding one ADK session."""
    parts = (encode_part(app_name), encode_part(user_id), encode_part(session_id))
    return _checked(f"{prefix}.s.{'.'.join(parts)}", "app name, user id and session id")


def app_state_evstore_id(prefix: str, app_name: str) -> str:
    return _checked(f"{prefix}.a.{encode_part(app_name)}", "app name")


def user_state_evstore_id(prefix: str, app_name: str, user_id: str) -> str:
    return _checked(f"{prefix}.u.{encode_part(app_name)}.{encode_part(user_id)}", "app name and user id")


def parse_session_id(prefix: str, evstore_id: str) -> tuple[str, str, str] | None:
    """(app name, user id, session id) of an ADK session's evstore id; None for any other id."""
    head = f"{prefix}.s."
    if not evstore_id.startswith(head):
        return None
    parts = evstore_id[len(head) :].split(".")
    if len(parts) != 3:
        return None
    app, user, sid = (decode_part(p) for p in parts)
    if app is None or user is None or sid is None:
        return None
    return app, user, sid


# ---- records -------------------------------------------------------------------


def _json_safe(state: dict[str, Any]) -> dict[str, Any]:
    try:
        return cast(dict[str, Any], pydantic_core.to_jsonable_python(state))
    except (pydantic_core.PydanticSerializationError, TypeError, ValueError):
        logger.warning("ADK state holds values that are not JSON-serializable; they are stored as their str()")
        return cast(dict[str, Any], pydantic_core.to_jsonable_python(state, fallback=str))


def split_state(state: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(app, user, session) parts of a state dict or delta, prefixes stripped, ``temp:`` dropped, as JSON."""
    app: dict[str, Any] = {}
    user: dict[str, Any] = {}
    own: dict[str, Any] = {}
    for key, value in (state or {}).items():
        if key.startswith(State.APP_PREFIX):
            app[key.removeprefix(State.APP_PREFIX)] = value
        elif key.startswith(State.USER_PREFIX):
            user[key.removeprefix(State.USER_PREFIX)] = value
        elif not key.startswith(State.TEMP_PREFIX):
            own[key] = value
    return _json_safe(app), _json_safe(user), _json_safe(own)


def merged(own: dict[str, Any], app: dict[str, Any], user: dict[str, Any]) -> dict[str, Any]:
    state = copy.deepcopy(own)
    state.update({State.APP_PREFIX + k: copy.deepcopy(v) for k, v in app.items()})
    state.update({State.USER_PREFIX + k: copy.deepcopy(v) for k, v in user.items()})
    return state


def dump_event(event: Event) -> dict[str, Any]:
    """The event as JSON that validates back equal to it (``None`` fields left out when they may be)."""
    try:
        data = event.model_dump(mode="json", exclude_none=True)
        if Event.model_validate(data) != event:
            data = event.model_dump(mode="json")
    except (pydantic_core.PydanticSerializationError, pydantic.ValidationError, TypeError, ValueError) as exc:
        raise InvalidInputError(f"ADK event {event.id!r} cannot be stored as JSON: {exc}"[:300]) from None
    return data


def event_text(event: Event) -> str | None:
    parts = event.content.parts if event.content is not None and event.content.parts else []
    texts = [part.text for part in parts if part.text]
    return "".join(texts) if texts else None


def record_of(event: StoreEvent) -> dict[str, Any] | None:
    """The service's record in an evstore event, or None (a retraction, or a message someone else wrote)."""
    return record_in(event.messages)


def record_in(messages: list[Message]) -> dict[str, Any] | None:
    """The service's record in an event's ``messages`` (``record_of``)."""
    record = meta_record(messages[0], META_KEY) if len(messages) == 1 else None
    return record if record is not None and record.get("v") == RECORD_VERSION else None


def stored_event(record: dict[str, Any], evstore_id: str, seq: int) -> Event:
    """The ADK event an ``event`` record holds (``IntegrityError`` when it does not validate)."""
    try:
        return Event.model_validate(record.get("event"))
    except pydantic.ValidationError as exc:
        raise IntegrityError(evstore_id, seq, f"the stored ADK event does not validate ({exc.error_count()} errors)") from None


def record_time(record: dict[str, Any], evstore_id: str, seq: int) -> float:
    time = record.get("time")
    if isinstance(time, bool) or not isinstance(time, int | float):
        raise IntegrityError(evstore_id, seq, "the ADK session record has no creation time")
    return float(time)


def scoped_source(evstore_id: str, uid: str, seq: int) -> str:
    """The identity of a session record's ``app:``/``user:`` deltas in their logs (their idempotency key)."""
    return f"adk-scoped:{evstore_id}:{uid}:{seq}"


def revision_marker(uid: str, head: int, state_seq: int) -> str:
    return f"{uid}:{head}:{state_seq}"


def parse_marker(marker: str) -> tuple[str, int, int] | None:
    parts = marker.split(":")
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
        return None
    return parts[0], int(parts[1]), int(parts[2])
