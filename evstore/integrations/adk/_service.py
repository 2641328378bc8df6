"""``EvstoreSessionService``: ADK's ``BaseSessionService`` contract over the storage modules.

This module owns what ADK sees: the async methods and their arguments (ids stripped, a new
session's id and time), ``temp:`` keys kept out of storage and applied in memory, the
``Session`` objects it returns, and the evstore ids it names. Every blocking call runs in the
``AsyncStore``'s bounded pool: ``_reads``, ``_writes`` and ``_scoped`` do the work on the
service's ``ServiceContext``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from google.adk.events.event import Event
from google.adk.platform import time as platform_time
from google.adk.platform import uuid as platform_uuid
from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig, ListSessionsResponse
from google.adk.sessions.session import Session
from google.adk.sessions.state import State
from typing_extensions import override

from ... import AsyncStore, InvalidInputError, Retention, Store
from . import _reads, _scoped, _writes
from ._context import ServiceContext
from ._mapping import app_state_evstore_id, encode_part, session_evstore_id, user_state_evstore_id

__all__ = ["EvstoreSessionService"]

T = TypeVar("T")


class EvstoreSessionService(BaseSessionService):
    """ADK sessions in an evstore ``Store`` (see the package docstring for the layout).

    ``store``: a ``Store``, or an ``AsyncStore`` whose pool runs the blocking calls.
    ``prefix``: the first part of every evstore id this service uses.
    ``retention``: of the evstore sessions it creates.
    """

    def __init__(self, store: Store | AsyncStore, *, prefix: str = "adk", retention: Retention = "permanent") -> None:
        if not prefix or not prefix[0].isascii() or not prefix[0].isalnum() or encode_part(prefix) != prefix:
            raise InvalidInputError("prefix must be letters, digits and '-', starting with a letter or digit")
        self.async_store = store if isinstance(store, AsyncStore) else AsyncStore(store)
        self.store: Store = self.async_store.store
        self.prefix = prefix
        self.retention: Retention = retention
        self._context = ServiceContext(self.store, prefix, retention)

    def __repr__(self) -> str:
        return f"EvstoreSessionService({self.store!r}, prefix={self.prefix!r})"

    # ---- ids ----------------------------------------------------------------------

    def session_evstore_id(self, app_name: str, user_id: str, session_id: str) -> str:
        """The evstore id holding one ADK session."""
        return session_evstore_id(self.prefix, app_name, user_id, session_id)

    def app_state_evstore_id(self, app_name: str) -> str:
        return app_state_evstore_id(self.prefix, app_name)

    def user_state_evstore_id(self, app_name: str, user_id: str) -> str:
        return user_state_evstore_id(self.prefix, app_name, user_id)

    # ---- BaseSessionService ---------------------------------------------------------------

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await self.async_store.run(fn, *args)

    @override
    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        session_id = session_id.strip() if session_id else ""
        session_id = session_id or platform_uuid.new_uuid()
        return await self._run(
            _writes.create_session, self._context, app_name, user_id, state, session_id, platform_time.get_time()
        )

    @override
    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        session_id = session_id.strip() if session_id else session_id
        return await self._run(_reads.get_session, self._context, app_name, user_id, session_id, config)

    @override
    async def list_sessions(self, *, app_name: str, user_id: str | None = None) -> ListSessionsResponse:
        return ListSessionsResponse(sessions=await self._run(_reads.list_sessions, self._context, app_name, user_id))

    @override
    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        session_id = session_id.strip() if session_id else session_id
        await self._run(_writes.delete_session, self._context, app_name, user_id, session_id)

    @override
    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        return await self._run(_scoped.user_state, self._context, app_name, user_id)

    @override
    async def append_event(self, session: Session, event: Event) -> Event:
        """Store ``event`` and apply it to ``session`` (see the package docstring).

        ``temp:`` keys reach the in-memory ``session.state`` only, and only once the
        event is stored: a refused (stale) append leaves ``session`` as it was.
        """
        if event.partial:
            return event
        delta = event.actions.state_delta if event.actions else None
        temp = {k: v for k, v in (delta or {}).items() if k.startswith(State.TEMP_PREFIX)}
        event = self._trim_temp_delta_state(event)
        marker = await self._run(_writes.append_event, self._context, session, event)
        session.state.update(temp)
        session.last_update_time = event.timestamp
        session._storage_update_marker = marker
        return self._commit_event_to_session(session, event)
