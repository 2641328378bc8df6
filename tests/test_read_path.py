"""The read path's cheaper forms do what the plain ones did: canonical base64 without
re-encoding, a LocalStore listing that holds one page of names, the loose tail's GETs sent
without waiting for a segment to be decoded (and never twice), context folded without
building ``Event`` objects."""

from __future__ import annotations

import base64
import os
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evstore import Keyring, LocalStore, MemoryStore, Store, _read, _write
from evstore._backends import KeysPage, ListPage, ObjectStore, StoredObject
from evstore._codec import b64decode_canonical, decode_envelope
from evstore._ids import parse_seq
from evstore._read import _segments, _vouching

from .helpers import CountingStore, msg

# ---- canonical base64 ---------------------------------------------------------------------


def _reference(text: str) -> bytes | None:
    """The definition: the bytes whose base64 is exactly ``text``."""
    try:
        data = base64.b64decode(text.encode("ascii"), validate=True)
    except ValueError:
        return None
    return data if base64.b64encode(data).decode("ascii") == text else None


_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(
    st.binary(max_size=40),
    st.lists(st.tuples(st.integers(0, 2), st.integers(0, 80), st.sampled_from(_ALPHABET + "=\n -_é")), max_size=3),
)
def test_canonical_base64_accepts_exactly_what_re_encodes_to_itself(data: bytes, edits: list[tuple[int, int, str]]) -> None:
    text = base64.b64encode(data).decode("ascii")
    for kind, where, char in edits:
        where = min(where, len(text))
        if kind == 0:
            text = text[:where] + char + text[where:]
        elif kind == 1:
            text = text[:where] + text[where + 1 :]
        else:
            text = text[:where] + char + text[where + 1 :]
    assert b64decode_canonical(text) == _reference(text)


@pytest.mark.parametrize("text", ["QR==", "QUJ=", "QQ", "QQ=", "Q===", "=QQ=", "QQ==QQ==", " QQ==", "QQ==\n", "QQ==é"])
def test_non_canonical_or_invalid_base64_is_refused(text: str) -> None:
    assert b64decode_canonical(text) is None


def test_canonical_base64_round_trips() -> None:
    for n in range(10):
        data = bytes(range(n))
        assert b64decode_canonical(base64.b64encode(data).decode()) == data


# ---- a listed ETag's content MD5 -----------------------------------------------------------------


def _md5_reference(etag: str) -> str:
    """The definition: 32 lowercase hex digits once the quotes are off and the case folded, else none."""
    digest = etag.strip('"').lower()
    return digest if len(digest) == 32 and all(c in "0123456789abcdef" for c in digest) else ""


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet='"0123456789abcdefABCDEFgG-İ ', max_size=36))
def test_content_md5_is_the_definition(etag: str) -> None:
    assert _vouching._content_md5(etag) == _md5_reference(etag)


@pytest.mark.parametrize(
    ("etag", "md5"),
    [
        ('"0123456789ABCDEF0123456789abcdef"', "0123456789abcdef0123456789abcdef"),
        ('"0123456789abcdef0123456789abcdef-2"', ""),  # multipart: no MD5 of the bytes
        ('"0123456789abcdef0123456789abcdeg"', ""),
        ('"0123456789abcdef 123456789abcdef"', ""),
        ("", ""),
    ],
)
def test_content_md5_of_listed_etags(etag: str, md5: str) -> None:
    assert _vouching._content_md5(etag) == md5


# ---- LocalStore listing ----------------------------------------------------------------------

_NAMES = st.sampled_from(["a", "b", "ab", "a-", "a.b", "0001", "0002", "0010", "manifest", "segments", "z~"])
_KEYS = st.lists(st.lists(_NAMES, min_size=1, max_size=3).map("/".join), min_size=0, max_size=25, unique=True).filter(
    lambda keys: not any(other.startswith(key + "/") for key in keys for other in keys)
)  # no key is also a directory
_POINTS = st.sampled_from(["", "a", "a/", "a/b", "ab", "b/", "b/0001", "segments/", "a-", "0002", "zz"])


def _pages(backend: ObjectStore, prefix: str, start_after: str, max_keys: int, delimiter: str) -> list[ListPage]:
    pages = []
    while True:
        page = backend.list_page(prefix, start_after=start_after, max_keys=max_keys, delimiter=delimiter)
        pages.append(page)
        if not page.truncated:
            return pages
        start_after = page.next_start_after


@pytest.mark.slow
@settings(max_examples=120, deadline=None)
@given(_KEYS, _POINTS, _POINTS, st.integers(1, 4), st.sampled_from(["", "/"]))
def test_local_listing_pages_are_those_of_the_memory_store(
    tmp_path_factory: pytest.TempPathFactory, keys: list[str], prefix: str, start_after: str, max_keys: int, delimiter: str
) -> None:
    local = LocalStore(tmp_path_factory.mktemp("listing"))
    memory = MemoryStore()
    for key in keys:
        local.create(key, b"x" * len(key))
        memory.create(key, b"x" * len(key))
    got = _pages(local, prefix, start_after, max_keys, delimiter)
    want = _pages(memory, prefix, start_after, max_keys, delimiter)
    assert [([o.key for o in p.objects], p.prefixes, p.truncated, p.next_start_after) for p in got] == [
        ([o.key for o in p.objects], p.prefixes, p.truncated, p.next_start_after) for p in want
    ]
    assert [o.size for p in got for o in p.objects] == [len(o.key) for p in got for o in p.objects]
    assert [o.key for o in local.list(prefix, start_after=start_after)] == [
        o.key for o in memory.list(prefix, start_after=start_after)
    ]


@pytest.mark.slow
def test_a_large_session_directory_lists_in_pages_from_any_point(tmp_path: Path) -> None:
    local = LocalStore(tmp_path)
    names = [f"{seq:020d}" for seq in range(1, 2101)]
    for name in reversed(names):
        local.create(f"sessions/s/{name}", b"e")
    local.create("sessions/s/manifest", b"m")
    local.create("sessions/s/segments/00000000000000000001-00000000000000000002", b"g")
    pages = _pages(local, "sessions/s/", f"sessions/s/{names[99]}", 1000, "")
    listed = [o.key[len("sessions/s/") :] for p in pages for o in p.objects]
    assert listed == [*names[100:], "manifest", "segments/00000000000000000001-00000000000000000002"]
    assert [len(p.objects) for p in pages] == [1000, 1000, 2]
    assert [o.key for o in local.list("sessions/s/", start_after="sessions/s/manifest")] == [
        "sessions/s/segments/00000000000000000001-00000000000000000002"
    ]


# ---- the loose tail does not wait for segments ----------------------------------------------


class _HeldSegments(CountingStore):
    """Holds every segment GET until a GET of ``released_by`` has been sent (or ``wait`` seconds
    pass, and the segment is then read all the same)."""

    def __init__(self, inner: ObjectStore, released_by: str, wait: float) -> None:
        super().__init__(inner)
        self.released_by = released_by
        self.wait = wait
        self.released = threading.Event()
        self.held: list[bool] = []

    def get(self, key: str, *, max_bytes: int | None = None) -> StoredObject:
        if key.endswith(self.released_by):
            self.released.set()
        if "/segments/" in key:
            self.held.append(not self.released.wait(self.wait))
        return super().get(key, max_bytes=max_bytes)


def test_the_tail_events_are_fetched_while_the_segments_are_still_being_read() -> None:
    memory = MemoryStore()
    writer = Store(memory, auto_compact=None).open("s", create=True)
    for i in range(20):
        writer.append(msg(f"m{i}"))
    Store(memory).compact("s", segment_size=16)  # one segment (1-16), a loose tail of 4
    held = _HeldSegments(memory, "/00000000000000000020", wait=30)
    assert [m["content"] for m in Store(held).context("s")] == [f"m{i}" for i in range(20)]
    assert held.held == [False]  # the last tail event's GET was sent while the segment GET waited


def test_every_event_is_read_once_when_its_segments_hold_and_loose_when_one_fails() -> None:
    memory = MemoryStore()
    writer = Store(memory, auto_compact=None).open("s", create=True)
    for i in range(40):
        writer.append(msg(f"m{i}"))
    store = Store(memory)
    store.compact("s", segment_size=16)  # segments 1-16 and 17-32, a tail of 8
    counting = CountingStore(memory)
    reader = Store(counting)
    assert len(reader.context("s")) == 40
    gets = [key.rsplit("/", 1)[-1] for kind, key in counting.keys if kind == "GET"]
    assert sorted(gets) == sorted(set(gets))  # nothing read twice
    # manifest, the two segments, the tail; the non-event objects, and the first page of the
    # session's names, listed with the manifest: its ETags vouch for both segments, and it names the tail
    assert counting.counts == {"GET": 1 + 2 + 8, "LIST": 2}
    # a segment that fails its check: its group is passed over, and the loose events from the
    # group's first seq are read instead; the tail's GETs sent early (33..40) are the ones used
    memory.delete_many([store.layout.segment_key("s", 17, 32)])
    memory.create(store.layout.segment_key("s", 17, 32), b"evstore-segment\nnot a segment")
    counting.reset()
    assert [m["content"] for m in reader.context("s")] == [f"m{i}" for i in range(40)]
    gets = [key.rsplit("/", 1)[-1] for kind, key in counting.keys if kind == "GET"]
    # the loose events from the group's first seq, named by that same first page: no LIST more
    assert counting.counts == {"GET": 1 + 2 + 40, "LIST": 2}
    assert sorted(int(g) for g in gets if g.isdigit()) == list(range(1, 41))  # each loose event once


def test_overlapping_segments_of_one_group_are_used_when_they_agree_where_they_overlap() -> None:
    memory = MemoryStore()
    store = Store(memory, auto_compact=None)
    writer = store.open("s", create=True)
    for i in range(14):
        writer.append(msg(f"m{i}"))
    assert store.compact("s", segment_size=4) == [(1, 4), (5, 8), (9, 12)]
    loaded = _read.load(store.shared, "s")
    events = [(raw.seq, raw.data) for raw in _read.own_raw(store.shared, loaded, 1, None)]
    _write._write_segment(store.shared, loaded.manifest, events[2:10])  # 3-10: reaches furthest from 5
    counting = CountingStore(memory)
    reader = Store(counting)
    assert [m["content"] for m in reader.context("s")] == [f"m{i}" for i in range(14)]
    # the chain 1-4, 3-10, 9-12 is one group, vouched by the first page of the session's names (listed
    # with the manifest), which also names the tail of 2
    segments = sorted(key.rsplit("/", 1)[-1] for kind, key in counting.keys if kind == "GET" and "/segments/" in key)
    assert [tuple(int(seq) for seq in name.split("-")) for name in segments] == [(1, 4), (3, 10), (9, 12)]
    assert counting.counts == {"GET": 1 + 3 + 2, "LIST": 2}


def test_a_group_of_segments_holds_no_more_than_its_byte_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    memory = MemoryStore()
    writer = Store(memory, auto_compact=None).open("s", create=True)
    for i in range(40):
        writer.append(msg(f"m{i}"))
    store = Store(memory)
    assert store.compact("s", segment_size=8) == [(1, 8), (9, 16), (17, 24), (25, 32), (33, 40)]
    sizes = {info.size for info in memory.list("") if "/segments/" in info.key}
    expanded = [size * _segments._EXPANSION for size in sizes]  # what a read counts each to hold, decompressed
    monkeypatch.setattr(_segments, "_GROUP_BYTES", 2 * max(expanded) + min(expanded) // 2)  # two segments, not three
    counting = CountingStore(memory)
    assert [m["content"] for m in Store(counting).context("s")] == [f"m{i}" for i in range(40)]
    # the five segments; the non-event objects, and one page listing the 40 loose events (and the
    # session's other names: no tail), listed with the manifest
    assert counting.counts == {"GET": 1 + 5, "LIST": 2}
    # the groups are 1-16, 17-32, 33-40: a segment that fails its check passes over its group only
    memory.delete_many([store.layout.segment_key("s", 25, 32)])
    memory.create(store.layout.segment_key("s", 25, 32), b"evstore-segment\nnot a segment")
    counting.reset()
    assert [m["content"] for m in Store(counting).context("s")] == [f"m{i}" for i in range(40)]
    names = [key.rsplit("/", 1)[-1] for kind, key in counting.keys if kind == "GET" and "/segments/" not in key]
    assert sorted(int(name) for name in names if name.isdigit()) == list(range(17, 41))


def test_prefetching_keeps_the_weight_in_flight_within_its_budget() -> None:
    weights = [10, 10, 10, 50, 10, 10, 0, 0, 30, 10]
    in_flight: list[int] = []
    sent: list[int] = []

    def early(index: int) -> None:  # called as each fetch is about to be sent
        in_flight.append(sum(weights[i] for i in sent))
        sent.append(index)

    fetched = Store(MemoryStore()).shared.prefetched(
        range(len(weights)), lambda i: i * i, 100, early=early, weight=weights.__getitem__, budget=25
    )
    for index, result in fetched:
        assert (index, result) == (sent.pop(0), index * index)
    assert in_flight == [0, 10, 20, 20, 0, 10, 20, 20, 20, 0]  # never more than 25 when the next one goes


def test_replay_and_context_agree_event_for_event_across_segments_and_forks() -> None:
    memory = MemoryStore()
    store = Store(memory)
    writer = store.open("p", create=True)
    for i in range(70):
        writer.append(msg(f"p{i}"))
    store.compact("p", segment_size=25)
    fork = store.fork("p", "f", at=60)
    for i in range(5):
        fork.append(msg(f"f{i}"))
    events = list(store.replay("f"))
    assert [e.seq for e in events] == list(range(1, 66))
    contents = [m["content"] for e in events for m in e.messages]
    assert contents == [m["content"] for m in store.context("f")] == [f"p{i}" for i in range(60)] + [f"f{i}" for i in range(5)]
    assert [e.seq for e in store.replay("p", start=20, end=55)] == list(range(20, 56))


# ---- segment events are the loose events -------------------------------------------------------


@pytest.mark.parametrize("encrypted", [False, True])
def test_events_read_from_segments_equal_those_read_loose(encrypted: bool) -> None:
    memory = MemoryStore()
    keyring = Keyring({"k": os.urandom(32)}, "k") if encrypted else None
    writer = Store(memory, keyring=keyring, auto_compact=None).open("s", create=True)
    for i in range(40):
        writer.append(msg(f"m{i}"), idempotency_key=f"key-{i}")  # a header field that a sealed body's tag covers
    loose = list(Store(memory, keyring=keyring).replay("s"))
    store = Store(memory, keyring=keyring)
    assert store.compact("s", segment_size=16) == [(1, 16), (17, 32)]
    counting = CountingStore(memory)
    from_segments = list(Store(counting, keyring=keyring).replay("s"))
    assert counting.counts["GET"] == 1 + 2 + 8  # the manifest, two segments, a tail of 8
    assert from_segments == loose
    assert [m["content"] for e in from_segments for m in e.messages] == [f"m{i}" for i in range(40)]
    ctx = store.shared
    loaded = _read.load(ctx, "s")
    for raw in _read.own_raw(ctx, loaded, 1, None):
        assert raw.envelope == decode_envelope(raw.data, "s", raw.seq)
        assert raw.envelope.idem == f"key-{raw.seq - 1}"


def test_ready_threads_starts_the_threads_a_burst_needs_once_within_the_pools_sizes() -> None:
    context = Store(MemoryStore(), concurrency=8).shared
    context.ready_threads(5)  # fewer than 8 missing: they start with their requests, as a pool does
    assert len(context.executor()._threads) == 0
    context.ready_threads(12, 40)
    assert (len(context.executor()._threads), len(context.wide_executor()._threads)) == (12, 40)
    context.ready_threads(13, 10)  # as many, or nearly, there already: none started
    assert (len(context.executor()._threads), len(context.wide_executor()._threads)) == (12, 40)
    context.ready_threads(100, 100)
    assert len(context.wide_executor()._threads) == 64  # 8 x concurrency at most
    assert len(context.executor()._threads) == 12  # 16 at most: 4 missing start with their requests


_PAGE_NAME = st.one_of(
    st.integers(min_value=0, max_value=10**20 - 1).map(lambda seq: f"{seq:020d}"),
    st.sampled_from(["manifest", "segments/1-8", "1", "0" * 21, "0000000000000000001\u0661", "+0000000000000000001"]),
)
_PAGE_ETAG = st.one_of(
    st.text(alphabet="0123456789abcdefABCDEF", min_size=32, max_size=32).map(lambda md5: f'"{md5}"'),
    st.sampled_from(['"0123456789abcdef0123456789abcdef-2"', "", "0123456789abcdef0123456789abcdef", '""', '"a"b"']),
)


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(st.lists(st.tuples(_PAGE_NAME, _PAGE_ETAG), max_size=8), st.booleans())
def test_a_pages_md5s_read_at_once_are_those_read_key_by_key(entries: list[tuple[str, str]], plain: bool) -> None:
    """A page of events with plain MD5 ETags is read in a few passes over it all; every page
    gives what ``parse_seq`` and ``_content_md5`` give key by key."""
    if plain:  # the common page, which the passes over it all read
        entries = [(f"{i:020d}", f'"{i:032x}"') for i in range(len(entries))]
    prefix = "r/sessions/s/"
    keys, etags = [prefix + name for name, _ in entries], [etag for _, etag in entries]
    expected = {}
    for name, etag in entries:
        if (seq := parse_seq(name)) is not None:
            expected[seq] = _vouching._content_md5(etag)
    assert _vouching._md5s_by_seq(prefix, KeysPage(keys, etags, False)) == expected
