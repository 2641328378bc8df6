"""A session's id after its end: ``append`` never starts a new session over a deleted or expired
one unasked (``--new`` and ``create`` do it on purpose), and an id that live forks hold gets one
true explanation from every command that meets it."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from evstore_cli import cli

import evstore

from .test_cli import Run, one_line_error


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    return (tmp_path / "store").as_uri()


@pytest.fixture
def run(store_url: str) -> Run:
    def invoke(*args: str, input: str | None = None) -> Result:
        return CliRunner().invoke(cli, ["--store", store_url, *args], input=input, catch_exceptions=False)

    return invoke


def ok(result: Result) -> str:
    assert result.exit_code == 0, (result.exit_code, result.output)
    return result.stdout


DELETED = (
    "evstore: session 'chat' was deleted; gc removes its objects 10 minutes on, and creating it again starts a new"
    " session: nothing was appended (start the new session with append --new, or evstore create chat)"
)
HELD = (
    "evstore: session 'parent' was deleted, but its forks (child) read its events: its objects are kept, and the id"
    " stays taken until those forks are deleted and gc has removed them"
)


def test_append_after_delete_refuses_and_new_or_create_start_over(run: Run) -> None:
    ok(run("append", "chat", "one"))
    ok(run("append", "chat", "two"))
    ok(run("delete", "chat"))
    for extra in ([], ["--expect-head", "0"], ["--expect-head", "2"], ["--ephemeral"]):
        assert one_line_error(run("append", "chat", "three", *extra), 3) == DELETED
    assert one_line_error(run("replay", "chat"), 3).startswith("evstore: session 'chat' was deleted;")
    # on purpose: a new session under the id, its seqs after the deleted one's fence (seq 3)
    assert ok(run("append", "chat", "fresh", "--new")) == "4\n"
    assert ok(run("replay", "chat")) == "[4] user: fresh\n"
    assert one_line_error(run("append", "chat", "again", "--new"), 4) == "evstore: session 'chat' already exists"
    assert ok(run("append", "chat", "again")) == "5\n"  # a live session: append as ever
    ok(run("delete", "chat"))
    assert ok(run("create", "chat")) == "created chat: empty, its first event will be seq 7\n"
    assert one_line_error(run("create", "chat"), 4) == "evstore: session 'chat' already exists"
    assert ok(run("append", "chat", "after create")) == "7\n"
    usage = one_line_error(run("append", "other", "x", "--new", "--expect-head", "0"), 2)
    assert usage == "evstore: --new and --expect-head exclude each other (--new starts an empty session)"
    assert ok(run("append", "never-used", "x")) == "1\n"  # an id never used is still created by append


def test_append_new_with_an_idempotency_key_can_be_retried(run: Run) -> None:
    ok(run("append", "chat", "old"))
    ok(run("delete", "chat"))
    # the first run's answer was lost: running it again prints the seq it got then, and appends nothing
    assert ok(run("append", "chat", "fresh", "--new", "--idempotency-key", "k1")) == "3\n"
    assert ok(run("append", "chat", "fresh", "--new", "--idempotency-key", "k1")) == "3\n"
    assert ok(run("replay", "chat")) == "[3] user: fresh\n"
    # another key: the session is not new, so nothing is appended
    assert one_line_error(run("append", "chat", "other", "--new", "--idempotency-key", "k2"), 4).startswith(
        "evstore: seq 3 of session 'chat' was taken by another writer"
    )
    assert ok(run("replay", "chat")) == "[3] user: fresh\n"


def test_append_after_expiry_refuses(run: Run, store_url: str) -> None:
    ok(run("append", "eph", "one", "--ephemeral"))
    ok(run("append", "eph", "two"))
    # what the bucket's lifecycle rules do first: the manifest goes, events remain
    evstore.open_store(store_url).backend.delete_many(["sessions/eph/manifest"])
    expired = (
        "evstore: session 'eph' has expired: its manifest is gone but events remain (gc removes them): nothing was"
        " appended (once gc has removed them, the id can start a new session)"
    )
    assert one_line_error(run("append", "eph", "three"), 6) == expired
    assert one_line_error(run("append", "eph", "three", "--new"), 6).startswith("evstore: session 'eph' has expired: ")
    assert one_line_error(run("replay", "eph"), 6).startswith("evstore: session 'eph' has expired: ")


def test_an_id_held_by_live_forks_gets_one_true_message(run: Run, tmp_path: Path) -> None:
    ok(run("append", "parent", "one"))
    ok(run("fork", "parent", "child"))
    ok(run("delete", "parent"))
    lines = tmp_path / "in.jsonl"
    lines.write_text('{"role": "user", "content": "hi"}\n')
    # reads and appends find it deleted (3); making a session under its id is refused (4): one explanation
    assert one_line_error(run("append", "parent", "x"), 3) == HELD
    assert one_line_error(run("replay", "parent"), 3) == HELD
    assert one_line_error(run("append", "parent", "x", "--new"), 4) == HELD
    assert one_line_error(run("create", "parent"), 4) == HELD
    assert one_line_error(run("import", "parent", str(lines), "--format", "jsonl"), 4) == HELD
    assert ok(run("replay", "child")) == "[1] user: one\n"  # the fork reads its parent's events still
    # the message is true: deleting the fork is not enough while gc has not removed it ...
    ok(run("delete", "child"))
    assert one_line_error(run("create", "parent"), 4) == HELD


def test_the_message_names_what_holds_the_id_and_frees_it_once_gc_removed_the_forks() -> None:
    from datetime import timedelta

    from .helpers import Clock

    clock = Clock()
    store = evstore.Store(evstore.MemoryStore(clock=clock), clock=clock)
    store.open("parent", create=True).append({"role": "user", "content": "one"})
    store.fork("parent", "child")
    store.fork("parent", "child2")
    store.delete("parent")
    with pytest.raises(evstore.SessionNotFoundError) as found:
        store.open("parent", create=True, recreate=False)
    assert found.value.deleted and found.value.kept_for_forks == ("child", "child2")
    with pytest.raises(evstore.SessionExistsError) as exists:
        store.create("parent")
    assert str(found.value) == str(exists.value)
    assert "forks (child, child2) read its events" in str(exists.value)
    store.delete("child")
    store.delete("child2")
    clock.advance(minutes=11)
    store.gc(grace=timedelta(0))
    assert store.create("parent").head == 2  # freed, as the message says: after the deleted one's fence


def test_the_library_open_with_create_keeps_starting_over_a_deleted_session() -> None:
    """Adapters call ``store.open(id, create=True)`` after clearing a conversation (a delete):
    it still starts a new session under the id; only ``recreate=False`` refuses."""
    store = evstore.open_store("memory://")
    store.open("s", create=True).append({"role": "user", "content": "one"})
    store.delete("s")
    with pytest.raises(evstore.SessionNotFoundError) as error:
        store.open("s", create=True, recreate=False)
    assert error.value.deleted and not error.value.kept_for_forks
    writer = store.open("s", create=True)
    assert writer.append({"role": "user", "content": "two"}) == 3
    with pytest.raises(evstore.SessionNotFoundError) as missing:
        store.open("never", recreate=False)
    assert not missing.value.deleted
