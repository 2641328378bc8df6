"""benchmarks/scale.py (issue #27's yardstick): its backends keep the ObjectStore contracts it relies on,
and its quick run prints every section and writes every figure."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from benchmarks._scale_backend import Copying, FastMemory, Recorder, longest_chain
from evstore import MemoryStore, Store
from evstore._backends import ObjectInfo
from evstore._backends._memory import page_of

REPO = Path(__file__).resolve().parents[1]
SECTIONS = ["resume", "latency", "open", "fork", "storage", "gc", "gc-million", "list", "tail", "async", "import", "fleet-verify"]


def test_memory_store_pages_found_by_bisection_agree_with_a_page_over_all_keys() -> None:
    """MemoryStore finds a page by bisecting its sorted keys (prefix, start-after, delimiter,
    max-keys, deletes and re-creates included): the same page as one over every key it holds."""
    rng = random.Random(27)
    memory = MemoryStore()
    keys = sorted({"".join(rng.choice("ab/c") for _ in range(rng.randint(1, 6))) for _ in range(600)})
    for key in keys:
        memory.create(key, b"x")
    for key in rng.sample(keys, 150):
        memory.delete_many([key])
    for key in rng.sample(keys, 100):
        if not memory.list_page(key, max_keys=1).objects or memory.list_page(key, max_keys=1).objects[0].key != key:
            memory.create(key, b"y")
    held = sorted(info.key for info in memory.list(""))

    def info(key: str) -> ObjectInfo:
        return memory.head(key)

    for _ in range(3000):
        prefix = "".join(rng.choice("ab/c") for _ in range(rng.randint(0, 3)))
        after = "".join(rng.choice("ab/c") for _ in range(rng.randint(0, 5)))
        delimiter, max_keys = rng.choice(["", "/", "c"]), rng.choice([1, 2, 5, 1000])
        pages = [
            memory.list_page(prefix, start_after=after, max_keys=max_keys, delimiter=delimiter),
            page_of(held, info, prefix, after, max_keys, delimiter),
        ]
        shown = [([o.key for o in p.objects], p.prefixes, p.truncated, p.next_start_after) for p in pages]
        assert shown[0] == shown[1], (prefix, after, delimiter, max_keys)


def test_first_rebuilds_a_session_as_it_was() -> None:
    """The first objects in creation order are the session after that many appends: it reads as such."""
    bucket = FastMemory()
    with Store(bucket) as store:
        writer = store.open("s", create=True)
        marks = {}
        for i in range(1, 201):
            writer.append({"role": "user", "content": f"m{i}"})
            marks[i] = bucket.created
    for n in (1, 37, 128, 200):
        with Store(bucket.first(marks[n])) as store:
            assert [m["content"] for m in store.context("s")] == [f"m{i}" for i in range(1, n + 1)]
            assert store.open("s").head == n


def test_longest_chain_tells_overlap_from_waiting() -> None:
    assert longest_chain([]) == 0
    assert longest_chain([(0, 10), (0, 10), (0, 10)]) == 1  # sent together
    assert longest_chain([(0, 10), (10, 20), (20, 30)]) == 3  # each after the one before
    assert longest_chain([(0, 10), (5, 30), (10, 20), (20, 25), (31, 40)]) == 4  # (0,10) (10,20) (20,25) (31,40)


def test_recorder_counts_requests_bytes_and_rounds() -> None:
    recorder = Recorder(MemoryStore(), delay=0.3)  # long enough that 4 threads start within it on a busy machine
    recorder.create("a", b"12345")
    together = threading.Barrier(4)

    def get() -> None:
        together.wait(timeout=30)
        recorder.get("a")

    threads = [threading.Thread(target=get) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    time.sleep(0.001)
    recorder.list_page("")
    counts = recorder.counts()
    assert (counts.kinds["PUT"], counts.kinds["GET"], counts.kinds["LIST"]) == (1, 4, 1)
    assert counts.chain == 3  # the PUT, the GETs together, the LIST
    assert counts.up == 5 and counts.get_bytes == 20 and counts.listed_keys == 1
    assert counts.down == 20 + 300 + 250  # GET bodies + one page's envelope + one key


def test_copying_hands_out_a_new_body_for_each_get() -> None:
    """A peak of Python allocations counts what a read holds only if each GET allocates its body,
    as a read from the network does; the memory store hands out the stored bytes themselves."""
    memory = MemoryStore()
    memory.create("k", b"x" * 100)
    copying = Copying(memory)
    found = copying.get("k")
    assert found.data == b"x" * 100 and found.etag == memory.get("k").etag
    assert found.data is not memory.get("k").data and found.data is not copying.get("k").data


@pytest.mark.slow
def test_quick_run_prints_every_section(tmp_path: Path) -> None:
    figures = tmp_path / "scale.json"
    command = [sys.executable, str(REPO / "benchmarks" / "scale.py"), "--quick", "--json", str(figures)]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    for number, title in [
        ("1.", "resume"),
        ("1b.", "what latency costs a resume"),
        ("2.", "store.open"),
        ("3.", "forks"),
        ("4.", "storage"),
        ("5.", "gc over"),
        ("5b.", "gc over"),
        ("6.", "list_sessions"),
        ("7.", "tail -f"),
        ("8.", "AsyncStore"),
        ("9.", "import"),
        ("10.", "verify --all"),
    ]:
        assert f"## {number} {title}" in done.stdout, (number, done.stdout[-3000:])
    saved = json.loads(figures.read_text())
    assert set(saved["sections"]) == set(SECTIONS)
    for section in saved["sections"].values():
        for table in section["tables"]:
            assert table["rows"] and all(len(row["values"]) == len(table["columns"]) for row in table["rows"])
