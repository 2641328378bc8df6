"""Reading through segments: the loose tail's short first LIST page. What replay, context and
open return is what the loose events say."""

from __future__ import annotations

from typing import Any

import pytest

from evstore import Keyring, MemoryStore, Store, _read
from evstore._read import _listing, _segments

from .helpers import CountingStore, msg


def _session(events: int, segment_size: int, keyring: Keyring | None = None, tail: int = 0) -> tuple[MemoryStore, list[Any]]:
    """A session of ``events`` messages, compacted, then ``tail`` more left loose; and all its
    events as replay returns them from the loose events only (before any segment was made)."""
    memory = MemoryStore()
    writer = Store(memory, keyring=keyring, auto_compact=None).open("s", create=True)
    for i in range(events):
        writer.append(msg(f"m{i}"))
    before = list(Store(memory, keyring=keyring).replay("s"))
    assert Store(memory, keyring=keyring).compact("s", segment_size=segment_size)
    for i in range(events, events + tail):
        writer.append(msg(f"m{i}"))
    loose = before + list(Store(memory, keyring=keyring).replay("s", start=events + 1))
    return memory, loose


# ---- the loose tail's first LIST page is short -------------------------------------------------


@pytest.mark.parametrize("tail", [1, 62, 63, 64, 65, 150])
def test_a_tail_longer_than_the_first_page_is_read_whole(tail: int) -> None:
    memory, loose = _session(32, 32, tail=tail)  # one segment 1-32, then the loose tail
    counting = CountingStore(memory)
    reader = Store(counting)
    assert list(reader.replay("s", start=2)) == loose[1:]  # from seq 2: no first page listed with the manifest
    # the non-event objects; the page of the loose events the segment covers (whose ETags vouch
    # for it); the tail's first page (64 keys: the manifest is among them while the tail is
    # shorter), then a page of 1,000
    assert counting.counts["LIST"] == 1 + 1 + (1 if tail < _listing._TAIL_FIRST_PAGE else 2)
    gets = [key for kind, key in counting.keys if kind == "GET"]
    assert len(gets) == len(set(gets)) == 1 + 1 + tail  # manifest, segment, the tail once each
    counting.reset()
    assert list(reader.replay("s")) == loose
    # from seq 1: the non-event objects, and the session's first 1,000 names listed with the manifest
    # (they vouch for the segment and name the tail)
    assert counting.counts["LIST"] == 2
    counting.reset()
    assert [m["content"] for m in reader.context("s")] == [f"m{i}" for i in range(32 + tail)]
    counting.reset()
    writer = reader.open("s")
    assert writer.head == 32 + tail and writer.head_hash == loose[-1].hash
    # find_head lists from the segment's last seq: tail + 1 events before the manifest
    assert counting.counts["LIST"] == 1 + (1 if tail + 1 < _listing._TAIL_FIRST_PAGE else 2)
    assert counting.counts["HEAD"] == 0


def test_a_long_tail_after_a_segment_still_finds_the_head() -> None:
    memory, loose = _session(1540, 20, tail=1500)  # segments to 1540; then 1,500 loose events
    counting = CountingStore(memory)
    writer = Store(counting).open("s")
    assert writer.head == 3040 and writer.head_hash == loose[-1].hash
    assert counting.counts["HEAD"] > 0  # beyond both pages: the probes gallop from their end


def test_the_first_page_holds_at_least_the_early_gets() -> None:
    memory, loose = _session(32, 32, tail=80)
    counting = CountingStore(memory)
    reader = Store(counting, concurrency=48)  # 96 early GETs: the first page asks for 96 keys
    assert list(reader.replay("s", start=2)) == loose[1:]  # from seq 2: the tail is listed on its own
    # the non-event objects, the page the segment's events are listed on; the 80 events and the
    # manifest in the tail's first page
    assert counting.counts["LIST"] == 1 + 1 + 1
    gets = [key for kind, key in counting.keys if kind == "GET"]
    assert len(gets) == len(set(gets)) == 1 + 1 + 80


# ---- a read that starts inside a segment ----------------------------------------------------------


def test_a_partial_read_costs_no_more_requests_than_a_whole_one() -> None:
    """``replay(start=)`` from any seq of a compacted session uses the segment it starts in (and
    those after it), however few of its events it wants: it never falls back to a GET per event."""
    memory = MemoryStore()
    writer = Store(memory).open("s", create=True)  # the default automatic compaction: 32, 256, 2,048
    for i in range(600):
        writer.append(msg(f"m{i}"))
    counting = CountingStore(memory)
    reader = Store(counting)
    whole = list(reader.replay("s"))
    full = counting.total
    for start in (2, 31, 32, 200, 255, 256, 257, 511, 512, 513, 575, 576, 590):
        counting.reset()
        assert list(reader.replay("s", start=start)) == whole[start - 1 :]
        # a read from seq 1 names its tail from the first page listed with the manifest; a later
        # start lists the tail itself: one LIST at most more
        assert counting.total <= full + 1, (start, dict(counting.counts))


@pytest.mark.parametrize(("start", "end"), [(250, 256), (250, 300), (500, 520), (256, 256), (254, 256)])
def test_a_short_range_inside_segments_costs_a_few_requests(start: int, end: int) -> None:
    memory = MemoryStore()
    writer = Store(memory).open("s", create=True)
    for i in range(600):
        writer.append(msg(f"m{i}"))
    counting = CountingStore(memory)
    events = list(Store(counting).replay("s", start=start, end=end))
    assert [e.seq for e in events] == list(range(start, end + 1))
    # the manifest and its listings, then the segments the range lies in (or its 1-3 loose events)
    assert counting.counts["GET"] <= 4 and counting.counts["LIST"] <= 4, dict(counting.counts)


# ---- gaps in the segments ---------------------------------------------------------------------------


def test_a_writer_opened_partway_leaves_gaps_that_cost_their_loose_events_only() -> None:
    """A writer opened (``store.open``) partway into a session holds none of the events before it,
    so it packs no segment until its next boundary: the events before are a gap. A read takes the
    gap's events loose, by their seqs, and the segments after it; before, the first gap ended the
    segments and every event after it was read loose (300 GETs for 300 events)."""
    memory = MemoryStore()
    store = Store(memory)
    writer = store.open("s", create=True)
    for i in range(300):
        if i in (11, 150):
            writer = store.open("s")  # a new process: it holds none of the events before
        writer.append(msg(f"m{i}"))
    counting = CountingStore(memory)
    events = list(Store(counting).replay("s"))
    assert [m["content"] for e in events for m in e.messages] == [f"m{i}" for i in range(300)]
    # the manifest; gaps 1-32 and 129-160 and the tail 289-300 loose; the 7 young segments
    assert counting.counts["GET"] <= 1 + 32 + 32 + 12 + 7, dict(counting.counts)
    assert counting.counts["LIST"] <= 4


def test_segment_runs_bounds_what_planted_names_can_cost() -> None:
    # segments every other 10 seqs: gaps between all of them, at most _RUNS chains taken
    segments = [(start, start + 4) for start in range(1, 100_000, 10)]
    runs = _read.segment_runs(segments, 1, None)
    assert len(runs) == _segments._RUNS and all(chain for _, chain in runs)
    assert _read.segment_runs([(500, 600)], 1, None) == []  # a gap longer than _GAP_EVENTS: loose from the cursor
    assert _read.segment_runs([(40, 71)], 1, 50) == [(40, [(40, 71)])]
