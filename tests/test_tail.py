"""``evstore tail``: following a session as other processes append, against moto's HTTP server."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from click.testing import CliRunner
from evstore_cli import cli
from evstore_cli._ecosystem import follow

from evstore import IntegrityError, LocalStore, MemoryStore, SessionNotFoundError, Store
from evstore._backends import ListPage
from evstore._backends._s3 import S3Store

from .conftest import new_bucket
from .helpers import CountingStore

SAFETY_SECONDS = 60  # every follow loop below also ends after this, whatever happens


@pytest.fixture(scope="module")
def backend(moto_endpoint: str) -> S3Store:
    return new_bucket(moto_endpoint)


@pytest.fixture
def store(backend: S3Store) -> Store:
    return Store(backend, root=f"t-{uuid.uuid4().hex[:10]}")


def msg(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def test_follow_yields_what_a_writer_thread_appends(store: Store) -> None:
    store.open("chat", create=True).append(msg("before"))
    texts = [f"m{i}" for i in range(8)]

    def write() -> None:
        writer = store.open("chat")
        for text in texts:
            writer.append(msg(text))
            time.sleep(0.05)

    thread = threading.Thread(target=write)
    got = []
    deadline = time.monotonic() + SAFETY_SECONDS
    thread.start()
    try:
        for event in follow(
            store, "chat", 1, interval=0.02, should_stop=lambda: len(got) >= len(texts) or time.monotonic() > deadline
        ):
            got.append(event)
    finally:
        thread.join(SAFETY_SECONDS)
    assert [e.seq for e in got] == list(range(2, 10))
    assert [e.messages[0]["content"] for e in got] == texts


def _copy_session(store: Store, backend: S3Store, session_id: str, events: int) -> None:
    """Write a session of ``events`` events into ``store``'s root quickly: append them in memory,
    then PUT the resulting objects to the bucket in parallel (an append chain is sequential)."""
    scratch = MemoryStore()
    writer = Store(scratch, root=store.layout.root).open(session_id, create=True)
    writer.append([msg(f"m{i}") for i in range(events // 2)])  # some events hold batches: any shape will do
    for i in range(events - 1):
        writer.append(msg(f"m{i}"))
    keys = list(scratch.list(store.layout.session_prefix(session_id)))
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda info: backend.create(info.key, scratch.get(info.key).data), keys))
    assert store.info(session_id).head == events


def _requests_per_idle_poll(store: Store, backend: S3Store, session_id: str, polls: int) -> list[Counter[str]]:
    """The requests each poll makes when nothing new arrives (measured between sleeps)."""
    head = store.info(session_id).head
    snapshots: list[Counter[str]] = []

    def sleep(_: float) -> None:
        snapshots.append(Counter(backend.requests))

    assert list(follow(store, session_id, head, sleep=sleep, should_stop=lambda: len(snapshots) > polls)) == []
    return [after - before for before, after in itertools.pairwise(snapshots)]


@pytest.mark.slow
def test_an_idle_poll_is_one_list_whatever_the_session_length(store: Store, backend: S3Store) -> None:
    short = store.open("short", create=True)
    short.append(msg("one"))
    _copy_session(store, backend, "long", 1005)  # more than one LIST page of events
    per_poll_short = _requests_per_idle_poll(store, backend, "short", 4)
    per_poll_long = _requests_per_idle_poll(store, backend, "long", 4)
    assert per_poll_short == per_poll_long == [Counter({"ListObjectsV2": 1})] * 4


def test_a_poll_with_new_events_lists_once_and_reads_only_them(store: Store, backend: S3Store) -> None:
    writer = store.open("chat", create=True)
    for i in range(50):
        writer.append(msg(f"m{i}"))
    polls: list[Counter[str]] = []
    got = []

    def sleep(_: float) -> None:
        polls.append(Counter(backend.requests))
        if len(polls) == 1:
            writer.append(msg("new1"))
            writer.append(msg("new2"))

    for event in follow(store, "chat", 50, sleep=sleep, should_stop=lambda: len(polls) >= 2):
        got.append(event.messages[0]["content"])
    assert got == ["new1", "new2"]
    # between the two sleeps: the writer's 2 PUTs (made in the first sleep), then one LIST and a GET per new event
    assert polls[1] - polls[0] == Counter({"PutObject": 2, "ListObjectsV2": 1, "GetObject": 2})


class ListingStore(CountingStore):
    """``CountingStore`` that also records, for each LIST, the session-relative names it returned
    (objects and common prefixes, in key order): S3 sends about 250-300 bytes per entry."""

    def __init__(self, inner: MemoryStore) -> None:
        super().__init__(inner)
        self.listed: list[list[str]] = []

    def reset(self) -> None:
        super().reset()
        self.listed.clear()

    def list_page(self, prefix: str, *, start_after: str = "", max_keys: int = 1000, delimiter: str = "") -> ListPage:
        page = super().list_page(prefix, start_after=start_after, max_keys=max_keys, delimiter=delimiter)
        self.listed.append(sorted([o.key[len(prefix) :] for o in page.objects] + [p[len(prefix) :] for p in page.prefixes]))
        return page


def _idle_polls(session_length: int, polls: int = 3) -> list[tuple[Counter[str], list[list[str]]]]:
    """(requests, names listed by each LIST) of each idle poll of a follower at the head of a
    session of ``session_length`` events, written with the default compaction (segments/, young/
    and, past 256 events, the Merkle checkpoint objects' ztree/)."""
    counting = ListingStore(MemoryStore())
    store = Store(counting, root="root")
    writer = store.open("s", create=True)
    for i in range(session_length):
        writer.append(msg(f"m{i}"))
    counting.reset()
    seen: list[tuple[Counter[str], list[list[str]]]] = []

    def sleep(_: float) -> None:
        seen.append((Counter(counting.counts), list(counting.listed)))
        counting.reset()

    assert list(store.follow("s", after=session_length, sleep=sleep, should_stop=lambda: len(seen) > polls)) == []
    return seen[1:]  # the first includes the follower's load


def test_an_idle_poll_lists_a_handful_of_names_at_any_session_length() -> None:
    """Without the delimiter an idle poll listed every name after the events: 4 at 100 events,
    123 at 3,000, a full page of 1,000 (about 290 KB from S3) past 24,000."""
    short, long = _idle_polls(100), _idle_polls(3000)
    assert short == [(Counter({"LIST": 1}), [["manifest", "young/"]])] * 3
    assert long == [(Counter({"LIST": 1}), [["manifest", "segments/", "young/", "ztree/"]])] * 3


def _session_with_names_after_the_events(names: list[str]) -> tuple[ListingStore, Store]:
    counting = ListingStore(MemoryStore())
    store = Store(counting, root="root")
    writer = store.open("s", create=True)
    for i in range(3):
        writer.append(msg(f"m{i}"))
    for name in names:
        counting.inner.create(f"root/sessions/s/{name}", b"")
    return counting, store


def _follow_until_deleted(counting: ListingStore, store: Store) -> list[Counter[str]]:
    """Follow at the head, delete the session in the second sleep: the requests of the idle poll
    between, and the SessionNotFoundError it must end with."""
    polls: list[Counter[str]] = []

    def sleep(_: float) -> None:
        polls.append(Counter(counting.counts))
        counting.reset()
        if len(polls) == 2:
            store.delete("s")
            counting.reset()

    with pytest.raises(SessionNotFoundError, match="was deleted"):
        list(store.follow("s", after=3, sleep=sleep, should_stop=lambda: len(polls) > 5))
    return polls


def test_follow_sees_a_delete_past_more_segment_names_than_a_page() -> None:
    """1,200 young/ names (empty: no segments) stand for a session of about 30,000 events: the
    tombstone sorts after them, and a page without the delimiter never reached it."""
    counting, store = _session_with_names_after_the_events([f"young/{i:020d}-{i:020d}" for i in range(1200)])
    polls = _follow_until_deleted(counting, store)
    assert polls[1] == Counter({"LIST": 1})
    (after_delete,) = counting.listed  # one LIST: the fence at seq 4, then the tombstone among a few names
    assert after_delete == ["00000000000000000004", "manifest", "tombstone", "young/"]


def test_follow_sees_the_manifest_expire_past_more_segment_names_than_a_page() -> None:
    """Lifecycle expiry removes the manifest first; with 1,200 young/ names after it the poll's
    page was truncated before, and a truncated page was never checked for the manifest."""
    counting, store = _session_with_names_after_the_events([f"young/{i:020d}-{i:020d}" for i in range(1200)])
    polls: list[int] = []

    def sleep(_: float) -> None:
        polls.append(1)
        if len(polls) == 2:
            counting.inner.delete_many(["root/sessions/s/manifest"])

    with pytest.raises(SessionNotFoundError):
        list(store.follow("s", after=3, sleep=sleep, should_stop=lambda: len(polls) > 5))
    assert len(polls) == 2


def test_names_planted_after_the_events_are_paged_over_to_see_the_manifest_and_tombstone() -> None:
    """1,500 names without a slash between the seqs and ``manifest`` fill the poll's page: the
    poll pages on (a LIST per 1,000 of them) to see whether the session is still there."""
    counting, store = _session_with_names_after_the_events([f"junk{i:05d}" for i in range(1500)])
    polls = _follow_until_deleted(counting, store)
    assert polls[1] == Counter({"LIST": 2})
    assert [len(names) for names in counting.listed] == [1000, 503]  # the fence, 1,500 names, manifest, tombstone


def test_follow_ends_when_the_session_is_deleted() -> None:
    store = Store(MemoryStore())
    store.open("chat", create=True).append(msg("x"))
    polls = []

    def sleep(_: float) -> None:
        polls.append(1)
        if len(polls) == 1:
            store.delete("chat")

    with pytest.raises(SessionNotFoundError):
        list(follow(store, "chat", 1, sleep=sleep, should_stop=lambda: len(polls) > 5))


def test_follow_refuses_an_event_that_does_not_chain_to_the_last_seen() -> None:
    store = Store(MemoryStore())
    writer = store.open("chat", create=True)
    writer.append(msg("a"))
    writer.append(msg("b"))
    with pytest.raises(IntegrityError, match="chain broken"):
        list(follow(store, "chat", 1, after_hash="0" * 64, should_stop=lambda: False))


def _cli(tmp: Path, *args: str) -> Iterator[str]:
    result = CliRunner().invoke(cli, ["--store", tmp.as_uri(), *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return iter(result.stdout.splitlines())


def test_tail_without_follow_prints_the_last_events(tmp_path: Path) -> None:
    writer = Store(LocalStore(tmp_path)).open("chat", create=True)
    for i in range(5):
        writer.append(msg(f"m{i}"))
    assert list(_cli(tmp_path, "tail", "chat", "-n", "2")) == ["[4] user: m3", "[5] user: m4"]
    lines = [json.loads(line) for line in _cli(tmp_path, "tail", "chat", "--from", "4", "--format", "jsonl")]
    assert [(line["seq"], line["message"]["content"]) for line in lines] == [(4, "m3"), (5, "m4")]


def _tail_process(backend: S3Store, moto_endpoint: str, root: str, *args: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-c", "from evstore_cli import main; main()"]
    command += ["--store", f"s3://{backend.bucket}/{root}", "--endpoint-url", moto_endpoint, "tail", "chat", *args]
    # The child starts with SIGINT at its default, whatever this process inherited: under nohup, `&` or a CI
    # runner SIGINT may be ignored, and an ignored disposition would survive the exec and mute the signal.
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip


@pytest.mark.slow
def test_tail_command_follows_another_writer(backend: S3Store, moto_endpoint: str) -> None:
    root = f"t-{uuid.uuid4().hex[:10]}"
    writer = Store(backend, root=root).open("chat", create=True)
    writer.append(msg("m0"))
    process = _tail_process(
        backend, moto_endpoint, root, "--follow", "--from", "1", "--format", "jsonl", "--interval", "0.1",
        "--max-events", "4", "--timeout", str(SAFETY_SECONDS),
    )  # fmt: skip
    try:
        for i in range(1, 4):
            time.sleep(0.1)
            writer.append(msg(f"m{i}"))
        out, err = process.communicate(timeout=SAFETY_SECONDS + 30)
    finally:
        process.kill()
    assert process.returncode == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    assert [(line["seq"], line["message"]["content"]) for line in lines] == [(i + 1, f"m{i}") for i in range(4)]


def test_tail_exits_0_on_ctrl_c(backend: S3Store, moto_endpoint: str) -> None:
    root = f"t-{uuid.uuid4().hex[:10]}"
    Store(backend, root=root).open("chat", create=True).append(msg("m0"))
    process = _tail_process(backend, moto_endpoint, root, "--follow", "--interval", "0.1", "--timeout", str(SAFETY_SECONDS))
    try:
        assert process.stdout is not None
        assert process.stdout.readline() == "[1] user: m0\n"  # it is following now
        process.send_signal(signal.SIGINT)
        process.wait(timeout=SAFETY_SECONDS)
    finally:
        process.kill()
    assert process.returncode == 0
