"""Section 1, resume: Store.resume(id) + one append at each length: requests, round trips, bytes, where the time goes,
peak memory."""

from __future__ import annotations

import time

from benchmarks._scale_backend import Copying, FastMemory, Recorder
from benchmarks._tables import Report, Table, at_most, label
from benchmarks.studies.scale.setup import MAKERS, SID, Bulk, Config, mb, ms, traced_peak
from evstore import Store


def section_resume(cfg: Config, bulk: Bulk, report: Report) -> None:
    for kind, sizes in (("short", cfg.resume_short), ("1KiB", cfg.resume_kib)):
        columns = [label(n) for n in sizes]
        by_kind, totals, rounds, rounds_all, down, wall, ctx_mb, res_mb, ratio = ([] for _ in range(9))
        resume_ms, own_cpu, waited, all_cpu = ([] for _ in range(4))
        for n in sizes:
            recorder = Recorder(bulk.session(kind, n), cfg.rtt)
            with Store(recorder) as store:
                started, cpu_at, thread_cpu_at = time.perf_counter(), time.process_time(), time.thread_time()
                writer, context = store.resume(SID)
                resumed, cpu, thread_cpu = (
                    time.perf_counter() - started,
                    time.process_time() - cpu_at,
                    time.thread_time() - thread_cpu_at,
                )
                alone = recorder.counts()
                writer.append(MAKERS[kind](n + 1))
                seconds = time.perf_counter() - started
            if len(context) != n:
                raise RuntimeError(f"resume of {n} events returned a context of {len(context)} messages")
            both = recorder.counts()
            del writer, context
            bucket = bulk.session(kind, n)

            def context_only(bucket: FastMemory = bucket) -> object:
                with Store(Copying(bucket)) as store:
                    return store.context(SID)

            def resume_only(bucket: FastMemory = bucket) -> object:
                with Store(Copying(bucket)) as store:
                    return store.resume(SID)

            peak_context, peak_resume = traced_peak(context_only), traced_peak(resume_only)
            by_kind.append(both.by_kind())
            totals.append(both.total)
            rounds.append(alone.chain)
            rounds_all.append(both.chain)
            down.append(mb(both.down))
            wall.append(ms(seconds))
            resume_ms.append(ms(resumed))
            own_cpu.append(ms(thread_cpu))
            waited.append(ms(resumed - thread_cpu))
            all_cpu.append(ms(cpu))
            ctx_mb.append(mb(peak_context))
            res_mb.append(mb(peak_resume))
            ratio.append(peak_resume / peak_context)
        table = Table(
            f"1. resume: Store.resume(id) + one append, {kind} messages (default settings)",
            columns,
            [
                f"{ms(cfg.rtt):.0f} ms per request; peak memory: tracemalloc peak in this process (Python allocations),",
                "each GET's body a copy, as a read from the network allocates it",
                "resuming thread not running: the resume's wall time less that thread's CPU (waiting on answers,",
                "or for the GIL while the pool's threads read theirs)",
            ],
        )
        table.row("requests PUT/GET/HEAD/LIST/DELETE", by_kind)
        table.row("requests, resume + append", totals)
        table.row("round trips, resume", rounds)
        # issue 27 counts Store.resume and the append together
        table.row("round trips, resume + append", rounds_all, "<= 4", at_most(rounds_all, 4))
        table.row("MB downloaded", down)
        table.row("ms, resume + append (wall)", wall)
        # where a resume's time goes: a long chain of requests with little waiting is requests sent
        # as the decoding went on (each within the window), not the reader waiting on answers
        table.row("ms, resume alone (wall)", resume_ms)
        table.row("ms CPU, resuming thread", own_cpu)
        table.row("ms resuming thread not running", waited)
        table.row("ms CPU, process (every thread)", all_cpu)
        table.row("peak MB, context() alone", ctx_mb)
        table.row("peak MB, resume()", res_mb)
        table.row("peak, resume / context", ratio, "<= 1.3x", at_most(ratio, 1.3))
        report.add("resume", table)
