"""Young segments: automatic compaction names the segments of its lower levels by their end, newest
first, under ``young/`` (listed last), so a read lists the few it needs at any session length,
while the top level keeps ``segments/`` names (one per 2,048 events by default)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evstore import Keyring, MemoryStore, Store, generate_key
from evstore._codec import pack_segment
from evstore._ids import MAX_SEQ, Layout, parse_segment
from evstore._read import _segments

from .helpers import CountingStore, NoDeletes, msg, segment_sizes
from .test_resume import DelayedStore, written

_SEQS = st.integers(1, MAX_SEQ)


@pytest.mark.slow
@given(st.lists(st.tuples(_SEQS, _SEQS).map(sorted), min_size=1, max_size=20), _SEQS)
def test_young_names_parse_back_sort_newest_first_and_start_where_asked(ranges: list[list[int]], upto: int) -> None:
    layout = Layout()
    names = {layout.young_key("s", first, last): (first, last) for first, last in ranges}
    prefix = layout.session_prefix("s")
    assert {parse_segment(key[len(prefix) :]) for key in names} == set(names.values())
    ends = [names[key][1] for key in sorted(names)]
    assert ends == sorted(ends, reverse=True)  # by name: the newest end first
    start = layout.young_start("s", upto)
    assert {names[key] for key in names if key > start} == {r for r in names.values() if r[1] <= upto}


def test_young_names_are_listed_after_every_other_name_of_a_session() -> None:
    layout = Layout("root")
    young = layout.young_key("s", 1, 2)
    others = [layout.tombstone_key("s"), layout.segment_key("s", 1, MAX_SEQ), layout.fork_marker_key("s", "z", "u")]
    assert all(other < young for other in [*others, layout.manifest_key("s"), layout.event_key("s", MAX_SEQ)])


def test_automatic_compaction_names_its_lower_levels_young_and_its_top_level_segments() -> None:
    memory = MemoryStore()
    written(Store(memory, root="root", auto_compact=2), "s", 300)  # levels of 2, 16 and 128 events
    assert segment_sizes(memory, "root/sessions/s/") == {"segments": {128}, "young": {2, 16}}
    # each higher-level segment retired the lower ones inside it: after 256, the young ones end at
    # 272 and 288 (16 events each), then every second seq from 290 (288, a multiple of 16, has its 16)
    young = sorted(parse_segment(info.key[len("root/sessions/s/") :]) or (0, 0) for info in memory.list("root/sessions/s/young/"))
    assert young == [(257, 272), (273, 288), *((first, first + 1) for first in range(289, 301, 2))]


def test_a_long_session_resumes_with_one_listing_of_its_non_event_objects() -> None:
    """A writer that may not delete (the writer role) retires no segment: past about 2,050 events
    at ``auto_compact=2`` (about 34,000 by default) the segment names no longer fit one LIST page;
    the reader still needs one, and 3 round trips with the append."""
    inner = MemoryStore()
    written(Store(NoDeletes(inner), root="root", auto_compact=2), "s", 2201)  # 17 top-level segments, a tail of 1
    assert sum(1 for _ in inner.list("root/sessions/s/young/")) > 1000
    counting = CountingStore(inner)
    writer, context = Store(counting, root="root").resume("s")
    assert [m["content"] for m in context] == [f"m{i}" for i in range(2201)]
    # the non-event objects (one page), the 3 pages of the 2,200 loose events the segments cover, the loose tail
    assert counting.counts["LIST"] == 1 + 3 + 1
    # the manifest; a chain of 17 top-level segments, [2177, 2192] and four of 2 events to 2,200; the
    # 32 seqs from 2,201 on, guessed beside the tail's LIST (the tail is 1 event: 31 find nothing)
    assert counting.counts["GET"] == 1 + 22 + _segments._TAIL_GUESS
    delayed = DelayedStore(inner, 0.3)  # long enough that a round's threads start within it on a busy machine
    writer, _ = Store(delayed, root="root").resume("s")
    writer.append(msg("next"))
    assert delayed.chain() <= 3


@pytest.mark.slow
def test_the_listing_stays_one_page_at_34000_events_by_default() -> None:
    """By a writer that may not delete, so that more than 1,000 young segments pile up."""
    inner = MemoryStore()
    written(Store(NoDeletes(inner), root="root"), "s", 34000)
    assert sum(1 for _ in inner.list("root/sessions/s/young/")) > 1000
    counting = CountingStore(inner)
    assert len(Store(counting, root="root").context("s")) == 34000
    # the manifest; 16 top-level segments (to 32,768), four of 256 events (to 33,792), six of 32
    # (to 33,984); the 32 seqs after them, guessed (16 loose events, 16 past the head); the non-event
    # objects, the 34 pages of the 33,984 loose events the segments cover, the loose tail
    assert counting.counts == {"GET": 1 + 26 + _segments._TAIL_GUESS, "LIST": 1 + 34 + 1}


def test_a_read_that_ends_early_lists_the_young_segments_that_end_before_it() -> None:
    """A fork made long ago, or a replay with an end, reads its range from young segments too:
    the LIST of those that end at or before the range's end goes out with the manifest GET."""
    memory = MemoryStore()
    store = Store(memory, root="root", auto_compact=2)
    written(store, "p", 3000)
    store.fork("p", "f", at=1000).append(msg("own"))
    counting = CountingStore(memory)
    reader = Store(counting, root="root")
    assert [m["content"] for m in reader.context("f")] == [*(f"m{i}" for i in range(1000)), "own"]
    assert counting.counts["GET"] < 40  # segments, not a thousand loose events
    counting.reset()
    assert [e.seq for e in reader.replay("p", start=900, end=1100)] == list(range(900, 1101))
    # the non-event objects, the young ones, the page of the loose events the segments cover
    assert counting.counts["GET"] < 10 and counting.counts["LIST"] == 3


@pytest.mark.slow
def test_planted_young_names_cost_requests_never_truth() -> None:
    """An attacker who may create objects plants a forged young segment, then young names that sort
    first and reach furthest: each is read and fails, and the reader falls back to loose events."""
    memory = MemoryStore()
    store = Store(memory, root="root", auto_compact=2)
    written(store, "s", 300)
    layout = store.layout
    counting = CountingStore(memory)
    assert len(Store(counting, root="root").context("s")) == 300
    honest = counting.counts["GET"]  # segments (the listing vouches for them) and the loose tail
    forged = [(seq, msg(f"forged {seq}")["content"].encode()) for seq in range(297, 301)]
    memory.create(layout.young_key("s", 297, 300), pack_segment("s", "not-the-uid", forged))
    counting.reset()
    writer, context = Store(counting, root="root").resume("s")
    assert ("GET", layout.young_key("s", 297, 300)) in counting.keys  # it was read, and passed over
    assert [m["content"] for m in context] == [f"m{i}" for i in range(300)]
    assert writer.append(msg("next")) == 301
    assert counting.counts["GET"] > honest  # it cost its GET, and the loose events it stood for
    for first in range(1, 200):  # each reaches furthest, so the chain starts with one: it fails its check
        memory.create(layout.young_key("s", first, MAX_SEQ - 1), b"evstore-segment\nnot a segment")
    counting.reset()
    writer, context = Store(counting, root="root").resume("s")
    assert [m["content"] for m in context] == [*(f"m{i}" for i in range(300)), "next"]
    assert writer.append(msg("after")) == 302
    assert counting.counts["GET"] > honest + 100  # the loose events, read instead of the true segments


def test_sessions_written_before_young_names_read_the_same() -> None:
    """Lower-level segments under ``segments/`` (as automatic compaction named them before) still serve."""
    memory = MemoryStore()
    written(Store(memory, root="root", auto_compact=2), "s", 300)
    prefix = "root/sessions/s/"
    for info in list(memory.list(prefix + "young/")):
        segment = parse_segment(info.key[len(prefix) :])
        assert segment is not None
        memory.create(Layout("root").segment_key("s", *segment), memory.get(info.key).data)
        memory.delete_many([info.key])
    counting = CountingStore(memory)
    assert [m["content"] for m in Store(counting, root="root").context("s")] == [f"m{i}" for i in range(300)]
    assert counting.counts["LIST"] == 2 and counting.counts["GET"] < 12  # the first page of names vouches, names the tail


def test_info_counts_every_segment_and_rekey_removes_the_young_ones_too() -> None:
    memory = MemoryStore()
    written(Store(NoDeletes(memory), root="root", auto_compact=2), "s", 600)  # retiring none
    prefix = "root/sessions/s/"

    def segments() -> int:
        return sum(1 for info in memory.list(prefix) if parse_segment(info.key[len(prefix) :]) is not None)

    before = segments()
    assert before > 128 and Store(memory, root="root").info("s").segments == before
    encrypted = Store(memory, root="root", keyring=Keyring.from_key(generate_key(), "k1"), auto_compact=None)
    assert encrypted.rekey("s").resealed == 600
    assert segments() == 0  # their bytes are no longer the events': gone, not passed over on every read
    assert [m["content"] for m in encrypted.context("s")] == [f"m{i}" for i in range(600)]


@pytest.mark.slow
def test_a_fork_inside_a_top_level_segment_reads_it_once_its_lower_levels_are_retired() -> None:
    """At 2,048 the top-level segment retired the 256- and 32-event ones inside it, so a fork at
    1,000 has no shorter segment to read its parent's range from: it reads the long one (1,000
    of its 2,048 events wanted), not 1,000 loose events."""
    memory = MemoryStore()
    store = Store(memory, root="root")
    written(store, "p", 3000)
    assert segment_sizes(memory, "root/sessions/p/")["segments"] == {2048}
    store.fork("p", "f", at=1000).append(msg("own"))
    counting = CountingStore(memory)
    assert [m["content"] for m in Store(counting, root="root").context("f")] == [*(f"m{i}" for i in range(1000)), "own"]
    assert counting.counts["GET"] <= 6  # two manifests, the segment, the fork's event, the tombstone checks
    counting.reset()
    assert [e.seq for e in Store(counting, root="root").replay("p", start=2000, end=2040)] == list(range(2000, 2041))
    assert counting.counts["GET"] <= 3  # the manifest and the segment: 41 of its events wanted
