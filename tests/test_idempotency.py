"""Idempotency keys: an append retried with the same key — by the same writer, a new writer, a
new process, or a racing one — lands once and returns the original seq."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner
from evstore_cli import cli

from evstore import AsyncStore, InvalidInputError, LocalStore, MemoryStore, ObjectStore, Store, WriteConflictError

from .helpers import CountingStore, msg


def contents(store: Store, sid: str = "s") -> list[str]:
    return [m["content"] for e in store.replay(sid) for m in e.messages]


def test_the_same_key_twice_lands_once(store: Store) -> None:
    writer = store.open("s", create=True)
    assert writer.append(msg("a"), idempotency_key="step-1") == 1
    assert writer.append(msg("a again"), idempotency_key="step-1") == 1
    assert contents(store) == ["a"]


def test_a_new_writer_retrying_the_head_verifies_it_in_one_window_read() -> None:
    """The head a new writer found is not its own: its key counts once the window's chain is
    checked (a planted head would answer "already done" for a message stored nowhere)."""
    counting = CountingStore(MemoryStore())
    Store(counting, root="root").open("s", create=True).append(msg("a"), idempotency_key="k")
    retry = Store(counting, root="root").open("s")
    counting.reset()
    assert retry.append(msg("a"), idempotency_key="k") == 1
    assert counting.counts == {"LIST": 1, "GET": 1}
    counting.reset()
    assert retry.append(msg("a"), idempotency_key="k") == 1
    assert counting.total == 0  # known now


def test_a_key_inside_the_window_is_found_with_one_listing() -> None:
    counting = CountingStore(MemoryStore())
    store = Store(counting, root="root", auto_compact=None)
    first = store.open("s", create=True)
    first.append(msg("a"), idempotency_key="k1")
    first.append(msg("b"), idempotency_key="k2")
    for i in range(10):
        first.append(msg(f"other {i}"))
    retry = store.open("s")
    counting.reset()
    assert retry.append(msg("a"), idempotency_key="k1") == 1
    assert retry.append(msg("b"), idempotency_key="k2") == 2  # the window was read once
    assert counting.counts == {"LIST": 1, "GET": 12}
    assert contents(store).count("a") == 1


def test_a_resumed_writer_knows_every_key_it_read() -> None:
    counting = CountingStore(MemoryStore())
    store = Store(counting, root="root")
    writer = store.open("s", create=True)
    for i in range(100):
        writer.append(msg(f"m{i}"), idempotency_key=f"k{i}")
    resumed, _ = store.resume("s")
    counting.reset()
    assert resumed.append(msg("m0"), idempotency_key="k0") == 1  # beyond the window, but read by resume
    assert counting.total == 0


def test_a_key_older_than_the_window_is_appended_again() -> None:
    """The documented limit: only the newest 64 events (or what the writer read) are checked."""
    store = Store(MemoryStore(), root="root")
    writer = store.open("s", create=True)
    writer.append(msg("old"), idempotency_key="old")
    for i in range(64):
        writer.append(msg(f"m{i}"))
    assert store.open("s").append(msg("old"), idempotency_key="old") == 66


def test_racing_writers_with_one_key_land_one_event(backend: ObjectStore) -> None:
    store = Store(backend, root="root")
    store.create("s")
    writers = [store.open("s") for _ in range(4)]
    seqs: list[int] = []
    barrier = threading.Barrier(len(writers))

    def run(writer: object) -> None:
        barrier.wait()
        seqs.append(writer.append(msg("once"), idempotency_key="step-7"))  # type: ignore[attr-defined]

    threads = [threading.Thread(target=run, args=(w,)) for w in writers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert seqs == [1, 1, 1, 1]
    assert contents(store) == ["once"]


def test_expected_head_and_a_key_tell_a_retry_whether_the_first_attempt_landed() -> None:
    store = Store(MemoryStore(), root="root")
    store.open("s", create=True).append(msg("before"))
    store.open("s").append(msg("the step"), expected_head=1, idempotency_key="step")  # its answer was "lost"
    retry = store.open("s")
    assert retry.append(msg("the step"), expected_head=1, idempotency_key="step") == 2  # it landed: its seq
    other = store.open("s")
    with pytest.raises(WriteConflictError):  # something else is at 2: a conflict, not a duplicate
        other.append(msg("another step"), expected_head=1, idempotency_key="another")
    assert contents(store) == ["before", "the step"]


def test_keys_survive_encryption_and_are_authenticated() -> None:
    from evstore import Keyring

    store = Store(MemoryStore(), root="root", keyring=Keyring({"k1": b"\x01" * 32}, "k1"))
    store.open("s", create=True).append(msg("secret"), idempotency_key="k")
    assert store.open("s").append(msg("secret"), idempotency_key="k") == 1
    assert store.verify("s").sealed_checked == 1


@pytest.mark.parametrize("key", ["", "x" * 257, "line\nbreak", 7])
def test_a_bad_key_is_refused_before_any_request(key: object) -> None:
    store = Store(MemoryStore(), root="root")
    writer = store.open("s", create=True)
    with pytest.raises(InvalidInputError, match="idempotency key"):
        writer.append(msg("x"), idempotency_key=key)  # type: ignore[arg-type]
    assert writer.head == 0


def test_the_command_appends_once_per_key(tmp_path: Path) -> None:
    url = (tmp_path / "store").as_uri()

    def run(*args: str, input: str | None = None) -> str:
        result = CliRunner().invoke(cli, ["--store", url, *args], input=input)
        assert result.exit_code == 0, result.output
        return result.output

    assert run("append", "s", "hello", "--idempotency-key", "inv-1") == "1\n"
    assert run("append", "s", "world") == "2\n"
    assert run("append", "s", "hello", "--idempotency-key", "inv-1") == "1\n"
    lines = '{"role": "user", "content": "a"}\n{"role": "user", "content": "b"}\n'
    assert run("append", "s", "--jsonl", "--idempotency-key", "batch", input=lines) == "3\n4\n"
    assert run("append", "s", "--jsonl", "--idempotency-key", "batch", input=lines) == "3\n4\n"
    assert contents(Store(LocalStore(tmp_path / "store"))) == ["hello", "world", "a", "b"]


@pytest.mark.slow
def test_a_retried_invocation_in_a_new_process_lands_once(tmp_path: Path) -> None:
    url = (tmp_path / "store").as_uri()
    command = [sys.executable, "-c", "from evstore_cli import main; main()", "--store", url, "append", "s"]
    outputs = [
        subprocess.run([*command, "the step", "--idempotency-key", "lambda-req-42"], capture_output=True, text=True, check=True)
        for _ in range(3)
    ]
    assert [o.stdout for o in outputs] == ["1\n", "1\n", "1\n"]
    replay = subprocess.run(
        [sys.executable, "-c", "from evstore_cli import main; main()", "--store", url, "replay", "s", "--format", "jsonl"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert [json.loads(line)["message"]["content"] for line in replay.stdout.splitlines()] == ["the step"]


@pytest.mark.asyncio
async def test_the_async_api_takes_a_key() -> None:
    store = Store(MemoryStore(), root="root")
    async with AsyncStore(store) as astore:
        writer = await astore.open("s", create=True)
        assert await writer.append(msg("a"), idempotency_key="k") == 1
        assert await writer.append(msg("a"), idempotency_key="k") == 1
    assert contents(store) == ["a"]


def test_a_key_with_the_writers_head_expected_costs_only_the_put() -> None:
    """With expected_head the key is only in question past that head: nothing to read."""
    counting = CountingStore(MemoryStore())
    store = Store(counting, root="root", auto_compact=None)
    first = store.open("s", create=True)
    for i in range(10):
        first.append(msg(f"m{i}"), idempotency_key=f"k{i}")
    writer = store.open("s")
    counting.reset()
    assert writer.append(msg("new"), expected_head=10, idempotency_key="k-new") == 11
    assert dict(counting.counts) == {"PUT": 1}
