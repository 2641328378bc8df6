"""What a Merkle check costs, by session length: ``verify_tree`` (``verify --expect TREEHEAD``) from
the checkpoint objects automatic compaction writes, against the same check from every event
(``--full``), and what the checkpoint objects add to appending.

    python benchmarks/merkle.py [--lengths 300,5000,70000]

For each length: a session of that many events appended with the defaults to a memory store,
then, through a ``Recorder``, the requests (by kind), the dependent round trips and the bytes
downloaded (GET bodies, and LIST responses as ``_scale_backend`` estimates them) of checking a
tree head of 200 events (a block that is not the newest checkpoint's), of the newest checkpoint's
size, and the same with ``full``. Requests are counted, not timed: the figures are the same on
any machine. The append line is PUTs and DELETEs per append over the whole session.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._scale_backend import Recorder
from evstore import MemoryStore, Store


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="300,5000,70000", help="session lengths, comma-separated")
    lengths = [int(n) for n in parser.parse_args().lengths.split(",")]
    print("| events | tree head checked | from | requests | round trips | KB down |")
    print("| ---: | ---: | --- | --- | ---: | ---: |")
    appends: list[str] = []
    for length in lengths:
        recorder = Recorder(MemoryStore())
        store = Store(recorder, root="r")
        writer = store.open("s", create=True)
        recorder.reset()
        for i in range(length):
            writer.append({"role": "user", "content": f"message {i}"})
        written = recorder.counts()
        puts, deletes = written.kinds["PUT"] / length, written.kinds["DELETE"] / length
        appends.append(
            f"{length:,} appends: {puts:.4f} PUTs and {deletes:.4f} DELETEs per append ({written.total / length:.4f} requests)"
        )
        newest = store.tree_head("s", checkpoint=True).size
        recorder.delay = 0.02  # requests sent together overlap: the round trips can be told apart
        for size in (200, newest):
            expected = store.tree_head("s", size=size)
            for full in (False, True):
                recorder.reset()
                check = store.verify_tree("s", expected, full=full)
                counts = recorder.counts()
                kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.kinds.items()))
                source = f"checkpoint of {check.tree_head.size:,}" if check.stored else "every event"
                print(f"| {length:,} | {size:,} | {source} | {kinds} | {counts.chain} | {counts.down / 1024:.1f} |")
    for line in appends:
        print(line)


if __name__ == "__main__":
    main()
