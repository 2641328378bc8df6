"""Segments are stored as zstd frames of their packed bytes; a reader takes old (uncompressed)
and new segments alike, and a planted frame can make it allocate no more than a segment's
limit: it is passed over and the loose events answer."""

from __future__ import annotations

import tracemalloc

import msgspec
import zstandard

from evstore import MemoryStore, Store
from evstore._backends import StoredObject
from evstore._codec import MAX_SEGMENT_BYTES, compress_segment, expand_segment, pack_segment

from .helpers import CountingStore, msg


def transcript(i: int) -> dict[str, object]:
    return msg(f"turn {i}: the user asks about the build, and the agent answers with the steps it ran " * 8)


def objects(backend: MemoryStore, sid: str) -> dict[str, bytes]:
    """Every object of the session, by its name under the session's prefix."""
    prefix = f"sessions/{sid}/"
    found: dict[str, bytes] = {}
    after = ""
    while True:
        page = backend.list_page(prefix, start_after=after)
        found |= {info.key[len(prefix) :]: backend.get(info.key).data for info in page.objects}
        if not page.truncated:
            return found
        after = page.objects[-1].key


def test_segments_are_stored_compressed_and_read_back_exactly() -> None:
    backend = MemoryStore()
    store = Store(backend)
    writer = store.open("s", create=True)
    for i in range(256):
        writer.append(transcript(i))
    stored = objects(backend, "s")
    segments = {name: data for name, data in stored.items() if name.startswith(("segments/", "young/"))}
    loose = sum(len(data) for name, data in stored.items() if name.isdigit())
    assert segments and all(data.startswith(b"\x28\xb5\x2f\xfd") for data in segments.values())
    assert sum(len(data) for data in segments.values()) < loose / 2  # these messages compress well
    counting = CountingStore(backend)
    events = list(Store(counting).replay("s"))
    assert [e.messages[0]["content"] for e in events] == [transcript(i)["content"] for i in range(256)]
    assert counting.counts["GET"] < 10  # from the segments, not 256 loose GETs


def test_an_uncompressed_segment_written_before_compression_still_serves() -> None:
    backend = MemoryStore()
    store = Store(backend, auto_compact=None)
    writer = store.open("s", create=True)
    for i in range(40):
        writer.append(transcript(i))
    prefix = "sessions/s/"
    run = [(seq, backend.get(f"{prefix}{seq:020d}").data) for seq in range(1, 41)]
    uid = msgspec.json.decode(run[0][1])["uid"]
    backend.create(f"{prefix}segments/{1:020d}-{40:020d}", pack_segment("s", uid, run))
    counting = CountingStore(backend)
    assert len(list(Store(counting).replay("s"))) == 40
    assert counting.counts["GET"] == 2  # the manifest and the segment


def test_expand_refuses_frames_that_would_decompress_past_the_limit() -> None:
    bomb = zstandard.ZstdCompressor().compress(b"\0" * (MAX_SEGMENT_BYTES + 1))
    assert len(bomb) < 10_000 and expand_segment(bomb, MAX_SEGMENT_BYTES) is None
    unsized = zstandard.ZstdCompressor(write_content_size=False).compress(b"\0" * 5000)
    assert expand_segment(unsized, 4096) is None  # no stated size: bounded while it decompresses
    assert expand_segment(unsized, 5000) == b"\0" * 5000
    assert expand_segment(b"\x28\xb5\x2f\xfd junk", MAX_SEGMENT_BYTES) is None
    packed = pack_segment("s", "u", [(1, b"{}")])
    assert expand_segment(compress_segment(packed), MAX_SEGMENT_BYTES) == packed
    assert expand_segment(packed, MAX_SEGMENT_BYTES) == packed


def test_a_planted_bomb_in_place_of_a_segment_is_passed_over() -> None:
    backend = MemoryStore()
    store = Store(backend, auto_compact=None)
    writer = store.open("s", create=True)
    for i in range(40):
        writer.append(transcript(i))
    bomb = zstandard.ZstdCompressor().compress(b"\0" * (MAX_SEGMENT_BYTES + 1))
    backend.create(f"sessions/s/segments/{1:020d}-{40:020d}", bomb)
    counting = CountingStore(backend)
    tracemalloc.start()
    try:
        replayed = [e.messages[0]["content"] for e in Store(counting).replay("s")]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert replayed == [transcript(i)["content"] for i in range(40)]
    assert ("GET", f"sessions/s/segments/{1:020d}-{40:020d}") in counting.keys  # it was read, and refused
    assert peak < MAX_SEGMENT_BYTES // 4  # never decompressed: its 64 MiB were never held


def test_a_reader_racing_a_retirement_reads_the_loose_events_instead() -> None:
    """A segment listed, then retired by its writer before the reader's GET: the GET finds it
    missing and the reader takes those events loose; the same history."""
    memory = MemoryStore()
    store = Store(memory)
    writer = store.open("s", create=True)
    for i in range(250):  # young segments of 32 events up to 224, none retired yet
        writer.append(transcript(i))

    class RetiredMeanwhile(CountingStore):
        def get(self, key: str, *, max_bytes: int | None = None) -> StoredObject:
            if "/young/" in key:
                self.inner.delete_many([key])
            return super().get(key, max_bytes=max_bytes)

    racing = RetiredMeanwhile(memory)
    assert [e.messages[0]["content"] for e in Store(racing).replay("s")] == [transcript(i)["content"] for i in range(250)]
    assert racing.counts["GET"] > 200  # the loose events, read instead
