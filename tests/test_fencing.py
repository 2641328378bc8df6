"""Fenced stale writers: after ``delete`` (or expiry), no append by a writer that opened the
session before is acknowledged, whatever it does and whenever; the id is free again once gc
has removed the objects.

``delete`` writes the tombstone, then a fence (the tombstone's bytes) at the seq after the
head; gc removes the objects only once the tombstone is ``FENCE_HOLD`` old, longer than any
writer's lease, and a writer past its lease reads its manifest again before it acknowledges.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import pytest
from click.testing import CliRunner
from evstore_cli import cli

from evstore import (
    IntegrityError,
    InvalidInputError,
    MemoryStore,
    ObjectStore,
    SessionExistsError,
    SessionExpiredError,
    SessionNotFoundError,
    Store,
    WriteConflictError,
)
from evstore._context import FENCE_HOLD, MAX_WRITER_LEASE

from .conftest import new_bucket
from .helpers import Clock, CountingStore, msg


def names(store: Store, sid: str = "s") -> list[str]:
    prefix = store.layout.session_prefix(sid)
    return [o.key[len(prefix) :] for o in store.backend.list(prefix)]


def contents(store: Store, sid: str = "s") -> list[str]:
    return [m["content"] for e in store.replay(sid) for m in e.messages]


def filled(store: Store, sid: str = "s", n: int = 3) -> None:
    writer = store.open(sid, create=True)
    for i in range(n):
        writer.append(msg(f"m{i}"))


def test_a_stale_writer_at_the_head_meets_the_fence_and_is_told_the_session_was_deleted(store: Store) -> None:
    stale = store.open("s", create=True)
    for i in range(3):
        stale.append(msg(f"m{i}"))
    result = store.delete("s")
    assert (result.fenced_at, result.kept_for_forks) == (4, [])
    before = names(store)
    with pytest.raises(SessionNotFoundError, match="was deleted"):
        stale.append(msg("into the void"))
    assert names(store) == before  # nothing landed
    assert stale.head == 3
    with pytest.raises(SessionNotFoundError):
        list(store.replay("s"))


def test_a_stale_writer_behind_the_head_gets_a_conflict_and_then_not_found(timed: Store) -> None:
    stale = timed.open("s", create=True)
    stale.append(msg("a"))
    timed.open("s").append(msg("b"))
    timed.delete("s")
    with pytest.raises(WriteConflictError):
        stale.append(msg("c"))
    with pytest.raises(SessionNotFoundError, match="was deleted"):
        stale.refresh()
    assert len(names(timed)) == 5  # manifest, 2 events, fence, tombstone


def test_after_the_hold_gc_frees_the_id_and_a_stale_writer_past_its_lease_is_refused(timed: Store, clock: Clock) -> None:
    stale = timed.open("s", create=True)
    stale.append(msg("old"))
    timed.delete("s")
    assert timed.gc(grace=timedelta(0), now=clock.now + FENCE_HOLD - timedelta(seconds=1)).objects_removed == 0
    clock.advance(seconds=FENCE_HOLD.total_seconds() + 1)
    assert timed.gc(grace=timedelta(0)).reasons == {"deleted": 4}  # manifest, event, fence, tombstone
    assert names(timed) == []
    with pytest.raises(SessionNotFoundError):
        stale.append(msg("would land in a free slot"))
    assert names(timed) == []
    timed.create("s").append(msg("new life"))
    with pytest.raises(SessionNotFoundError, match="created again"):
        stale.append(msg("still stale"))
    assert contents(timed) == ["new life"]


def test_a_put_that_outlasts_the_lease_is_confirmed_before_it_is_acknowledged(timed: Store, clock: Clock) -> None:
    """The worst case the hold must cover: delete, hold and gc all happen while one PUT is in flight."""
    backend = timed.backend
    stale = timed.open("s", create=True)
    stale.append(msg("a"))
    real_create = backend.create
    in_flight = []

    def slow_create(key: str, data: bytes, **kwargs: object) -> str:
        if key.endswith("/00000000000000000002") and not in_flight:
            in_flight.append(key)
            timed.delete("s")
            clock.advance(seconds=FENCE_HOLD.total_seconds() + 1)
            timed.gc(grace=timedelta(0))
        return real_create(key, data, **kwargs)  # type: ignore[arg-type]

    backend.create = slow_create  # type: ignore[method-assign]
    with pytest.raises((SessionNotFoundError, SessionExpiredError)):  # its own orphan looks like a remnant
        stale.append(msg("landed in a freed slot, never acknowledged"))
    backend.create = real_create  # type: ignore[method-assign]
    assert stale.head == 1
    assert names(timed) == ["00000000000000000002"]  # the orphan gc removes later
    clock.advance(days=2)
    assert timed.gc().reasons == {"expired remnant or orphan": 1}


def test_gc_never_removes_a_fenced_session_before_the_hold_even_with_no_grace(timed: Store, clock: Clock) -> None:
    filled(timed)
    timed.delete("s")
    before = names(timed)
    clock.advance(seconds=FENCE_HOLD.total_seconds() - 1)
    report = timed.gc(grace=timedelta(0))
    assert report.objects_removed == 0 and report.kept_young == len(before) == 6
    assert names(timed) == before


def test_an_append_racing_the_delete_is_part_of_what_is_deleted(timed: Store) -> None:
    racer = timed.open("s", create=True)
    racer.append(msg("a"))
    backend = timed.backend
    real_create = backend.create
    raced = []

    def racing_create(key: str, data: bytes, **kwargs: object) -> str:
        if key.endswith("/00000000000000000002") and not raced:
            raced.append(0)
            raced[0] = racer.append(msg("won the race"))  # lands between the delete's head read and its fence
        return real_create(key, data, **kwargs)  # type: ignore[arg-type]

    backend.create = racing_create  # type: ignore[method-assign]
    result = timed.delete("s")
    backend.create = real_create  # type: ignore[method-assign]
    assert raced == [2] and result.fenced_at == 3
    with pytest.raises(SessionNotFoundError):
        racer.append(msg("after"))


def test_an_interrupted_delete_is_finished_by_running_it_again(timed: Store) -> None:
    stale = timed.open("s", create=True)
    stale.append(msg("a"))
    timed.delete("s")
    timed.backend.delete_many([timed.layout.event_key("s", 2)])  # as if it stopped before its fence
    assert timed.delete("s").fenced_at == 2
    with pytest.raises(SessionNotFoundError, match="was deleted"):
        timed.delete("s")
    with pytest.raises(SessionNotFoundError):
        stale.append(msg("b"))


def test_a_forged_fence_in_a_live_session_is_a_conflict_and_an_integrity_error_not_a_deletion(timed: Store) -> None:
    """A create-only principal can plant the bytes of a fence, never the tombstone that makes it one."""
    writer = timed.open("s", create=True)
    writer.append(msg("a"))
    forged = f'{{"sid":"s","uid":"{writer.manifest.uid}","deleted":"2026-03-01T10:30:00.000000Z"}}'.encode()
    timed.backend.create(timed.layout.event_key("s", 2), forged)
    with pytest.raises(WriteConflictError):
        writer.append(msg("b"))
    with pytest.raises(IntegrityError):
        timed.open("s")
    with pytest.raises(IntegrityError):
        list(timed.replay("s"))


def test_a_fork_keeps_a_deleted_parent_and_the_parents_stale_writer_is_still_fenced(timed: Store, clock: Clock) -> None:
    stale = timed.open("p", create=True)
    stale.append(msg("a"))
    timed.fork("p", "f").append(msg("own"))
    result = timed.delete("p")
    assert result.kept_for_forks == ["f"]
    with pytest.raises(SessionNotFoundError):
        stale.append(msg("b"))
    clock.advance(days=2)
    timed.gc()
    assert contents(timed, "f") == ["a", "own"]


def test_a_writer_past_its_lease_reads_manifest_and_listing_once_then_appends() -> None:
    counting = CountingStore(MemoryStore())
    clock = Clock()
    store = Store(counting, root="root", clock=clock)
    writer = store.open("s", create=True)
    writer.append(msg("a"))
    counting.reset()
    writer.append(msg("b"))
    assert dict(counting.counts) == {"PUT": 1}  # within the lease
    clock.advance(seconds=61)
    counting.reset()
    writer.append(msg("c"))
    assert dict(counting.counts) == {"GET": 1, "LIST": 1, "PUT": 1}
    counting.reset()
    writer.append(msg("d"))
    assert dict(counting.counts) == {"PUT": 1}  # the lease was renewed


@pytest.mark.parametrize("lease", [-1, MAX_WRITER_LEASE + 1, True, "60"])
def test_the_lease_is_bounded_by_what_the_fence_hold_covers(lease: object) -> None:
    with pytest.raises(InvalidInputError):
        Store(MemoryStore(), writer_lease=lease)  # type: ignore[arg-type]


def test_a_stale_writer_of_an_expired_session_is_refused_once_its_lease_lapses(timed: Store, clock: Clock) -> None:
    stale = timed.open("s", create=True, retention="ephemeral")
    for i in range(3):
        stale.append(msg(f"m{i}"))
    timed.apply_lifecycle(1)
    clock.advance(days=3)
    timed.gc(apply_lifecycle=True)
    with pytest.raises((SessionNotFoundError, SessionExpiredError)):
        stale.append(msg("late"))
    assert names(timed) == []


WRITER = """
import sys
from evstore import open_store
writer = open_store(sys.argv[1], writer_lease=float(sys.argv[2])).open("s", create=True)
writer.append({"role": "user", "content": "before"})
print("ready", flush=True)
sys.stdin.readline()
try:
    print("acknowledged", writer.append({"role": "user", "content": "after the delete"}), flush=True)
except Exception as error:
    print(type(error).__name__, flush=True)
"""


@pytest.fixture(params=["local", "moto_server"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "local":
        return (tmp_path / "store").as_uri()
    endpoint = request.getfixturevalue("moto_endpoint")
    os.environ["AWS_ENDPOINT_URL_S3"] = endpoint
    request.addfinalizer(lambda: os.environ.pop("AWS_ENDPOINT_URL_S3", None))
    return f"s3://{new_bucket(endpoint).bucket}/root"


@pytest.mark.slow
@pytest.mark.parametrize("command", ["delete", "shred"])
@pytest.mark.parametrize("purged", [False, True], ids=["fenced", "fenced-then-removed"])
def test_a_writer_in_another_process_is_refused_after_the_command_deletes_its_session(
    url: str, purged: bool, command: str
) -> None:
    """Process A opens a writer and appends; the command deletes (or shreds) the session (and,
    past the hold, gc removes every object); A's next append is refused and nothing of it remains."""
    lease = "0" if purged else "60"  # removed objects: only the lease can tell A (0: it reads every time)

    def run(*args: str) -> str:
        result = CliRunner().invoke(cli, ["--store", url, *args])
        assert result.exit_code == 0, result.output
        return result.output

    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, url, lease], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert writer.stdout is not None and writer.stdin is not None
    try:
        assert writer.stdout.readline() == "ready\n"
        assert "fenced at seq 2" in run(command, "s")
        if purged:
            later = (datetime.now(UTC) + FENCE_HOLD + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
            run("gc", "--grace", "0", "--now", later)
        writer.stdin.write("go\n")
        writer.stdin.flush()
        assert writer.stdout.readline() == "SessionNotFoundError\n"
    finally:
        writer.stdin.close()
        writer.wait(timeout=60)
    assert run("list") == ("" if purged else "s\n")
    if purged:
        assert run("append", "s", "a new session under the same id") == "1\n"


def test_writers_holding_a_session_before_shred_are_told_it_was_deleted_and_nothing_lands(store: Store) -> None:
    """Shred fences first, as delete does, and empties each event object in place (its slot keeps
    the fence's bytes): a writer inside its lease, at the head or behind it, meets a 412 and reads
    the delete, where a removed object would have taken its PUT and acknowledged it, unreadable."""
    at_head = store.open("s", create=True)
    behind = store.open("s")
    for i in range(3):
        at_head.append(msg(f"secret {i}"))
    result = store.shred("s")
    assert (result.fenced_at, result.objects_removed) == (4, 3)
    before = {key: store.backend.get(key).data for key in (o.key for o in store.backend.list("root/sessions/s/"))}
    assert not any(b"secret" in data for data in before.values())
    for writer in (at_head, behind):
        with pytest.raises(SessionNotFoundError, match="was deleted"):
            writer.append(msg("acknowledged and lost?"))
    assert {o.key: store.backend.get(o.key).data for o in store.backend.list("root/sessions/s/")} == before
    for attempt in (lambda: store.open("s"), lambda: list(store.replay("s")), lambda: store.info("s")):
        with pytest.raises(SessionNotFoundError, match="was deleted"):
            attempt()


def test_gc_removes_what_shred_left_after_the_hold_and_the_id_is_free_at_once(timed: Store, clock: Clock) -> None:
    stale = timed.open("s", create=True)
    stale.append(msg("old"))
    timed.shred("s")
    assert timed.gc(grace=timedelta(0)).objects_removed == 0  # the fence holds as delete's does
    clock.advance(seconds=FENCE_HOLD.total_seconds() + 1)
    assert timed.gc(grace=timedelta(0)).reasons == {"deleted": 4}  # manifest, emptied event, fence, tombstone
    assert names(timed) == []
    timed.create("s").append(msg("new life"))
    assert contents(timed) == ["new life"]
    other = timed.open("t", create=True)
    other.append(msg("x"))
    timed.shred("t")
    assert timed.create("t").append(msg("over the shredded id")) == 3  # after its fence, as over a deleted id
    with pytest.raises(WriteConflictError):  # the fence, its tombstone gone with the create: taken
        other.append(msg("stale"))
    with pytest.raises(SessionNotFoundError, match="created again"):
        other.refresh()
    assert contents(timed, "t") == ["over the shredded id"]


@pytest.mark.slow
def test_delete_of_a_session_on_every_backend_leaves_it_unreadable_and_unwritable(backend: ObjectStore) -> None:
    store = Store(backend, root="root")
    filled(store)
    store.delete("s")
    for attempt in (lambda: store.open("s"), lambda: store.context("s"), lambda: store.resume("s"), lambda: store.delete("s")):
        with pytest.raises(SessionNotFoundError):
            attempt()


# ---- the id of a deleted session, used again ---------------------------------------------------


def test_a_deleted_id_is_created_again_at_once_its_seqs_following_the_fence(store: Store) -> None:
    stale = store.open("s", create=True)
    for i in range(3):
        stale.append(msg(f"old {i}"))
    assert store.delete("s").fenced_at == 4
    new = store.create("s")
    assert new.head == 4 and new.manifest.base == 4
    assert new.append(msg("new life")) == 5
    assert [(e.seq, e.messages[0]["content"]) for e in store.replay("s")] == [(5, "new life")]
    assert store.context("s") == [msg("new life")]
    receipt = store.verify("s").receipt
    assert (receipt.seq, store.verify("s", expect=receipt).events) == (5, 1)
    with pytest.raises((WriteConflictError, SessionNotFoundError)):
        stale.append(msg("stale"))  # its next seq, 4, is the fence
    with pytest.raises(SessionNotFoundError, match="created again"):
        stale.refresh()
    writer, context = store.resume("s")
    assert (writer.head, context) == (5, [msg("new life")])


def test_an_empty_session_created_over_a_deleted_id_has_its_receipt_at_the_base(timed: Store) -> None:
    filled(timed)
    timed.delete("s")
    timed.create("s")
    receipt = timed.verify("s").receipt
    assert receipt.seq == 4
    assert timed.verify("s", expect=receipt).events == 0
    assert timed.info("s").head == 4


def test_open_or_resume_with_create_makes_a_new_session_over_a_deleted_one(timed: Store) -> None:
    filled(timed, "a")
    filled(timed, "b")
    timed.delete("a")
    timed.delete("b")
    assert timed.open("a", create=True).append(msg("again")) == 5
    writer, context = timed.resume("b", create=True)
    assert (writer.head, context) == (4, [])


def test_gc_removes_the_earlier_incarnation_after_the_hold_and_keeps_the_new_one(timed: Store, clock: Clock) -> None:
    stale = timed.open("s", create=True)
    for i in range(40):  # a segment of the first 32
        stale.append(msg(f"old {i}"))
    timed.delete("s")
    clock.advance(seconds=1)
    timed.create("s").append(msg("new"))
    assert timed.gc(grace=timedelta(0)).objects_removed == 0  # the fence holds
    clock.advance(seconds=FENCE_HOLD.total_seconds() + 1)
    report = timed.gc(grace=timedelta(0))
    assert report.reasons == {"earlier incarnation": 40 + 1 + 1}  # its events, its segment, the fence
    assert names(timed) == ["00000000000000000042", "manifest"]
    assert contents(timed) == ["new"]
    with pytest.raises(SessionNotFoundError):
        stale.append(msg("past its lease: it reads the manifest and finds another"))
    assert names(timed) == ["00000000000000000042", "manifest"]


def test_two_creates_over_a_deleted_id_have_one_winner(timed: Store) -> None:
    from evstore import _manifests

    filled(timed)
    timed.delete("s")
    claimed = _manifests.claim(timed.shared, "s")
    timed.create("s").append(msg("first"))
    loser = _manifests.new_manifest(timed.shared, "s", "permanent", None)
    with pytest.raises(SessionExistsError):
        _manifests.create_manifest(timed.shared, msgspec.structs.replace(loser, base=claimed[0]), claimed[1])
    assert contents(timed) == ["first"]


def test_the_recycled_session_is_deleted_and_recycled_again(timed: Store) -> None:
    filled(timed)
    timed.delete("s")
    timed.create("s").append(msg("second"))
    assert timed.delete("s").fenced_at == 6
    third = timed.create("s")
    assert third.append(msg("third")) == 7
    assert contents(timed) == ["third"]


def test_a_fork_cannot_start_over_a_deleted_id(timed: Store) -> None:
    filled(timed, "p")
    filled(timed, "s")
    timed.delete("s")
    with pytest.raises(SessionExistsError):
        timed.fork("p", "s")
