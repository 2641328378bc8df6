"""Section 6: list_sessions() on a LocalStore and a MemoryStore: a page costs the same however many sessions."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks._tables import Report, Table, at_most, label
from benchmarks.studies.scale.setup import Config, measured, ms, short
from evstore import LocalStore, MemoryStore, ObjectStore, Store
from evstore._backends._local import SETTLE_SECONDS


def section_list(cfg: Config, report: Report) -> None:
    template = MemoryStore()
    with Store(template) as store:
        store.create("tmpl").append(short(1))
    objects = [(info.key.removeprefix("sessions/tmpl/"), template.get(info.key)) for info in template.list("sessions/tmpl/")]
    shm = Path("/dev/shm")
    scratch = tempfile.mkdtemp(prefix="evstore-scale-", dir=shm if shm.is_dir() and os.access(shm, os.W_OK) else None)
    local = (f"LocalStore in {Path(scratch).parent}", LocalStore(scratch))
    backends: list[tuple[str, ObjectStore]] = [local, ("MemoryStore", MemoryStore())]
    try:
        for name, backend in backends:
            made, setup = 0, 0.0
            all_pages, first_page, fresh_page, lists, per_page_requests = [], [], [], [], []
            for n in cfg.list_sizes:
                started = time.perf_counter()
                for i in range(made, n):
                    for suffix, obj in objects:
                        backend.create(f"sessions/s{i:07d}/{suffix}", obj.data, metadata=obj.metadata)
                made = n
                changed = time.perf_counter()
                setup += changed - started
                if isinstance(backend, LocalStore):
                    # just after a change the directory is read whole for each page; once it has stood
                    # still SETTLE_SECONDS its index is trusted (evstore/_backends/_local.py)
                    fresh, fresh_seconds, _ = measured(backend, 0.0, lambda store: list(store.list_sessions(limit=1000)))
                    fresh_page.append(ms(fresh_seconds) / max(1, fresh.kinds["LIST"]))
                    time.sleep(max(0.0, SETTLE_SECONDS + 0.1 - (time.perf_counter() - changed)))
                counts, seconds, ids = measured(backend, 0.0, lambda store: list(store.list_sessions()))
                if len(ids) != n:
                    raise RuntimeError(f"list_sessions gave {len(ids)} ids, not {n}")
                first, first_seconds, _ = measured(backend, 0.0, lambda store: list(store.list_sessions(limit=1000)))
                pages = (n + 999) // 1000
                lists.append(counts.kinds["LIST"])
                per_page_requests.append(counts.total / pages)
                all_pages.append(ms(seconds) / counts.kinds["LIST"])
                first_page.append(ms(first_seconds) / max(1, first.kinds["LIST"]))
            growth = [x / first_page[0] for x in first_page]
            size_growth = cfg.list_sizes[-1] / cfg.list_sizes[0]
            table = Table(
                f"6. list_sessions() on {name}, sessions of 2 objects (manifest + 1 event)",
                [label(n) for n in cfg.list_sizes],
                [
                    f"O(page): a page costs about the same at {size_growth:.0f}x the sessions (within 3x); setup {setup:.1f} s"
                    + (
                        f"; pages read after the directory stood still {SETTLE_SECONDS:g} s (until then a page reads it whole)"
                        if fresh_page
                        else ""
                    )
                ],
            )
            table.row("LIST requests, all ids", lists)
            if fresh_page:
                table.row(f"ms, first page within {SETTLE_SECONDS:g} s of a change", fresh_page)
            table.row("requests per page of 1,000", per_page_requests, "1", [x == 1 for x in per_page_requests])
            table.row("ms per page, all pages", all_pages)
            table.row("ms, first page alone", first_page)
            table.row("first page, x the smallest's", growth, "O(page): <= 3x", at_most(growth, 3))
            report.add("list", table)
    finally:
        for _, backend in backends:
            backend.close()
        subprocess.run(["rm", "-rf", scratch], check=False)
