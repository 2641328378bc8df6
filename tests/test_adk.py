"""The Google ADK adapter: EvstoreSessionService, held to ADK's session-service contract
(written here from ADK's documentation and its services' behaviour), over every backend,
and a real ADK Runner on a scripted model (no network)."""

from __future__ import annotations

import asyncio
import copy
import re
import threading
from collections.abc import AsyncGenerator, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evstore import (
    AsyncStore,
    EvstoreError,
    IntegrityError,
    InvalidInputError,
    MemoryStore,
    ObjectStore,
    SessionExistsError,
    Store,
    WriteConflictError,
)
from evstore import SessionNotFoundError as StoreSessionNotFoundError

from .conftest import BACKENDS, make_backend
from .helpers import CountingStore

pytest.importorskip("google.adk")

from google.adk.agents import LlmAgent
from google.adk.errors import StaleSessionError as AdkStaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError as AdkAlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError as AdkSessionNotFoundError
from google.adk.events._rewind_events import _apply_rewinds
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import BaseSessionService, Session
from google.adk.sessions.base_session_service import GetSessionConfig
from google.genai import types
from pydantic import Field

from evstore.integrations.adk import EvstoreSessionService, decode_part, encode_part

APP = "weather app"
USER = "ana@example.com"
ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def text_event(text: str, *, author: str = "user", invocation: str = "inv-1", **actions: Any) -> Event:
    role = "user" if author == "user" else "model"
    return Event(
        author=author,
        invocation_id=invocation,
        content=types.Content(role=role, parts=[types.Part(text=text)]),
        actions=EventActions(**actions),
    )


def texts(session: Session | None) -> list[str]:
    assert session is not None
    return [p.text or "" for e in session.events for p in (e.content.parts or [] if e.content else [])]


class BarrierStore(CountingStore):
    """Holds the first ``parties`` PUTs of keys matching ``pattern`` until all of them arrive, so
    racing writers really meet at the store (each passed its reads before either wrote)."""

    def __init__(self, inner: ObjectStore, pattern: str, parties: int = 2) -> None:
        super().__init__(inner)
        self.pattern = re.compile(pattern)
        self.barrier = threading.Barrier(parties, timeout=20)
        self.waiting = parties
        self.lock = threading.Lock()

    def create(
        self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None, tags: Mapping[str, str] | None = None
    ) -> str:
        if self.pattern.search(key):
            with self.lock:
                wait = self.waiting > 0
                self.waiting -= 1
            if wait:
                self.barrier.wait()
        return super().create(key, data, metadata=metadata, tags=tags)



@pytest.fixture(params=["memory", "local"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ObjectStore]:
    """The service's logic, over the in-memory and the directory store."""
    yield from make_backend(request.param, request, tmp_path)


@pytest.fixture(params=BACKENDS)
def every_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ObjectStore]:
    """What depends on the store's semantics (conditional writes, listing, deletion, bytes),
    over every backend: memory, a directory, moto in process and moto's server over HTTP."""
    yield from make_backend(request.param, request, tmp_path)


@pytest.fixture
def service(store: Store) -> EvstoreSessionService:
    return EvstoreSessionService(store)


def new_session(service: EvstoreSessionService, **kwargs: Any) -> Session:
    kwargs.setdefault("app_name", APP)
    kwargs.setdefault("user_id", USER)
    session: Session = run(service.create_session(**kwargs))
    return session


def get(service: EvstoreSessionService, session: Session, config: GetSessionConfig | None = None) -> Session | None:
    found: Session | None = run(
        service.get_session(app_name=session.app_name, user_id=session.user_id, session_id=session.id, config=config)
    )
    return found


def append(service: EvstoreSessionService, session: Session, event: Event) -> Event:
    stored: Event = run(service.append_event(session, event))
    return stored


# ---- the class and its ids ------------------------------------------------------------


def test_is_a_base_session_service(store: Store) -> None:
    assert isinstance(EvstoreSessionService(store), BaseSessionService)
    assert isinstance(EvstoreSessionService(AsyncStore(store)), BaseSessionService)


@given(st.text(max_size=40))
def test_id_parts_encode_reversibly_into_evstore_id_characters(text: str) -> None:
    part = encode_part(text)
    assert decode_part(part) == text
    assert re.fullmatch(r"[A-Za-z0-9_-]+", part)  # no "." inside a part: parts join with single dots


def test_every_evstore_id_is_valid_and_names_app_user_and_session(memory_store: Store) -> None:
    service = EvstoreSessionService(memory_store)
    names = ("app one/ü", "..", "user:1 ")
    session = new_session(service, app_name=names[0], user_id=names[1], session_id=names[2])
    ids = list(memory_store.list_sessions())
    assert ids and all(ID_PATTERN.match(i) and ".." not in i for i in ids)
    assert session.id == "user:1"  # stripped
    assert service.session_evstore_id(names[0], names[1], "user:1") in ids


def test_an_id_too_long_for_evstore_is_refused_before_any_request() -> None:
    counting = CountingStore(MemoryStore())
    service = EvstoreSessionService(Store(counting))
    with pytest.raises(InvalidInputError, match="at most 128"):
        run(service.create_session(app_name="a", user_id="u" * 60, session_id="é" * 30))
    assert counting.total == 0


# ---- create_session -------------------------------------------------------------------


def test_create_generates_an_id_when_none_is_given(service: EvstoreSessionService) -> None:
    first, second = new_session(service), new_session(service)
    assert first.id and second.id and first.id != second.id
    assert get(service, first) is not None


def test_create_generates_an_id_when_a_blank_one_is_given(service: EvstoreSessionService) -> None:
    session = new_session(service, session_id="   ")
    assert session.id.strip() and session.id != "   "
    assert get(service, session) is not None


def test_create_strips_the_given_id(service: EvstoreSessionService) -> None:
    session = new_session(service, session_id="  s-1 \n")
    assert session.id == "s-1"
    found = run(service.get_session(app_name=APP, user_id=USER, session_id="s-1"))
    assert found == session


def test_create_of_an_existing_session_raises_already_exists_and_writes_nothing(service: EvstoreSessionService) -> None:
    first = new_session(service, session_id="s", state={"k": 1, "user:u": 1, "app:a": 1})
    with pytest.raises(AdkAlreadyExistsError) as raised:
        new_session(service, session_id="s", state={"k": 2, "user:u": 2, "app:a": 2})
    assert isinstance(raised.value, SessionExistsError)  # an evstore error too
    assert get(service, first) == first
    assert run(service.get_user_state(app_name=APP, user_id=USER)) == {"u": 1}


def test_the_same_session_id_may_exist_for_two_users_and_two_apps(service: EvstoreSessionService) -> None:
    sessions = [new_session(service, app_name=a, user_id=u, session_id="s") for a in ("a1", "a2") for u in ("u1", "u2")]
    assert [get(service, s) for s in sessions] == sessions


@pytest.mark.slow
def test_two_concurrent_creates_exactly_one_wins(every_backend: ObjectStore) -> None:
    barrier = BarrierStore(every_backend, r"/manifest$")
    store = Store(barrier, root="root")
    one, two = EvstoreSessionService(store), EvstoreSessionService(store)

    async def race() -> list[Any]:
        return list(
            await asyncio.gather(
                one.create_session(app_name=APP, user_id=USER, session_id="s", state={"who": 1, "user:who": 1}),
                two.create_session(app_name=APP, user_id=USER, session_id="s", state={"who": 2, "user:who": 2}),
                return_exceptions=True,
            )
        )

    results = run(race())
    won = [r for r in results if isinstance(r, Session)]
    lost = [r for r in results if isinstance(r, AdkAlreadyExistsError)]
    assert len(won) == 1 and len(lost) == 1
    assert get(one, won[0]) == won[0]
    assert run(one.get_user_state(app_name=APP, user_id=USER)) == {"who": won[0].state["who"]}


# ---- state scopes ---------------------------------------------------------------------


def test_app_state_is_shared_by_every_user_of_the_app(service: EvstoreSessionService) -> None:
    ana = new_session(service, state={"app:motd": "hi"})
    bob = new_session(service, user_id="bob")
    other_app = new_session(service, app_name="other", user_id="bob")
    assert (get(service, ana) or ana).state["app:motd"] == "hi"
    assert bob.state["app:motd"] == "hi"
    assert "app:motd" not in other_app.state


def test_user_state_is_shared_by_the_users_sessions_only(service: EvstoreSessionService) -> None:
    first = new_session(service, state={"user:lang": "nb"})
    append(service, first, text_event("x", state_delta={"user:tz": "CET"}))
    second = new_session(service)
    bob = new_session(service, user_id="bob")
    assert {k: v for k, v in second.state.items() if k.startswith("user:")} == {"user:lang": "nb", "user:tz": "CET"}
    assert not any(k.startswith("user:") for k in bob.state)


def test_session_state_belongs_to_its_session(service: EvstoreSessionService) -> None:
    first = new_session(service, state={"step": 1})
    second = new_session(service)
    append(service, first, text_event("x", state_delta={"step": 2}))
    assert (get(service, first) or first).state == {"step": 2}
    assert (get(service, second) or second).state == {}


def test_temp_state_is_never_stored(store: Store, service: EvstoreSessionService) -> None:
    session = new_session(service, state={"temp:a": 1, "k": 1})
    append(service, session, text_event("x", state_delta={"temp:b": 2, "k": 2}))
    assert "temp:a" not in session.state and session.state["temp:b"] == 2  # in memory for the invocation
    found = get(service, session)
    assert found is not None and found.state == {"k": 2}
    assert found.events[0].actions.state_delta == {"k": 2}
    raw = [e.messages for sid in store.list_sessions() for e in store.replay(sid)]
    assert "temp:" not in repr(raw)


def test_state_values_are_replaced_whole(service: EvstoreSessionService) -> None:
    session = new_session(service, state={"d": {"a": 1, "b": 2}, "user:l": [1, 2]})
    append(service, session, text_event("x", state_delta={"d": {"c": 3}, "user:l": [3]}))
    found = get(service, session)
    assert found is not None and found.state == {"d": {"c": 3}, "user:l": [3]}


def test_get_user_state_has_no_prefix_and_is_empty_when_none(service: EvstoreSessionService) -> None:
    assert run(service.get_user_state(app_name=APP, user_id=USER)) == {}
    new_session(service, state={"user:name": "Ana", "app:x": 1, "own": 2})
    assert run(service.get_user_state(app_name=APP, user_id=USER)) == {"name": "Ana"}


@pytest.mark.slow
def test_concurrent_user_state_deltas_from_two_sessions_are_both_kept(every_backend: ObjectStore) -> None:
    store = Store(every_backend, root="root")
    one, two = EvstoreSessionService(store), EvstoreSessionService(store)
    first, second = new_session(one, session_id="a"), new_session(two, session_id="b")
    barrier = BarrierStore(every_backend, r"\.u\.[^/]*/\d{20}$")  # both user-state appends meet at one seq
    racing_one, racing_two = (
        EvstoreSessionService(Store(barrier, root="root")),
        EvstoreSessionService(Store(barrier, root="root")),
    )

    async def race() -> None:
        await asyncio.gather(
            racing_one.append_event(first, text_event("x", state_delta={"user:a": 1})),
            racing_two.append_event(second, text_event("y", state_delta={"user:b": 2})),
        )

    run(race())
    assert run(one.get_user_state(app_name=APP, user_id=USER)) == {"a": 1, "b": 2}


# ---- app and user deltas commit with their event ------------------------------------------


class Killed(BaseException):
    """The process dies here (a BaseException: nothing in the service handles it)."""


class KillAt(CountingStore):
    """Kills the process at the first PUT of an event object into a log whose id matches ``pattern``
    (before it is made), once armed."""

    def __init__(self, inner: ObjectStore, pattern: str) -> None:
        super().__init__(inner)
        self.pattern = re.compile(pattern)
        self.armed = False

    def create(
        self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None, tags: Mapping[str, str] | None = None
    ) -> str:
        if self.armed and re.search(r"/\d{20}$", key) and self.pattern.search(key):
            self.armed = False
            raise Killed(key)
        return super().create(key, data, metadata=metadata, tags=tags)


KILL_POINTS = {
    "before the event": r"\.s\.",
    "after the event, before the app delta": r"\.a\.",
    "after the app delta, before the user delta": r"\.u\.",
}


def scoped_records(store: Store, evstore_id: str) -> list[dict[str, Any]]:
    return [e.messages[0]["meta"]["adk"] for e in store.replay(evstore_id)]


@pytest.mark.slow
@pytest.mark.parametrize("point", list(KILL_POINTS))
def test_a_kill_at_any_point_of_an_append_leaves_state_that_agrees_with_the_events(
    point: str, every_backend: ObjectStore
) -> None:
    """The event is the commit point of its app: and user: deltas: once it is stored, a fresh
    process reads them (completing what the kill left undone), and without it, neither."""
    killer = KillAt(every_backend, KILL_POINTS[point])
    dying = EvstoreSessionService(Store(killer, root="root"))
    session = new_session(dying, state={"app:a": 0, "user:u": 0, "k": 0})
    other = new_session(dying)  # another session of the same user
    killer.armed = True
    with pytest.raises(Killed):
        append(dying, session, text_event("x", state_delta={"app:a": 1, "user:u": 1, "k": 1}))

    fresh = EvstoreSessionService(Store(every_backend, root="root"))  # a new process
    found = get(fresh, session)
    assert found is not None
    stored = texts(found) == ["x"]
    assert stored == (point != "before the event")
    expected = 1 if stored else 0
    assert found.state == {"app:a": expected, "user:u": expected, "k": expected}
    assert run(fresh.get_user_state(app_name=APP, user_id=USER)) == {"u": expected}
    assert (get(fresh, other) or other).state == {"app:a": expected, "user:u": expected}
    again = get(EvstoreSessionService(Store(every_backend, root="root")), session)
    assert again is not None and again.state == found.state  # completed once, for good
    store = Store(every_backend, root="root")
    for scoped_id in (fresh.app_state_evstore_id(APP), fresh.user_state_evstore_id(APP, USER)):
        deltas = [r["delta"] for r in scoped_records(store, scoped_id)]
        assert len(deltas) == 1 + stored and deltas[0] in ({"a": 0}, {"u": 0})


def test_a_kill_after_the_event_is_completed_by_the_next_append_as_by_a_read(backend: ObjectStore) -> None:
    killer = KillAt(backend, r"\.u\.")
    dying = EvstoreSessionService(Store(killer, root="root"))
    session = new_session(dying)
    killer.armed = True
    with pytest.raises(Killed):
        append(dying, session, text_event("x", state_delta={"user:u": 1}))
    # an object made by hand at the stored revision (no marker): the append settles what it goes on top of
    by_hand = Session(id=session.id, app_name=APP, user_id=USER, state={}, events=[])
    by_hand.events.append(get_raw_event(backend, session, 2))
    fresh = EvstoreSessionService(Store(backend, root="root"))
    append(fresh, by_hand, text_event("y", state_delta={"user:v": 2}))
    assert run(fresh.get_user_state(app_name=APP, user_id=USER)) == {"u": 1, "v": 2}


def get_raw_event(backend: ObjectStore, session: Session, seq: int) -> Event:
    store = Store(backend, root="root")
    evstore_id = EvstoreSessionService(store).session_evstore_id(APP, USER, session.id)
    record = next(iter(store.replay(evstore_id, start=seq, end=seq))).messages[0]["meta"]["adk"]
    return Event.model_validate(record["event"])


@pytest.mark.slow
def test_two_processes_completing_one_delta_apply_it_once(every_backend: ObjectStore) -> None:
    killer = KillAt(every_backend, r"\.u\.")
    dying = EvstoreSessionService(Store(killer, root="root"))
    session = new_session(dying)
    append(dying, session, text_event("before", state_delta={"user:n": 1}))
    killer.armed = True
    with pytest.raises(Killed):
        append(dying, session, text_event("x", state_delta={"user:n": 2}))
    barrier = BarrierStore(every_backend, r"\.u\.[^/]*/\d{20}$")  # both completions' PUTs meet at one seq
    one, two = (EvstoreSessionService(Store(barrier, root="root")) for _ in range(2))

    async def race() -> list[Session | None]:
        return list(
            await asyncio.gather(
                one.get_session(app_name=APP, user_id=USER, session_id=session.id),
                two.get_session(app_name=APP, user_id=USER, session_id=session.id),
            )
        )

    found = run(race())
    assert [f.state if f else None for f in found] == [{"user:n": 2}] * 2
    store = Store(every_backend, root="root")
    deltas = [r["delta"] for r in scoped_records(store, one.user_state_evstore_id(APP, USER))]
    assert deltas == [{"n": 1}, {"n": 2}]


@pytest.mark.slow
def test_completions_of_two_sessions_deltas_keep_both(every_backend: ObjectStore) -> None:
    killer = KillAt(every_backend, r"\.u\.")
    dying = EvstoreSessionService(Store(killer, root="root"))
    first, second = new_session(dying), new_session(dying)
    for session, key in ((first, "a"), (second, "b")):
        killer.armed = True
        with pytest.raises(Killed):
            append(dying, session, text_event("x", state_delta={f"user:{key}": key}))
    barrier = BarrierStore(every_backend, r"\.u\.[^/]*/\d{20}$")
    one, two = (EvstoreSessionService(Store(barrier, root="root")) for _ in range(2))

    async def race() -> None:
        await asyncio.gather(
            one.get_session(app_name=APP, user_id=USER, session_id=first.id),
            two.get_session(app_name=APP, user_id=USER, session_id=second.id),
        )

    run(race())
    assert run(one.get_user_state(app_name=APP, user_id=USER)) == {"a": "a", "b": "b"}


def test_a_kill_during_create_leaves_its_initial_app_and_user_state_to_the_next_read(backend: ObjectStore) -> None:
    killer = KillAt(backend, r"\.a\.")
    dying = EvstoreSessionService(Store(killer, root="root"))
    killer.armed = True
    with pytest.raises(Killed):
        new_session(dying, session_id="s", state={"app:a": 1, "user:u": 1, "k": 1})
    listed = run(EvstoreSessionService(Store(backend, root="root")).list_sessions(app_name=APP, user_id=USER)).sessions
    assert [s.state for s in listed] == [{"app:a": 1, "user:u": 1, "k": 1}]


def test_an_event_records_the_state_log_head_before_it_even_from_a_service_that_never_read_the_log() -> None:
    """Completing its delta then searches only what came after that head, not the whole log."""
    store = Store(MemoryStore(), root="root")
    first = EvstoreSessionService(store)
    session = new_session(first)
    for i in range(12):
        append(first, session, text_event(f"m{i}", state_delta={"user:n": i}))
    append(first, session, text_event("no delta"))  # nothing for the other service to complete
    user_log = first.user_state_evstore_id(APP, USER)
    head = store.open(user_log).head
    append(EvstoreSessionService(store), session, text_event("from another service", state_delta={"user:n": 99}))
    evstore_id = first.session_evstore_id(APP, USER, session.id)
    newest = list(store.replay(evstore_id))[-1].messages[0]["meta"]["adk"]
    assert newest["scoped"] == {"app": {}, "user": {"n": 99}, "after": {"app": 0, "user": head}} and head == 12
    assert run(EvstoreSessionService(store).get_user_state(app_name=APP, user_id=USER)) == {"n": 99}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("delta", "puts"), [({"k": 1}, 1), ({"user:u": 1}, 2), ({"app:a": 1, "k": 1}, 2), ({"app:a": 1, "user:u": 1}, 3)]
)
def test_an_event_with_state_deltas_costs_its_put_and_one_per_scope_at_any_length(delta: dict[str, int], puts: int) -> None:
    """A long-lived service appends the app or user delta at the head it holds: no LIST."""
    costs = []
    for events in (10, 300):
        counting = CountingStore(MemoryStore())
        service = EvstoreSessionService(Store(counting, root="root"))
        session = _turns(service, new_session(service, state={"app:a": 0, "user:u": 0}), events)
        counting.reset()
        append(service, session, text_event("next", state_delta=delta))
        costs.append(dict(counting.counts))
        found = get(EvstoreSessionService(Store(counting, root="root")), session)
        assert found is not None and found.state == {"app:a": 0, "user:u": 0} | delta
    assert costs == [{"PUT": puts}] * 2


# ---- get_session ------------------------------------------------------------------------


def test_get_of_a_missing_session_is_none(service: EvstoreSessionService) -> None:
    assert run(service.get_session(app_name=APP, user_id=USER, session_id="nope")) is None


def test_get_of_a_deleted_session_is_none(service: EvstoreSessionService) -> None:
    session = new_session(service)
    run(service.delete_session(app_name=APP, user_id=USER, session_id=session.id))
    assert get(service, session) is None


def test_get_returns_what_create_and_append_produced(service: EvstoreSessionService) -> None:
    session = new_session(service, state={"k": 0, "app:a": 1, "user:u": 2})
    for i in range(3):
        append(service, session, text_event(f"m{i}", author="user" if i % 2 == 0 else "agent", state_delta={"k": i}))
    found = get(service, session)
    assert found == session
    assert [e.timestamp for e in found.events] == [e.timestamp for e in session.events]


def test_a_fresh_service_over_a_fresh_store_object_reads_the_same_session(every_backend: ObjectStore) -> None:
    service = EvstoreSessionService(Store(every_backend, root="root"))
    session = new_session(service, state={"k": 1})
    append(service, session, text_event("hello"))
    assert get(EvstoreSessionService(Store(every_backend, root="root")), session) == session


def test_events_come_back_in_order_with_exact_timestamps(service: EvstoreSessionService) -> None:
    session = new_session(service)
    stamps = [1_700_000_000.123456789, 1_700_000_000.1234568, 1_700_000_001.0, 1_700_000_001.0]
    for i, stamp in enumerate(stamps):
        event = text_event(f"m{i}")
        event.timestamp = stamp
        append(service, session, event)
    found = get(service, session)
    assert found is not None
    assert texts(found) == ["m0", "m1", "m2", "m3"]
    assert [e.timestamp for e in found.events] == stamps


def test_num_recent_events_returns_the_newest_events(service: EvstoreSessionService) -> None:
    session = new_session(service, state={"k": 1})
    for i in range(6):
        append(service, session, text_event(f"m{i}"))
    found = get(service, session, GetSessionConfig(num_recent_events=2))
    assert texts(found) == ["m4", "m5"]
    assert found is not None and found.state == {"k": 1}


def test_num_recent_events_zero_returns_no_events_but_the_state(service: EvstoreSessionService) -> None:
    session = new_session(service)
    append(service, session, text_event("m", state_delta={"k": 2}))
    found = get(service, session, GetSessionConfig(num_recent_events=0))
    assert found is not None and found.events == [] and found.state == {"k": 2}
    assert found.last_update_time == session.last_update_time


def test_after_timestamp_is_inclusive(service: EvstoreSessionService) -> None:
    session = new_session(service)
    for i in range(5):
        event = text_event(f"m{i}")
        event.timestamp = 1000.0 + i
        append(service, session, event)
    assert texts(get(service, session, GetSessionConfig(after_timestamp=1002.0))) == ["m2", "m3", "m4"]
    assert texts(get(service, session, GetSessionConfig(after_timestamp=1002.5))) == ["m3", "m4"]


def test_num_recent_events_and_after_timestamp_together(service: EvstoreSessionService) -> None:
    session = new_session(service)
    for i in range(5):
        event = text_event(f"m{i}")
        event.timestamp = 1000.0 + i
        append(service, session, event)
    assert texts(get(service, session, GetSessionConfig(num_recent_events=2, after_timestamp=1001.0))) == ["m3", "m4"]
    assert texts(get(service, session, GetSessionConfig(num_recent_events=4, after_timestamp=1003.0))) == ["m3", "m4"]


def test_recent_events_are_read_from_the_head_not_the_whole_session() -> None:
    counting = CountingStore(MemoryStore())
    store = Store(counting, root="root", auto_compact=None)  # every event read is a loose object: countable
    service = EvstoreSessionService(store)
    session = new_session(service, state={"k": 0})
    for i in range(120):
        append(service, session, text_event(f"m{i}", state_delta={"k": i} if i == 3 else {}))
    evstore_id = service.session_evstore_id(APP, USER, session.id)
    event_key = re.compile(re.escape(f"sessions/{evstore_id}/") + r"(\d{20})$")

    def seqs_read(config: GetSessionConfig | None) -> list[int]:
        counting.reset()
        found = run(EvstoreSessionService(store).get_session(app_name=APP, user_id=USER, session_id=session.id, config=config))
        assert found is not None and found.state == {"k": 3}
        return [int(m.group(1)) for kind, key in counting.keys if kind == "GET" and (m := event_key.search(key))]

    recent = seqs_read(GetSessionConfig(num_recent_events=3))
    everything = seqs_read(None)
    # head is 121: a few events below it (the first chunk), and the state snapshot (seq 5)
    assert set(recent) <= {5, *range(110, 122)}
    assert set(everything) == set(range(1, 122))
    assert len(recent) < 10 < 121 <= len(everything)


def counted_session(events: int) -> tuple[Store, CountingStore, Session]:
    counting = CountingStore(MemoryStore())
    store = Store(counting, root="root")
    service = EvstoreSessionService(store)
    session = new_session(service, state={"k": 1, "user:u": 1})
    for i in range(events):
        append(service, session, text_event(f"m{i}"))
    return store, counting, session


@pytest.mark.slow
def test_recent_events_from_a_new_process_cost_the_same_at_any_session_length() -> None:
    costs = []
    for events in (10, 150):
        store, counting, session = counted_session(events)
        counting.reset()
        found = get(EvstoreSessionService(store), session, GetSessionConfig(num_recent_events=5))
        assert texts(found) == [f"m{i}" for i in range(events - 5, events)]
        costs.append(dict(counting.counts))
    assert costs[0] == costs[1]


@pytest.mark.slow
@pytest.mark.parametrize("events", [10, 300])
def test_a_new_process_reads_a_whole_session_for_what_a_replay_of_it_costs(events: int) -> None:
    """One pass (``Store.resume``'s) gives the events and the writer: the requests of a replay,
    and a LIST for each state log (none here), at 10 events as at 300."""
    counting = CountingStore(MemoryStore())
    service = EvstoreSessionService(Store(counting, root="root"))
    session = _turns(service, new_session(service, state={"k": 1}), events)
    counting.reset()
    list(Store(counting, root="root").replay(service.session_evstore_id(APP, USER, session.id)))
    replay = dict(counting.counts)
    counting.reset()
    found = get(EvstoreSessionService(Store(counting, root="root")), session)
    assert found == session
    assert dict(counting.counts) == {**replay, "LIST": replay["LIST"] + 2}


@pytest.mark.slow
def test_an_append_costs_the_same_at_any_session_length() -> None:
    costs = []
    for events in (10, 150):
        store, counting, session = counted_session(events)
        counting.reset()
        append(EvstoreSessionService(store), session, text_event("next", state_delta={"k": 2}))
        costs.append(dict(counting.counts))
    assert costs[0] == costs[1] and costs[0]["PUT"] == 1


def _turns(service: EvstoreSessionService, session: Session, events: int) -> Session:
    for i in range(events):
        append(service, session, text_event(f"m{i}", author="user" if i % 2 else "model"))
    found = get(service, session)
    assert found is not None and len(found.events) == events
    return found


@pytest.mark.slow
@pytest.mark.parametrize("events", [10, 1500])
def test_a_runner_turn_costs_the_same_few_requests_at_any_session_length(events: int) -> None:
    """What a Runner does each turn with a long-lived service: get_session (the whole session),
    append the user's event and the model's: 3 LISTs (the session, app and user state, each from
    its head) and a PUT per event, at 10 events as at 1,500."""
    counting = CountingStore(MemoryStore())
    service = EvstoreSessionService(Store(counting, root="root"))
    session = _turns(service, new_session(service, state={"k": 1, "app:a": 1, "user:u": 1}), events)
    counting.reset()
    found = get(service, session)
    assert found is not None and len(found.events) == events and found.state == {"k": 1, "app:a": 1, "user:u": 1}
    assert counting.counts == {"LIST": 3}
    recent = get(service, session, GetSessionConfig(num_recent_events=5))
    assert texts(recent) == [f"m{i}" for i in range(events - 5, events)]
    assert counting.counts == {"LIST": 6}
    counting.reset()
    append(service, found, text_event("hello"))
    append(service, found, text_event("hi", author="model", state_delta={"k": 2}))
    assert counting.counts == {"PUT": 2}
    assert get(service, found).state["k"] == 2  # type: ignore[union-attr]


def test_a_service_reads_what_another_process_appended_and_sees_a_delete() -> None:
    memory = MemoryStore()
    mine, theirs = EvstoreSessionService(Store(memory, root="root")), EvstoreSessionService(Store(memory, root="root"))
    session = _turns(mine, new_session(mine, state={"k": 1}), 40)
    other = get(theirs, session)
    assert other is not None
    append(theirs, other, text_event("from the other process", state_delta={"k": 7}))
    found = get(mine, session)
    assert found is not None and texts(found)[-1] == "from the other process" and found.state == {"k": 7}
    with pytest.raises(AdkStaleSessionError):
        append(mine, session, text_event("from a stale object"))  # read before the other append
    append(mine, found, text_event("from the fresh one"))
    assert texts(get(theirs, session))[-2:] == ["from the other process", "from the fresh one"]
    run(theirs.delete_session(app_name=APP, user_id=USER, session_id=session.id))
    assert get(mine, session) is None


def test_after_timestamp_reads_only_back_to_the_first_older_event() -> None:
    counting = CountingStore(MemoryStore())
    store = Store(counting, root="root")
    service = EvstoreSessionService(store)
    session = new_session(service)
    for i in range(100):
        event = text_event(f"m{i}")
        event.timestamp = 1000.0 + i
        append(service, session, event)
    counting.reset()
    found = get(service, session, GetSessionConfig(after_timestamp=1095.0))
    assert texts(found) == [f"m{i}" for i in range(95, 100)]
    event_gets = [key for kind, key in counting.keys if kind == "GET" and re.search(r"/\d{20}$", key)]
    assert len(event_gets) < 40


# ---- list_sessions and delete_session -----------------------------------------------------


def test_list_sessions_of_a_user_lists_only_theirs(service: EvstoreSessionService) -> None:
    mine = {new_session(service).id for _ in range(3)}
    new_session(service, user_id="bob")
    new_session(service, app_name="other")
    listed = run(service.list_sessions(app_name=APP, user_id=USER)).sessions
    assert {s.id for s in listed} == mine and {s.user_id for s in listed} == {USER}


@pytest.mark.slow
def test_list_sessions_without_a_user_lists_every_users(every_backend: ObjectStore) -> None:
    service = EvstoreSessionService(Store(every_backend, root="root"))
    made = {(new_session(service, user_id=u).id, u) for u in (USER, "bob", "bob", "")}
    new_session(service, app_name=APP + "2")
    listed = run(service.list_sessions(app_name=APP)).sessions
    assert {(s.id, s.user_id) for s in listed} == made


def test_listed_sessions_have_state_but_no_events_and_no_temp_keys(service: EvstoreSessionService) -> None:
    session = new_session(service, state={"k": 1, "app:a": 2, "user:u": 3, "temp:t": 4})
    append(service, session, text_event("x", state_delta={"temp:z": 1, "k": 5}))
    (listed,) = run(service.list_sessions(app_name=APP, user_id=USER)).sessions
    assert listed.events == []
    assert listed.state == {"k": 5, "app:a": 2, "user:u": 3}
    assert listed.last_update_time == session.last_update_time


def test_list_sessions_orders_by_last_update(service: EvstoreSessionService) -> None:
    older, newer = new_session(service, session_id="b"), new_session(service, session_id="a")
    event = text_event("later")
    event.timestamp = newer.last_update_time + 10
    append(service, older, event)
    assert [s.id for s in run(service.list_sessions(app_name=APP)).sessions] == ["a", "b"]


def listed(sessions: int, events: int) -> tuple[Store, CountingStore, EvstoreSessionService]:
    """A service that made ``sessions`` sessions of the user, each ``events`` events long."""
    counting = CountingStore(MemoryStore())
    store = Store(counting, root="root")
    service = EvstoreSessionService(store)
    for i in range(sessions):
        session = new_session(service, state={"k": i, "user:u": 1, "app:a": 1})
        for j in range(events):
            append(service, session, text_event(f"m{j}"))
    return store, counting, service


@pytest.mark.parametrize("sessions", [5, 30])
def test_list_sessions_in_a_long_lived_service_costs_one_list_per_session(sessions: int) -> None:
    """The ids (one LIST per 1,000), each session's catch-up, the app and the user state."""
    _, counting, service = listed(sessions, 3)
    counting.reset()
    found = run(service.list_sessions(app_name=APP, user_id=USER)).sessions
    assert sorted(s.state["k"] for s in found) == list(range(sessions))
    assert all(s.state["app:a"] == s.state["user:u"] == 1 and not s.events for s in found)
    assert counting.counts == {"LIST": sessions + 3}


def test_list_sessions_from_a_new_process_costs_the_same_at_any_session_length() -> None:
    costs = []
    for events in (2, 100):
        store, counting, _ = listed(4, events)
        counting.reset()
        found = run(EvstoreSessionService(store).list_sessions(app_name=APP, user_id=USER)).sessions
        assert sorted(s.state["k"] for s in found) == list(range(4))
        costs.append(dict(counting.counts))
    assert costs[0] == costs[1]


def test_list_sessions_does_not_list_deleted_sessions(service: EvstoreSessionService) -> None:
    kept, gone = new_session(service), new_session(service)
    run(service.delete_session(app_name=APP, user_id=USER, session_id=gone.id))
    assert [s.id for s in run(service.list_sessions(app_name=APP)).sessions] == [kept.id]


def test_delete_of_an_unknown_session_is_a_no_op(service: EvstoreSessionService) -> None:
    run(service.delete_session(app_name=APP, user_id=USER, session_id="never"))
    session = new_session(service)
    run(service.delete_session(app_name=APP, user_id=USER, session_id=session.id))
    run(service.delete_session(app_name=APP, user_id=USER, session_id=session.id))
    assert get(service, session) is None


def test_a_deleted_session_id_can_be_created_again(service: EvstoreSessionService) -> None:
    old = new_session(service, session_id="s", state={"k": 1})
    run(service.delete_session(app_name=APP, user_id=USER, session_id="s"))
    new = new_session(service, session_id="s")
    assert get(service, new) == new and new.state == {}
    with pytest.raises(AdkStaleSessionError):  # an object of the deleted incarnation
        append(service, old, text_event("x"))


# ---- append_event ---------------------------------------------------------------------------


def test_append_skips_partial_events(service: EvstoreSessionService) -> None:
    session = new_session(service)
    partial = text_event("chunk")
    partial.partial = True
    assert append(service, session, partial) is partial
    assert session.events == [] and (get(service, session) or session).events == []


def test_append_sets_last_update_time_to_the_events_timestamp(service: EvstoreSessionService) -> None:
    session = new_session(service)
    event = text_event("x")
    event.timestamp = session.last_update_time + 123.25
    append(service, session, event)
    assert session.last_update_time == event.timestamp
    assert (get(service, session) or session).last_update_time == event.timestamp


def test_every_event_field_round_trips_bytes_included(every_backend: ObjectStore) -> None:
    service = EvstoreSessionService(Store(every_backend, root="root"))
    session = new_session(service)
    event = Event(
        author="helper",
        invocation_id="inv-9",
        branch="root.helper",
        model_version="scripted-1",
        turn_complete=True,
        finish_reason=types.FinishReason.STOP,
        error_code="E1",
        error_message="partly failed",
        interrupted=False,
        custom_metadata={"nested": {"list": [1, 2.5, None, True, "ü"]}},
        long_running_tool_ids={"call-1", "call-2"},
        usage_metadata=types.GenerateContentResponseUsageMetadata(prompt_token_count=12, candidates_token_count=3),
        content=types.Content(
            role="model",
            parts=[
                types.Part(text="look", thought=True),
                types.Part(inline_data=types.Blob(mime_type="application/octet-stream", data=bytes(range(256)))),
                types.Part(function_call=types.FunctionCall(id="call-1", name="lookup", args={"q": "Oslo", "n": 2})),
                types.Part(function_response=types.FunctionResponse(id="call-1", name="lookup", response={"r": [1]})),
                types.Part(thought_signature=b"\x00\xff\x10sig"),
            ],
        ),
        actions=EventActions(
            state_delta={"k": {"deep": [1, {"x": None}]}},
            artifact_delta={"report.pdf": 2},
            transfer_to_agent="other",
            escalate=True,
            skip_summarization=True,
        ),
        output={"answer": 42},
    )
    append(service, session, event)
    found = get(service, session)
    assert found is not None and found.events == [event]
    assert found.events[0].content is not None and found.events[0].content.parts is not None
    assert found.events[0].content.parts[1].inline_data is not None
    assert found.events[0].content.parts[1].inline_data.data == bytes(range(256))


def test_append_to_a_session_never_created_raises_session_not_found(service: EvstoreSessionService) -> None:
    ghost = Session(id="ghost", app_name=APP, user_id=USER)
    with pytest.raises(AdkSessionNotFoundError) as raised:
        append(service, ghost, text_event("x"))
    assert isinstance(raised.value, StoreSessionNotFoundError)


def test_append_to_a_deleted_session_raises_session_not_found(every_backend: ObjectStore) -> None:
    service = EvstoreSessionService(Store(every_backend, root="root"))
    session = new_session(service)
    run(EvstoreSessionService(service.store).delete_session(app_name=APP, user_id=USER, session_id=session.id))
    with pytest.raises(AdkSessionNotFoundError):
        append(service, session, text_event("x"))


def test_a_session_overtaken_by_another_append_is_refused_and_writes_nothing(every_backend: ObjectStore) -> None:
    store = Store(every_backend, root="root")
    service = EvstoreSessionService(store)
    session = new_session(service)
    append(service, session, text_event("first"))
    other = EvstoreSessionService(Store(every_backend, root="root"))  # another process
    current = get(other, session)
    assert current is not None
    append(other, current, text_event("second"))
    before = list(store.replay(service.session_evstore_id(APP, USER, session.id)))
    with pytest.raises(AdkStaleSessionError) as raised:
        append(service, session, text_event("stale", state_delta={"user:x": 1, "k": 1}))
    assert isinstance(raised.value, WriteConflictError)
    assert list(store.replay(service.session_evstore_id(APP, USER, session.id))) == before
    assert texts(get(service, session)) == ["first", "second"]
    assert run(service.get_user_state(app_name=APP, user_id=USER)) == {}
    assert texts(session) == ["first"]  # the stale object is left as it was


def test_deep_copies_of_one_revision_racing_exactly_one_is_accepted(every_backend: ObjectStore) -> None:
    setup = EvstoreSessionService(Store(every_backend, root="root"))
    session = new_session(setup)
    append(setup, session, text_event("base"))
    barrier = BarrierStore(every_backend, r"\.s\.[^/]*/\d{20}$")  # both event PUTs meet at the store
    one, two = EvstoreSessionService(Store(barrier, root="root")), EvstoreSessionService(Store(barrier, root="root"))
    copies = [copy.deepcopy(session), copy.deepcopy(session)]

    async def race() -> list[Any]:
        return list(
            await asyncio.gather(
                one.append_event(copies[0], text_event("one", state_delta={"who": 1})),
                two.append_event(copies[1], text_event("two", state_delta={"who": 2})),
                return_exceptions=True,
            )
        )

    results = run(race())
    accepted = [r for r in results if isinstance(r, Event)]
    refused = [r for r in results if isinstance(r, AdkStaleSessionError)]
    assert len(accepted) == 1 and len(refused) == 1
    found = get(setup, session)
    assert found is not None and texts(found) == ["base", *texts(Session(id="x", app_name="a", user_id="u", events=accepted))]
    assert found.state == {"who": accepted[0].actions.state_delta["who"]}


def test_deep_copies_racing_in_one_service_exactly_one_is_accepted(service: EvstoreSessionService) -> None:
    session = new_session(service)
    copies = [copy.deepcopy(session) for _ in range(4)]

    async def race() -> list[Any]:
        return list(
            await asyncio.gather(
                *(service.append_event(c, text_event(f"c{i}")) for i, c in enumerate(copies)), return_exceptions=True
            )
        )

    results = run(race())
    assert sum(isinstance(r, Event) for r in results) == 1
    assert sum(isinstance(r, AdkStaleSessionError) for r in results) == 3
    assert len(texts(get(service, session))) == 1


def test_a_session_object_made_by_hand_at_the_current_revision_is_accepted(service: EvstoreSessionService) -> None:
    session = new_session(service)
    append(service, session, text_event("one"))
    by_hand = Session(id=session.id, app_name=APP, user_id=USER, events=list(session.events))
    append(service, by_hand, text_event("two"))
    behind = Session(id=session.id, app_name=APP, user_id=USER, events=list(session.events))
    with pytest.raises(AdkStaleSessionError):
        append(service, behind, text_event("three"))
    assert texts(get(service, session)) == ["one", "two"]


def test_appends_continue_from_the_object_each_append_returns(service: EvstoreSessionService) -> None:
    session = new_session(service)
    for i in range(5):
        append(service, session, text_event(f"m{i}", state_delta={"n": i} if i % 2 else {}))
    assert get(service, session) == session


def test_a_cancelled_append_settles_before_the_cancellation(service: EvstoreSessionService) -> None:
    session = new_session(service)

    async def cancel_midway() -> None:
        task = asyncio.ensure_future(service.append_event(session, text_event("x")))
        await asyncio.sleep(0)  # the call is in the pool
        task.cancel()
        with pytest.raises(asyncio.CancelledError) as raised:
            await task
        outcome = AsyncStore.outcome(raised.value)
        assert outcome is not None
        found = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
        assert outcome.started == outcome.ok == (len(texts(found)) == 1)

    run(cancel_midway())


def test_a_stored_event_that_does_not_validate_is_an_integrity_error(service: EvstoreSessionService) -> None:
    session = new_session(service)
    record = {"v": 1, "kind": "event", "event": {"timestamp": "not a time"}, "state_at": 1}
    writer = service.store.open(service.session_evstore_id(APP, USER, session.id))
    writer.append({"role": "assistant", "content": None, "meta": {"adk": record}})
    with pytest.raises(IntegrityError, match="does not validate"):
        get(service, session)


def test_errors_are_evstore_errors() -> None:
    from evstore.integrations import adk

    for name in ("AlreadyExistsError", "StaleSessionError", "SessionNotFoundError"):
        assert issubclass(getattr(adk, name), EvstoreError)


# ---- a real Runner on a scripted model -------------------------------------------------------


class ScriptedLlm(BaseLlm):
    """Answers with the next scripted response; records what it was asked."""

    script: list[LlmResponse] = Field(default_factory=list)
    seen: list[LlmRequest] = Field(default_factory=list)

    async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False) -> AsyncGenerator[LlmResponse, None]:
        self.seen.append(llm_request.model_copy(deep=True))
        yield self.script.pop(0)


def say(text: str) -> LlmResponse:
    return LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]))


def call(name: str, **args: Any) -> LlmResponse:
    return LlmResponse(
        content=types.Content(role="model", parts=[types.Part(function_call=types.FunctionCall(name=name, args=args))])
    )


def get_weather(city: str) -> dict[str, str]:
    """The weather in a city."""
    return {"city": city, "forecast": "rain"}


def make_runner(service: EvstoreSessionService, script: list[LlmResponse]) -> tuple[Runner, ScriptedLlm]:
    model = ScriptedLlm(model="scripted", script=script)
    agent = LlmAgent(name="helper", model=model, instruction="Answer briefly.", tools=[get_weather], output_key="last_answer")
    return Runner(app_name=APP, agent=agent, session_service=service), model


def ask(runner: Runner, session_id: str, text: str) -> list[Event]:
    async def go() -> list[Event]:
        message = types.Content(role="user", parts=[types.Part(text=text)])
        return [e async for e in runner.run_async(user_id=USER, session_id=session_id, new_message=message)]

    events: list[Event] = run(go())
    return events


def request_texts(request: LlmRequest) -> list[str]:
    return [p.text for c in request.contents for p in (c.parts or []) if p.text]


@pytest.mark.slow
def test_a_runner_runs_and_resumes_from_a_fresh_service(every_backend: ObjectStore) -> None:
    service = EvstoreSessionService(Store(every_backend, root="root"))
    session = new_session(service, session_id="chat")
    runner, _ = make_runner(service, [call("get_weather", city="Oslo"), say("Rain in Oslo.")])
    produced = ask(runner, "chat", "weather in Oslo?")
    assert produced[-1].content is not None and produced[-1].content.parts is not None
    assert produced[-1].content.parts[0].text == "Rain in Oslo."

    fresh = EvstoreSessionService(Store(every_backend, root="root"))  # a new process
    resumed = get(fresh, session)
    assert resumed is not None and resumed.state["last_answer"] == "Rain in Oslo."
    kinds = [(e.author, bool(e.get_function_calls()), bool(e.get_function_responses())) for e in resumed.events]
    assert kinds == [("user", False, False), ("helper", True, False), ("helper", False, True), ("helper", False, False)]

    runner2, model2 = make_runner(fresh, [say("Also rain in Bergen.")])
    ask(runner2, "chat", "and Bergen?")
    assert request_texts(model2.seen[0]) == ["weather in Oslo?", "Rain in Oslo.", "and Bergen?"]
    final = get(EvstoreSessionService(Store(every_backend, root="root")), session)
    assert final is not None and final.state["last_answer"] == "Also rain in Bergen."
    assert len(final.events) == 6


def test_runner_rewind_is_an_evstore_retraction(store: Store) -> None:
    service = EvstoreSessionService(store)
    new_session(service, session_id="chat")
    runner, _ = make_runner(service, [say("one"), say("two")])
    ask(runner, "chat", "first")
    second = ask(runner, "chat", "second")
    evstore_id = service.session_evstore_id(APP, USER, "chat")
    assert [m["content"] for m in store.context(evstore_id, repair="none")][-2:] == ["second", "two"]

    run(runner.rewind_async(user_id=USER, session_id="chat", rewind_before_invocation_id=second[0].invocation_id))

    session = run(service.get_session(app_name=APP, user_id=USER, session_id="chat"))
    assert session is not None and session.state["last_answer"] == "one"
    fresh = run(EvstoreSessionService(store).get_session(app_name=APP, user_id=USER, session_id="chat"))
    assert fresh == session  # a new process reads the withdrawn events too
    assert [e.content.parts[0].text for e in _apply_rewinds(session.events) if e.content and e.content.parts] == ["first", "one"]
    context = [m["content"] for m in store.context(evstore_id, repair="none")]
    assert context[1:] == ["first", "one"]  # seq 1 is the creation record
    audit = [m.get("content") for e in store.replay(evstore_id) for m in e.messages]
    assert "second" in audit and "two" in audit  # nothing is deleted

    runner3, model3 = make_runner(service, [say("three")])
    ask(runner3, "chat", "third")
    assert request_texts(model3.seen[0]) == ["first", "one", "third"]
    assert [m["content"] for m in store.context(evstore_id, repair="none")][1:] == ["first", "one", "third", "three"]


def test_the_sessions_a_service_keeps_hold_a_bounded_number_of_events(monkeypatch: pytest.MonkeyPatch) -> None:
    from evstore.integrations.adk import _context

    monkeypatch.setattr(_context, "_KNOWN_EVENTS", 50)
    service = EvstoreSessionService(Store(MemoryStore(), root="root"))
    sessions = [_turns(service, new_session(service), 20) for _ in range(4)]
    assert sum(len(known.events) for known in service._context.known.values()) <= 50
    assert [texts(get(service, s))[-1] for s in sessions] == ["m19"] * 4  # the dropped ones are read again
