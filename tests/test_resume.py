"""Resume in a handful of round trips at any length: compaction by default, pipelined reads,
and ``Store.resume`` — a writer plus its context from one pass over what it read."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import pytest

from evstore import AsyncStore, MemoryStore, ObjectStore, Store
from evstore._backends import IncompleteUpload, LifecycleRule, ListPage, ObjectInfo, StoredObject

from .helpers import CountingStore, msg, segment_sizes


class DelayedStore(ObjectStore):
    """Forwards to another backend after a fixed delay per request, and records when each
    request started and ended, so the longest chain of requests that waited on each other
    can be told apart from requests sent together."""

    def __init__(self, inner: ObjectStore, delay: float) -> None:
        self.inner = inner
        self.location = inner.location
        self.delay = delay
        self.spans: list[tuple[float, float]] = []
        self._lock = threading.Lock()

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.monotonic()
        time.sleep(self.delay)
        try:
            return fn(*args, **kwargs)
        finally:
            with self._lock:
                self.spans.append((start, time.monotonic()))

    def reset(self) -> None:
        with self._lock:
            self.spans.clear()

    def chain(self) -> int:
        """The longest chain of requests each of which started after the one before had ended."""
        depth: list[tuple[float, int]] = []  # (end, depth) of each request, by start
        longest = 0
        for start, end in sorted(self.spans):
            mine = 1 + max((d for e, d in depth if e <= start), default=0)
            depth.append((end, mine))
            longest = max(longest, mine)
        return longest

    def create(
        self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None, tags: Mapping[str, str] | None = None
    ) -> str:
        return str(self._call(self.inner.create, key, data, metadata=metadata, tags=tags))

    def replace(self, key: str, data: bytes, *, etag: str, **kwargs: Any) -> str:
        return str(self._call(self.inner.replace, key, data, etag=etag, **kwargs))

    def get(self, key: str, *, max_bytes: int | None = None) -> StoredObject:
        result: StoredObject = self._call(self.inner.get, key, max_bytes=max_bytes)
        return result

    def head(self, key: str) -> ObjectInfo:
        result: ObjectInfo = self._call(self.inner.head, key)
        return result

    def list_page(self, prefix: str, *, start_after: str = "", max_keys: int = 1000, delimiter: str = "") -> ListPage:
        result: ListPage = self._call(
            self.inner.list_page, prefix, start_after=start_after, max_keys=max_keys, delimiter=delimiter
        )
        return result

    def delete_many(self, keys: Iterable[str]) -> int:
        return int(self._call(self.inner.delete_many, list(keys)))

    def get_tags(self, key: str) -> dict[str, str]:
        return self.inner.get_tags(key)

    def get_lifecycle(self) -> list[LifecycleRule]:
        return self.inner.get_lifecycle()

    def put_lifecycle(self, rules: list[LifecycleRule]) -> None:
        self.inner.put_lifecycle(rules)

    def list_incomplete_uploads(self, prefix: str) -> Iterator[IncompleteUpload]:
        uploads: list[IncompleteUpload] = self._call(lambda: list(self.inner.list_incomplete_uploads(prefix)))
        return iter(uploads)

    def abort_upload(self, key: str, upload_id: str) -> None:
        self._call(self.inner.abort_upload, key, upload_id)


def written(store: Store, sid: str, n: int) -> None:
    writer = store.open(sid, create=True)
    for i in range(n):
        writer.append(msg(f"m{i}"))


def test_the_chain_measure_tells_parallel_requests_from_dependent_ones() -> None:
    delayed = DelayedStore(MemoryStore(), 0.5)  # long enough that three threads start within it on a busy machine
    delayed.inner.create("a", b"1")
    together = threading.Barrier(3)

    def get() -> None:
        together.wait(timeout=30)
        delayed.get("a")

    threads = [threading.Thread(target=get) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert delayed.chain() == 1
    delayed.get("a")
    assert delayed.chain() == 2


@pytest.mark.parametrize("length", [0, 10, 100, 900, 1000])
def test_a_short_session_resumes_and_appends_in_three_round_trips_a_new_one_in_two(length: int) -> None:
    """The session's first 1,000 names are listed with the manifest GET and the LIST of its other
    names: they vouch for the segments and name the loose tail, whose GETs then go out with the
    segment GETs. So: that round, the GETs, the append (a session without events: no GETs). At
    1,000 events the first page is full: the LIST after it (which finds no more events) goes out
    beside the GETs, not after them."""
    inner = MemoryStore()
    written(Store(inner, root="root"), "s", length)
    delayed = DelayedStore(inner, 0.3)  # long enough that a round's threads start within it on a busy machine
    writer, context = Store(delayed, root="root").resume("s")
    writer.append(msg("next"))
    assert delayed.chain() <= (2 if length == 0 else 3)
    assert writer.head == length + 1 and len(context) == length


@pytest.mark.slow
@pytest.mark.parametrize("length", [10, 1000, 5000, 10000, 45_000, 100_000])
def test_resume_and_the_append_wait_on_three_round_trips_to_100000_events(length: int) -> None:
    """The manifest round (its GET, the first 1,000 names, the non-event names); the segments' round
    (their GETs on the pool, the LIST pages whose ETags vouch for them on the wide pool beside them,
    the tail's LIST and the GETs of its first 32 seqs, guessed: it was a round of its own after the
    LIST, 4 in all); the append. The threads of that round are started before it, so that its
    requests go out together (they were started one a request, about 0.2 ms each, while the first
    answers held the GIL: 5 to 26 round trips at 10,000 to 100,000 events at 10 ms a request).
    (0.3 s a request: long enough that every request of a round starts within it on a busy machine.)"""
    inner = MemoryStore()
    written(Store(inner, root="root"), "s", length)  # by default the writer compacted as it went
    delayed = DelayedStore(inner, 0.3)
    writer, context = Store(delayed, root="root").resume("s")
    writer.append(msg("next"))
    assert delayed.chain() <= 3
    assert writer.head == length + 1 and len(context) == length


@pytest.mark.parametrize("length", [1003, 1020])
def test_a_tail_past_the_first_page_is_listed_beside_the_segment_gets(length: int) -> None:
    """The loose tail starts on the first page of 1,000 names and goes on past it: the next page is
    listed in the segments' round (it was listed once the stream reached the first page's end, a
    round later), and only its events' GETs wait for it (none is guessed: a few events past a full
    page are not worth 32 GETs). Nothing is listed twice: the manifest round's 2 LISTs (the first
    1,000 names, the non-event names) and that one."""
    inner = MemoryStore()
    written(Store(inner, root="root"), "s", length)
    delayed = DelayedStore(inner, 0.3)
    counted = CountingStore(delayed)
    writer, context = Store(counted, root="root").resume("s")
    writer.append(msg("next"))
    assert delayed.chain() <= 4  # the manifest round, the segments' round, the GETs past the first page, the append
    assert sum(1 for kind, _ in counted.keys if kind == "LIST") == 3
    assert writer.head == length + 1 and len(context) == length


def test_a_long_loose_tail_after_the_segments_is_read_whole() -> None:
    inner = MemoryStore()
    written(Store(inner, root="root"), "s", 2000)
    unpacked = Store(inner, root="root", auto_compact=None).open("s")
    for i in range(100):
        unpacked.append(msg(f"loose {i}"))
    writer, context = Store(CountingStore(inner), root="root").resume("s")
    assert writer.head == 2100 and [m["content"] for m in context[-2:]] == ["loose 98", "loose 99"]
    assert len(context) == 2100


def event_gets(counted: CountingStore, prefix: str) -> list[int]:
    """The seqs of the loose events ``counted`` was asked to GET, in the order asked."""
    names = [key[len(prefix) :] for kind, key in counted.keys if kind == "GET" and key.startswith(prefix)]
    return [int(name) for name in names if name.isdigit()]


def test_the_tail_gets_sent_before_its_listing_are_32_at_most_and_only_listed_events_count() -> None:
    """2,010 events: the segments end at a multiple of 32 before the head, so the loose tail is not
    on the first page of names. The GETs of the 32 seqs after the segments go out with the segment
    GETs; those past the head find nothing and are dropped. Each seq is asked for once."""
    inner = MemoryStore()
    written(Store(inner, root="root"), "s", 2010)
    counted = CountingStore(inner)
    store = Store(counted, root="root")
    writer, context = store.resume("s")
    assert [m["content"] for m in context] == [f"m{i}" for i in range(2010)] and writer.head == 2010
    asked = event_gets(counted, store.layout.session_prefix("s"))
    assert len(asked) == len(set(asked)) == 32
    assert 2010 in asked and sum(seq > 2010 for seq in asked) < 32  # the tail, and a few seqs past the head
    assert sorted(asked) == list(range(1985, 2017))  # from the seq after the newest segment (1,984: 62 x 32)


def test_a_tail_get_that_went_before_an_append_landed_is_sent_again_when_the_listing_names_it() -> None:
    """A guessed GET finds no event at head + 1; an append lands there; the tail's LIST then names it.
    The 404 is not taken for a hole: that seq is asked for again, and the resume has the new event."""
    inner = MemoryStore()
    written(Store(inner, root="root"), "s", 2010)
    other = Store(inner, root="root").open("s")
    layout = Store(inner, root="root").layout
    missed = layout.event_key("s", 2011)
    landed = threading.Event()

    class AppendLandsMeanwhile(CountingStore):
        def get(self, key: str, *, max_bytes: int | None = None) -> StoredObject:
            if key != missed or landed.is_set():
                return super().get(key, max_bytes=max_bytes)
            try:
                return super().get(key, max_bytes=max_bytes)  # not there yet
            finally:
                other.append(msg("landed meanwhile"))
                landed.set()

        def list_page(self, prefix: str, *, start_after: str = "", max_keys: int = 1000, delimiter: str = "") -> ListPage:
            name = start_after[len(prefix) :]
            if name.isdigit() and 1500 < int(name) <= 2010:  # the tail's LIST: after the guessed GETs
                assert landed.wait(timeout=30)
            return super().list_page(prefix, start_after=start_after, max_keys=max_keys, delimiter=delimiter)

    counted = AppendLandsMeanwhile(inner)
    writer, context = Store(counted, root="root").resume("s")
    assert len(context) == 2011 and context[-1]["content"] == "landed meanwhile" and writer.head == 2011
    assert event_gets(counted, layout.session_prefix("s")).count(2011) == 2


@pytest.mark.slow
def test_a_long_chain_of_segments_is_fetched_in_one_round_trip() -> None:
    """At 45,000 events a resume reads a chain of more segments than two groups of 8. Two groups at
    a time made this 6 round trips with the append (7 with 1 KiB messages); with the 45 LIST pages
    whose ETags vouch for the segments' events on the wide pool beside the segment GETs, it is the
    manifest round, the segments' round (the tail's GETs, guessed, among them), the append."""
    inner = MemoryStore()
    written(Store(inner, root="root"), "s", 45_000)
    delayed = DelayedStore(inner, 0.3)
    counted = CountingStore(delayed)
    writer, context = Store(counted, root="root").resume("s")
    writer.append(msg("next"))
    segment_gets = [key for kind, key in counted.keys if kind == "GET" and ("/segments/" in key or "/young/" in key)]
    assert len(segment_gets) > 2 * 8
    assert delayed.chain() == 3
    assert writer.head == 45_001 and len(context) == 45_000


@pytest.mark.parametrize("length", [0, 7, 100, 2000])
def test_resume_equals_open_plus_context(length: int) -> None:
    store = Store(MemoryStore(), root="root")
    written(store, "s", length)
    writer, context = store.resume("s")
    opened = store.open("s")
    assert (writer.head, writer.head_hash) == (opened.head, opened.head_hash)
    assert context == store.context("s")
    writer.append(msg("after resume"))
    assert store.context("s")[-1]["content"] == "after resume"


def test_resume_makes_no_duplicate_manifest_get_or_listing() -> None:
    counting = CountingStore(MemoryStore())
    store = Store(counting, root="root")
    written(store, "s", 300)
    counting.reset()
    store.resume("s")
    gets = [key for kind, key in counting.keys if kind == "GET"]
    assert len(gets) == len(set(gets))  # nothing read twice, the manifest once
    # the non-event objects, and the first page of the session's names, listed with the manifest: its
    # ETags vouch for the segments, and it names the loose tail
    assert counting.counts["LIST"] == 2 and counting.counts["HEAD"] == 0


def test_resume_of_a_fork_continues_after_the_inherited_events() -> None:
    store = Store(MemoryStore(), root="root")
    written(store, "p", 40)
    store.fork("p", "f", at=35).append(msg("own"))
    writer, context = store.resume("f")
    assert writer.head == 36 and [m["content"] for m in context][-2:] == ["m34", "own"]
    assert writer.append(msg("more")) == 37


def test_resume_with_create_starts_a_missing_session() -> None:
    store = Store(MemoryStore(), root="root")
    writer, context = store.resume("new", create=True)
    assert writer.head == 0 and context == []


def test_amortized_requests_per_append_stay_at_most_1_05_by_default() -> None:
    counting = CountingStore(MemoryStore())
    store = Store(counting, root="root")
    writer = store.open("s", create=True)
    counting.reset()
    appends = 8192 + 300  # the top level (2,048) four times: a fourth level would show here; then young ones
    for i in range(appends):
        writer.append(msg(f"m{i}"))
    # one segment PUT per 32 appends, one Merkle checkpoint object and one DELETE of the segments
    # it retires per 256
    assert counting.counts["PUT"] == appends + appends // 32 + appends // 256
    assert sum(1 for kind, key in counting.keys if kind == "PUT" and "/ztree/" in key) == appends // 256
    assert counting.counts["DELETE"] == appends // 256
    assert counting.total / appends <= 1.04
    assert counting.total == counting.counts["PUT"] + counting.counts["DELETE"]  # appending reads nothing
    assert store.info("s").segments > 0
    # three levels, and none above: a long session resumes from segments of at most 2,048 events;
    # the top level under segments/, the two below it young (see tests/test_young_segments.py)
    assert segment_sizes(counting.inner, "root/sessions/s/") == {"segments": {2048}, "young": {32, 256}}


def test_the_loose_tail_stays_short_by_default_so_replay_needs_few_requests() -> None:
    counting = CountingStore(MemoryStore())
    store = Store(counting, root="root")
    written(store, "s", 5000)
    counting.reset()
    assert len(list(store.replay("s"))) == 5000
    assert counting.total < 60  # segments of 32, 128, 512, 2048 events and a short loose tail


def test_a_writer_that_resumed_keeps_compacting_what_it_read() -> None:
    store = Store(MemoryStore(), root="root")
    written(store, "s", 200)
    writer, _ = store.resume("s")
    for i in range(56):  # to seq 256: a level-1 segment of 256 events needs the 200 it read
        writer.append(msg(f"n{i}"))
    assert store.backend.head(store.layout.young_key("s", 1, 256)).size > 0


def test_compaction_can_be_turned_off() -> None:
    store = Store(MemoryStore(), root="root", auto_compact=None)
    written(store, "s", 100)
    assert store.info("s").segments == 0


@pytest.mark.asyncio
async def test_the_async_api_resumes_too() -> None:
    store = Store(MemoryStore(), root="root")
    written(store, "s", 5)
    async with AsyncStore(store) as astore:
        writer, context = await astore.resume("s")
        assert len(context) == 5 and await writer.append(msg("x")) == 6


@pytest.mark.slow
def test_resume_holds_about_what_the_context_holds_not_every_event_it_read() -> None:
    """The writer keeps the idempotency keys and the newest events' bytes for compaction, not
    every ``RawEvent``: a resume's peak memory is within 1.3x the context's alone (it was 1.75x
    at 20,000 events of 1 KiB, and grew with the length)."""
    import tracemalloc

    store = Store(MemoryStore())
    writer = store.open("long", create=True)
    for i in range(12_000):
        writer.append(msg(f"{i:08d} " + "x" * 1000))

    def peak(read: Any) -> int:
        tracemalloc.start()
        try:
            kept = read()
            return tracemalloc.get_traced_memory()[1] + 0 * len(kept)  # what it returns counts
        finally:
            tracemalloc.stop()

    context = peak(lambda: store.context("long"))
    resumed = peak(lambda: store.resume("long"))
    assert resumed <= 1.3 * context, (resumed, context)


@pytest.mark.parametrize("length", [10, 5000])
def test_open_sends_the_manifest_get_with_the_listing_three_round_trips(length: int) -> None:
    """``store.open``: GET manifest + LIST of the non-event objects together, the LIST from the
    newest segment's end, the GET of the head event (it read the manifest first: 4 in a row)."""
    inner = MemoryStore()
    written(Store(inner, root="root"), "s", length)
    delayed = DelayedStore(inner, 0.3)  # long enough that a round's threads start within it on a busy machine
    counting = CountingStore(delayed)
    writer = Store(counting, root="root").open("s")
    assert writer.head == length
    assert counting.counts == {"GET": 2, "LIST": 2}
    assert delayed.chain() <= 3
