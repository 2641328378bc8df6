"""TTL end to end: RGW's own lifecycle processing expires ephemeral sessions.

The gateway runs with ``rgw lc debug interval = 10``: a lifecycle "day" lasts
10 s and the lifecycle worker makes a pass every 10 s. One module fixture
builds two buckets at the same moment so that their waits overlap:

* bucket "day1" (``evstore lifecycle apply --ephemeral-days 1``, expiry after
  10 s): an ephemeral session, a permanent one, and a permanent fork of the
  ephemeral one. All objects of the ephemeral session are created within a
  second, so one pass removes them all: a replay then finds nothing (exit 3).
* bucket "day2" (``--ephemeral-days 3``, expiry after 30 s): ephemeral sessions
  whose first objects (manifest, seq 1-2) are written at t0 and two more events
  at t0 + 25 s (by a background thread, so the day1 tests run meanwhile). RGW
  re-runs a lifecycle shard only when a full interval has passed since its last
  start, so passes come every 10 to 20 s. The pass that removes the first
  objects (t0 + 30 to t0 + 50) is therefore an earlier pass than the one that
  removes the later events (after t0 + 55): for at least one pass interval only
  the later events remain. Replay then reports the session expired (exit 6),
  and gc removes the remnant.

Polls are bounded waits (up to 120 s), not timed assertions.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from click.testing import CliRunner, Result
from evstore_cli import cli

from evstore import SessionExpiredError, SessionNotFoundError, Store
from evstore._backends._s3 import S3Store

from .conftest import LC_DAY_SECONDS, rgw_bucket

pytestmark = pytest.mark.rgw

WAIT_SECONDS = 120.0
DAY2_DAYS = 3  # the day2 bucket's expiry: 30 s
LATE_AFTER_SECONDS = 2 * LC_DAY_SECONDS + 5  # > the longest pass interval (20 s), < the day2 expiry (30 s)
EPHEMERAL_RULE = "evstore-ephemeral-expiry"


@dataclass
class World:
    env: dict[str, str]
    day1: S3Store
    day2: S3Store
    stale_writer: Any = None  # a writer of an ephemeral day1 session, opened before it expires
    late_writer: threading.Thread | None = None
    late_errors: list[BaseException] = field(default_factory=list)

    def late_events_written(self) -> None:
        """Wait for the background appends of the later day2 events; re-raise what they raised."""
        assert self.late_writer is not None
        self.late_writer.join(LATE_AFTER_SECONDS + WAIT_SECONDS)
        assert not self.late_writer.is_alive(), "the later day2 appends did not finish"
        if self.late_errors:
            raise self.late_errors[0]

    def store(self, bucket: S3Store) -> Store:
        return Store(bucket, root="root")

    def run(self, bucket: S3Store, *args: str) -> Result:
        return CliRunner().invoke(cli, ["--store", f"s3://{bucket.bucket}/root", *args], env=self.env, catch_exceptions=False)


def keys(bucket: S3Store, session: str) -> list[str]:
    prefix = f"root/sessions/{session}/"
    return [o.key[len(prefix) :] for o in bucket.list(prefix)]


def wait_until(condition: Callable[[], bool], what: str) -> None:
    """Poll every second until ``condition()`` holds; fail after WAIT_SECONDS."""
    deadline = time.monotonic() + WAIT_SECONDS
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"RGW lifecycle: still waiting after {WAIT_SECONDS:.0f}s for {what}")
        time.sleep(1.0)


def install_expiry(world: World, bucket: S3Store, days: int) -> None:
    """``evstore lifecycle apply`` where the command exists; else the rule by hand, as the command would."""
    if "lifecycle" in cli.commands:
        result = world.run(bucket, "lifecycle", "apply", "--ephemeral-days", str(days))
        assert result.exit_code == 0, result.output
        return
    tag = {"Key": "evstore-retention", "Value": "ephemeral"}
    rule = {
        "ID": EPHEMERAL_RULE,
        "Status": "Enabled",
        "Filter": {"And": {"Prefix": "root/sessions/", "Tags": [tag]}},
        "Expiration": {"Days": days},
    }
    bucket.put_lifecycle([rule])


def say(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


@pytest.fixture(scope="module")
def world(rgw: Any) -> Iterator[World]:
    world = World(rgw.env(), rgw_bucket(rgw), rgw_bucket(rgw))
    install_expiry(world, world.day1, 1)
    install_expiry(world, world.day2, DAY2_DAYS)
    one, two = world.store(world.day1), world.store(world.day2)

    late = {sid: two.open(sid, create=True, retention="ephemeral") for sid in ("late-a", "late-b")}
    for session in late.values():
        session.append([say("early 1")])
        session.append([say("early 2")])
    first_done = time.monotonic()

    def append_later() -> None:
        try:
            time.sleep(max(0.0, first_done + LATE_AFTER_SECONDS - time.monotonic()))
            for session in late.values():
                session.append([say("late 3")])
                session.append([say("late 4")])
        except BaseException as exc:  # handed to the tests that need these events
            world.late_errors.append(exc)

    world.late_writer = threading.Thread(target=append_later, name="late-appends", daemon=True)
    world.late_writer.start()
    late_perm = two.open("late-b-perm", create=True)
    late_perm.append([say("stays")])

    world.stale_writer = Store(world.day1, root="root", writer_lease=1.0).open("eph-stale", create=True, retention="ephemeral")
    world.stale_writer.append([say("before the expiry")])
    eph = one.open("eph", create=True, retention="ephemeral")
    for text in ("e1", "e2", "e3"):
        eph.append([say(text)])
    fork = one.fork("eph", "eph-fork", at=2, retention="permanent")
    fork.append([say("f3")])
    perm = one.open("perm", create=True)
    for text in ("p1", "p2", "p3"):
        perm.append([say(text)])
    assert keys(world.day1, "eph") == ["00000000000000000001", "00000000000000000002", "00000000000000000003", "manifest"]
    yield world
    world.late_writer.join(LATE_AFTER_SECONDS + WAIT_SECONDS)


def _late_state(world: World, session: str) -> list[str]:
    """Wait until the manifest of a day2 session expired; the names left then (must be the late events)."""
    world.late_events_written()
    wait_until(lambda: "manifest" not in keys(world.day2, session), f"the manifest of {session} to expire")
    left = keys(world.day2, session)
    assert left == ["00000000000000000003", "00000000000000000004"], (
        f"expected only the later events of {session} to remain, found {left}: the gateway removed the first and the later "
        "objects in one lifecycle pass (a stalled lifecycle worker?)"
    )
    return left


def test_rgw_lifecycle_deletes_every_object_of_an_ephemeral_session(world: World) -> None:
    wait_until(lambda: keys(world.day1, "eph") == [], "the ephemeral session's objects to expire")


def test_a_writer_opened_before_the_expiry_is_refused_after_it_and_nothing_lands(world: World) -> None:
    """The lifecycle removed the session under a live writer: past its lease (1 s here), the
    writer reads its manifest before it appends, finds none, and is told; no orphan lands."""
    wait_until(lambda: keys(world.day1, "eph-stale") == [], "the stale writer's session to expire")
    time.sleep(1.0)  # the lease, so the next append must look first (on a fast pass it might not have lapsed)
    with pytest.raises((SessionNotFoundError, SessionExpiredError)):
        world.stale_writer.append([say("after the expiry")])
    assert keys(world.day1, "eph-stale") == []


def test_replay_of_a_fully_expired_session_exits_3(world: World) -> None:
    wait_until(lambda: keys(world.day1, "eph") == [], "the ephemeral session's objects to expire")
    with pytest.raises(SessionNotFoundError):
        list(world.store(world.day1).replay("eph"))
    result = world.run(world.day1, "replay", "eph")
    assert result.exit_code == 3, result.output


def test_permanent_session_survives_the_expiry_pass(world: World) -> None:
    wait_until(lambda: keys(world.day1, "eph") == [], "the ephemeral session's objects to expire")
    store = world.store(world.day1)
    assert [e.messages[0]["content"] for e in store.replay("perm")] == ["p1", "p2", "p3"]
    assert store.verify("perm").events == 3


def test_permanent_fork_of_an_ephemeral_session_outlives_its_parent(world: World) -> None:
    wait_until(lambda: keys(world.day1, "eph") == [], "the ephemeral session's objects to expire")
    result = world.run(world.day1, "replay", "eph-fork", "--format", "jsonl")
    assert result.exit_code == 0, result.output
    store = world.store(world.day1)
    assert [e.messages[0]["content"] for e in store.replay("eph-fork")] == ["e1", "e2", "f3"]
    assert store.verify("eph-fork").events == 3


def test_replay_of_a_session_whose_manifest_expired_but_later_events_remain_exits_6(world: World) -> None:
    _late_state(world, "late-a")
    with pytest.raises(SessionExpiredError):
        list(world.store(world.day2).replay("late-a"))
    result = world.run(world.day2, "replay", "late-a")
    assert result.exit_code == 6, result.output


def test_gc_removes_what_the_lifecycle_left_of_an_expired_session(world: World) -> None:
    if "gc" not in cli.commands:
        from .conftest import unavailable

        unavailable("the command `evstore gc` does not exist yet")
    _late_state(world, "late-b")
    result = world.run(world.day2, "gc", "--grace", "0s", "--prefix", "late-b")
    assert result.exit_code == 0, result.output
    assert keys(world.day2, "late-b") == []
    assert world.run(world.day2, "replay", "late-b").exit_code == 3
    assert [e.messages[0]["content"] for e in world.store(world.day2).replay("late-b-perm")] == ["stays"]
