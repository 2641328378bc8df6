"""gc at scale: flat listings of key ranges, requests pinned by count (the formula in
``evstore._retention``), reported requests equal to those sent, live sessions judged from the
listing alone, sessions across pages and ranges, and the round trips that wait on each other."""

from __future__ import annotations

import math
import threading
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evstore import MemoryStore, ObjectStore, Store
from evstore._backends import ListPage
from evstore._retention import GcReport, between, block_end, pages_left

from .helpers import Clock, CountingStore, msg
from .test_resume import DelayedStore


class Counting(CountingStore):
    """``CountingStore`` safe for gc's threads, recording where each LIST starts."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self._lock = threading.Lock()
        self.starts: list[str] = []
        self.listed: list[int] = []  # the keys each LIST page of the sessions returned

    def _note(self, kind: str, key: str) -> None:
        with self._lock:
            super()._note(kind, key)

    def reset(self) -> None:
        with self._lock:
            super().reset()
            self.starts.clear()
            self.listed.clear()

    def list_page(self, prefix: str, *, start_after: str = "", max_keys: int = 1000, delimiter: str = "") -> ListPage:
        with self._lock:
            self.starts.append(start_after)
        page = super().list_page(prefix, start_after=start_after, max_keys=max_keys, delimiter=delimiter)
        with self._lock:
            self.listed.append(len(page.objects))
        return page


def objects(backend: ObjectStore) -> int:
    return sum(1 for _ in backend.list(""))


def fleet(store: Store, n: int, *, deleted: int = 0, remnants: int = 0, events: int = 3) -> None:
    """``n`` sessions ``s000000``...; of them ``deleted`` deleted and ``remnants`` without a manifest."""
    for i in range(n):
        writer = store.open(f"s{i:06d}", create=True)
        for k in range(events):
            writer.append(msg(f"{i}-{k}"))
    for i in range(deleted):
        store.delete(f"s{i:06d}")
    store.backend.delete_many([store.layout.manifest_key(f"s{i:06d}") for i in range(deleted, deleted + remnants)])


def list_bound(objects_listed: int) -> int:
    """The module's formula: LIST pages <= 1.5 x objects/1000 + 1, and the LIST of incomplete uploads."""
    return math.floor(1.5 * objects_listed / 1000) + 1 + 1


def timed_counting() -> tuple[Store, Counting, Clock]:
    clock = Clock()
    counting = Counting(MemoryStore(clock=clock))
    return Store(counting, root="root", clock=clock, auto_compact=None), counting, clock


def exact(report: GcReport, counting: Counting) -> None:
    assert report.requests == counting.total, (report.requests, dict(counting.counts))


def test_300_sessions_cost_their_pages_two_gets_per_deleted_session_and_two_deletes() -> None:
    store, counting, clock = timed_counting()
    fleet(store, 300, deleted=75, remnants=75)
    stored = objects(counting.inner)  # 150 live x 4, 75 deleted x 6 (manifest, 3 events, fence, tombstone), 75 x 3
    assert stored == 600 + 450 + 225
    clock.advance(days=2)
    counting.reset()
    report = store.gc()
    exact(report, counting)
    assert report.sessions == 300 and report.sessions_removed == 150 and report.left_alone == {}
    assert report.objects_removed == 450 + 225
    # 1,275 objects: two pages of one range (the second range is paid for by 2,000 listed), then the uploads
    assert counting.counts["LIST"] == 2 + 1 <= list_bound(stored)
    # the deleted ones' manifests and tombstones; no live session and no remnant costs a GET
    gets = [key for kind, key in counting.keys if kind == "GET"]
    assert len(gets) == 2 * 75
    assert {key.rsplit("/", 1)[1] for key in gets} == {"manifest", "tombstone"}
    assert {key.split("/")[2] for key in gets} == {f"s{i:06d}" for i in range(75)}
    # 600 keys in one batch, then the 75 tombstones in one after it
    assert counting.counts["DELETE"] == 2
    assert [kind for kind, _ in counting.keys if kind == "DELETE"] == ["DELETE", "DELETE"]
    assert counting.keys[-1][1].endswith("/tombstone")
    assert report.requests == counting.counts["LIST"] + 150 + 2


def test_live_sessions_cost_no_get_with_or_without_rules() -> None:
    store, counting, clock = timed_counting()
    fleet(store, 200, events=4)
    for i in range(0, 200, 10):
        store.compact(f"s{i:06d}", segment_size=2)  # segments are of a live kind too
    for i in range(20):
        store.open(f"e{i:03d}", create=True, retention="ephemeral").append(msg("scratch"))
    store.apply_lifecycle(30)
    stored = objects(counting.inner)
    clock.advance(days=3)
    counting.reset()
    report = store.gc()
    exact(report, counting)
    assert report.objects_removed == 0 and counting.counts["GET"] == 0 and counting.counts["DELETE"] == 0
    assert counting.counts["LIST"] <= list_bound(stored)
    counting.reset()
    report = store.gc(apply_lifecycle=True)  # the rules: nothing is due under either retention class
    exact(report, counting)
    assert report.objects_removed == 0 and [key for kind, key in counting.keys if kind == "GET"] == ["?lifecycle"]
    clock.advance(days=30)  # now the ephemeral ones are due: the class is in the manifest, so each one old enough is read
    counting.reset()
    report = store.gc(apply_lifecycle=True)
    exact(report, counting)
    assert report.reasons == {"lifecycle expiry": 20 * 2} and report.sessions_removed == 20
    # every session is past 30 days, and a listing shows no tags: each manifest is read, the permanent ones kept
    assert counting.counts["GET"] == 1 + 220
    assert len(list(store.replay("s000000"))) == 4


def test_a_live_fork_costs_a_get_and_its_parent_one_per_marker_sent_together() -> None:
    store, counting, clock = timed_counting()
    fleet(store, 3)
    store.fork("s000000", "fork", at=2).append(msg("own"))  # first own seq 3: only its manifest says it is a fork
    clock.advance(days=2)
    counting.reset()
    report = store.gc()
    exact(report, counting)
    assert report.objects_removed == 0 and report.left_alone == {}
    gets = sorted(key.split("/", 2)[2] for kind, key in counting.keys if kind == "GET")
    # the fork's manifest (its first seq is not 1), the parent's (it has a marker) and, for the marker, the fork's again
    assert gets == ["fork/manifest", "fork/manifest", "s000000/manifest"]


def test_dependent_round_trips_stay_far_below_the_requests() -> None:
    """Structural, not timed: the longest chain of requests each sent after the one before it
    ended is bounded by the listing's pages plus the GETs shared among the judges in flight."""
    store, _, clock = timed_counting()
    fleet(store, 600, deleted=90, remnants=60)
    clock.advance(days=2)
    delayed = DelayedStore(store.backend, 0.02)
    counting = Counting(delayed)
    gc_store = Store(counting, root="root", clock=clock, concurrency=8)
    report = gc_store.gc()
    exact(report, counting)
    assert report.sessions_removed == 150
    chain = delayed.chain()
    total = counting.total
    assert total == counting.counts["LIST"] + 180 + counting.counts["DELETE"]
    # serial gc: a LIST per session and two GETs per deleted one, ~780 in a row; here the two GETs
    # of a session go together, and up to 32 sessions at once, 4 x concurrency (allowed: 6, for a busy machine)
    bound = counting.counts["LIST"] + counting.counts["DELETE"] + math.ceil(180 / 6)
    assert chain <= bound < total / 3, (chain, bound, total)


def most_at_once(spans: list[tuple[float, float]]) -> int:
    """The most requests in flight at one time, from their (start, end) spans."""
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans], key=lambda e: (e[0], e[1]))
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def test_deleted_sessions_are_judged_4_x_concurrency_at_once_with_both_gets_in_flight() -> None:
    """Each judge sends its session's manifest GET and, on the wide pool, its tombstone GET: more
    than the store's pool and 2 x concurrency judges could have in flight (4 x concurrency in
    all), and never more than the judges, their second GETs and the pool's listings."""
    store, _, clock = timed_counting()
    fleet(store, 80, deleted=80)
    clock.advance(days=2)
    delayed = DelayedStore(store.backend, 0.05)
    concurrency = 4
    report = Store(delayed, root="root", clock=clock, concurrency=concurrency).gc()
    assert report.sessions_removed == 80
    assert 4 * concurrency < most_at_once(delayed.spans) <= (4 + 4 + 2) * concurrency


@pytest.mark.slow
def test_sequential_ids_are_split_where_they_lie_and_no_listing_comes_back_empty() -> None:
    """Ids s000000-s000999: the last range is split toward the end of the block the ids listed
    share (s001), not past every name, and a range a page or two most likely finish is not split:
    within the issue's LISTs <= 1.5 x objects/1000, the LIST of incomplete uploads included."""
    store, counting, clock = timed_counting()
    fleet(store, 1000, deleted=500)
    stored = objects(counting.inner)
    assert stored == 500 * 4 + 500 * 6
    clock.advance(days=2)
    counting.reset()
    report = store.gc()
    exact(report, counting)
    assert report.sessions_removed == 500
    assert counting.counts["LIST"] <= 1.5 * stored / 1000
    assert [start for start in counting.starts if start and "/" not in start[len("root/sessions/") :]]  # split
    assert all(counting.listed), counting.listed


def test_the_incomplete_uploads_are_listed_alongside_the_sessions() -> None:
    """A fleet with nothing to collect: its one page and the LIST of incomplete uploads are sent
    together, one round trip in all (the uploads were listed after the sessions before)."""
    store, counting, clock = timed_counting()
    fleet(store, 5)
    clock.advance(days=2)
    delayed = DelayedStore(counting, 0.05)
    counting.reset()
    report = Store(delayed, root="root", clock=clock).gc()
    assert report.objects_removed == 0 and counting.counts["LIST"] == 2 == len(delayed.spans)
    assert delayed.chain() == 1


@given(start=st.text(alphabet="-._09AZaz~\u00e9", max_size=5), rest=st.text(alphabet="-._09AZaz~\u00e9", max_size=5))
def test_a_block_ends_after_every_name_that_starts_with_it(start: str, rest: str) -> None:
    end = block_end(start)
    assert end is None or (start + rest < end and "/" not in end)


def test_block_ends_and_pages_left() -> None:
    assert block_end("s0000") == "s0001" and block_end("s09") == "s0A" and block_end("az") == "b"
    assert block_end("z") is None and block_end("") is None
    # 400 ids in 2 pages, 600 to go: 3 pages; none listed yet: unknown
    assert pages_left("s000000", "s000400/", "s001", 2, "0123456789s") == pytest.approx(3, rel=0.2)
    assert pages_left("s000400", "s000400/", "s001", 0, "0123456789s") == math.inf


def test_a_session_across_a_page_boundary_is_judged_whole() -> None:
    store, counting, clock = timed_counting()
    for i in range(998):  # a remnant whose keys fill the first page but two
        counting.inner.create(f"root/sessions/a-remnant/{i + 1:020d}", b"x")
    writer = store.open("b-live", create=True)  # its first events end the first page; the rest are on the next
    for i in range(5):
        writer.append(msg(f"b{i}"))
    for i in range(1500):  # a remnant larger than a page, after it
        counting.inner.create(f"root/sessions/c-remnant/{i + 1:020d}", b"x")
    clock.advance(days=2)
    counting.reset()
    report = store.gc()
    exact(report, counting)
    assert report.reasons == {"expired remnant or orphan": 998 + 1500} and report.sessions_removed == 2
    assert counting.counts["GET"] == 0  # b-live: judged from its listing, across two pages
    assert [e.seq for e in store.replay("b-live")] == [1, 2, 3, 4, 5]
    assert sorted(store.list_sessions()) == ["b-live"]


def test_a_session_of_more_objects_than_gc_holds_is_listed_again_only_to_be_removed() -> None:
    store, counting, clock = timed_counting()
    for i in range(4500):
        counting.inner.create(f"root/sessions/big/{i + 1:020d}", b"x")
    writer = store.open("big-live", create=True)
    writer.append(msg("one"))
    for i in range(4500):  # planted junk names after the events: a live session with nothing to do
        counting.inner.create(f"root/sessions/big-live/rekeys/{i:05d}", b"")
    clock.advance(days=2)
    counting.reset()
    report = store.gc()
    exact(report, counting)
    assert report.reasons == {"expired remnant or orphan": 4500}
    # big: its 5 pages listed again to remove it; big-live costs nothing more than its pages
    assert counting.counts["GET"] == 0
    assert counting.counts["LIST"] <= list_bound(9002) + 5


def test_forks_of_deleted_parents_across_ranges() -> None:
    store, counting, clock = timed_counting()
    for first in "0AMZam":  # ids spread over the alphabet: the listing is split into ranges among them
        for i in range(300):
            store.open(f"{first}fill{i:04d}", create=True).append(msg("x"))
    fleet(store, 2)
    store.open("0parent", create=True).append(msg("p0"))
    store.open("0parent").append(msg("p1"))
    store.fork("0parent", "zfork", at=1).append(msg("z own"))  # alive: keeps 0parent's seq 1
    store.open("zparent", create=True).append(msg("q0"))
    store.fork("zparent", "0fork", at=1).append(msg("0 own"))
    store.delete("0parent")
    store.delete("zparent")
    store.delete("0fork")  # zparent's only fork goes too
    clock.advance(days=2)
    counting.reset()
    report = store.gc()
    exact(report, counting)
    # ranges started at boundaries between sessions (names without "/"), not only where a page ended
    assert [start for start in counting.starts if start and "/" not in start[len("root/sessions/") :]]
    left = {o.key.split("/")[2] for o in counting.inner.list("root/sessions/")}
    assert "0parent" in left and "0fork" not in left  # the live fork needs its parent
    assert [m["content"] for e in store.replay("zfork") for m in e.messages] == ["p0", "z own"]
    # zparent: its fork was judged in this run; whichever range came first, a second run removes it
    report = store.gc()
    assert "zparent" not in {o.key.split("/")[2] for o in counting.inner.list("root/sessions/")}
    assert "0parent" in {o.key.split("/")[2] for o in counting.inner.list("root/sessions/")}


def test_dry_run_over_ranges_plans_what_gc_removes() -> None:
    store, counting, clock = timed_counting()
    fleet(store, 1500, deleted=100, remnants=100)
    clock.advance(days=2)
    planned: list[str] = []
    before = objects(counting.inner)
    counting.reset()
    dry = store.gc(dry_run=True, on_remove=lambda key, size, reason: planned.append(key))
    exact(dry, counting)
    assert objects(counting.inner) == before and counting.counts["DELETE"] == 0
    assert len(planned) == len(set(planned)) == dry.objects_removed == 100 * 6 + 100 * 3
    removed: list[str] = []
    real = store.gc(on_remove=lambda key, size, reason: removed.append(key))
    assert sorted(removed) == sorted(planned) and real.sessions_removed == dry.sessions_removed == 200
    assert objects(counting.inner) == before - len(planned)


def test_an_undecodable_manifest_is_left_alone_from_its_listed_size() -> None:
    store, counting, clock = timed_counting()
    store.open("s", create=True).append(msg("kept"))
    stored = counting.inner.get("root/sessions/s/manifest")
    counting.inner.replace("root/sessions/s/manifest", b"{}", etag=stored.etag)
    clock.advance(days=2)
    counting.reset()
    report = store.gc()
    assert "does not decode" in report.left_alone["s"] and report.objects_removed == 0
    assert counting.counts["GET"] == 0


@given(
    low=st.text(alphabet="-._09AZaz/~\x00\u00e9", max_size=6),
    high=st.none() | st.text(alphabet="-._09AZaz~\u00e9", min_size=1, max_size=6),
)
def test_a_boundary_lies_strictly_between_and_never_inside_a_session(low: str, high: str | None) -> None:
    if high is not None and high <= low:
        return
    name = between(low, high)
    if name is None:
        return
    assert low < name and (high is None or name < high)
    assert "/" not in name  # so no session's keys ("<id>/...") lie on both sides of it


def test_boundaries_home_in_on_dense_ids_in_few_steps() -> None:
    """Ids s00000-s00999: each boundary past them costs one LIST that finds nothing, and halves
    the gap; spelled in the characters the ids use, a few halvings reach them."""
    low, high = "s00050/", None
    steps = 0
    while (name := between(low, high, "0123456789s")) is not None and name >= "s01":
        high, steps = name, steps + 1
    assert name is not None and low < name < "s01" and steps <= 8


@pytest.mark.parametrize("concurrency", [1, 3])
def test_any_concurrency_collects_the_same(concurrency: int) -> None:
    store, counting, clock = timed_counting()
    fleet(store, 1200, deleted=50, remnants=50)
    clock.advance(days=2)
    gc_store = Store(counting, root="root", clock=clock, concurrency=concurrency)
    counting.reset()
    report = gc_store.gc()
    exact(report, counting)
    assert report.sessions_removed == 100 and report.sessions == 1200
    assert sorted(store.list_sessions()) == [f"s{i:06d}" for i in range(100, 1200)]


def young_names(backend: ObjectStore, sid: str) -> set[str]:
    return {info.key for info in backend.list(f"sessions/{sid}/young/")}


def test_gc_retires_the_young_segments_a_writer_that_may_not_delete_left_behind() -> None:
    """A writer role that may not delete leaves every lower-level segment; gc removes those a
    higher level covers, from the listing alone (no GET), leaving what a writer that may delete
    leaves itself; reads return the same history, from the same segments."""
    from .helpers import NoDeletes

    memory = MemoryStore()
    for sid, backend in (("kept", NoDeletes(memory)), ("retired", memory)):
        writer = Store(backend, auto_compact=2).open(sid, create=True)
        for i in range(600):
            writer.append(msg(f"m{i}"))
    left = young_names(memory, "kept")
    assert len(left) > 250  # levels of 2 and 16 events, all of them
    counting = Counting(memory)
    report = Store(counting).gc(grace=timedelta(0), now=datetime.now(UTC) + timedelta(seconds=1))
    retired = len(left) - len(young_names(memory, "retired"))
    assert counting.counts["GET"] == 0 and report.reasons == {"segment retired by a higher level": retired}
    kept = young_names(memory, "kept")
    assert {name.replace("/kept/", "/retired/") for name in kept} == young_names(memory, "retired")
    assert [m["content"] for m in Store(memory).context("kept")] == [f"m{i}" for i in range(600)]
    assert Store(counting).gc(grace=timedelta(0)).reasons == {}  # nothing more to retire


def test_segment_coverage_follows_key_order() -> None:
    from evstore._ids import Layout
    from evstore._retention import SegmentCoverage

    layout = Layout()
    prefix = layout.session_prefix("s")
    names = sorted(
        key[len(prefix) :]
        for key in [
            layout.segment_key("s", 1, 128),
            layout.young_key("s", 1, 16),  # inside segments/1-128
            layout.young_key("s", 129, 144),
            layout.young_key("s", 129, 130),  # inside young 129-144
            layout.young_key("s", 147, 148),  # covered by nothing
            layout.young_key("s", 143, 146),  # overlaps 129-144, is not inside it
            layout.young_key("s", 145, 146),  # inside 143-146
        ]
    )
    coverage = SegmentCoverage()
    covered = {name for name in names if coverage.covered(name, 10)}
    inside = [(1, 16), (129, 130), (145, 146)]
    assert covered == {layout.young_key("s", first, last)[len(prefix) :] for first, last in inside}
    assert not SegmentCoverage().covered(layout.young_key("s", 1, 2)[len(prefix) :], 0)
