"""The tables of ``benchmarks/resume.py``, from a run's figures or from an earlier run's ``--json`` file:
resume per size and delay, append per delay and size, and the figures issues 16 and 28 set targets for."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from benchmarks._harness import median
from benchmarks.studies.resume.plan import (
    BIG,
    FEW_REQUESTS,
    HALF_FROM,
    PER_MESSAGE,
    PER_MESSAGE_UP_TO,
    VARIANTS,
    Plan,
    Sample,
    fmt_ms,
    spread,
)


@dataclass
class Figures:
    """What a run measured: resume samples by (variant, messages, delay in ms), append figures by
    (messages, delay in ms), and the amortized requests per append (appends, requests per append)."""

    plan: Plan
    has_resume: bool
    samples: dict[tuple[str, int, float], list[Sample]] = field(default_factory=dict)
    appends: dict[tuple[int, float], dict[str, Any]] = field(default_factory=dict)
    amortized: tuple[int, float] | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Figures:
        """The figures of an earlier run (its --json file)."""
        plan = data["plan"]
        figures = cls(
            Plan(
                sizes=tuple(plan["sizes"]),
                delays_ms=tuple(plan["delays_ms"]),
                rounds=plan["rounds"],
                big_rounds=plan["big_rounds"],
                append_rounds=plan["append_rounds"],
                amortized_appends=plan.get("amortized_appends", 0),
                few_request_rounds=plan.get("few_request_rounds", 0),
                pinned=plan.get("pinned", False),
            ),
            bool(data["has_resume"]),
        )
        figures.samples = {
            (r["variant"], r["messages"], r["delay_ms"]): [Sample(**s) for s in r["samples"]] for r in data["resume"]
        }
        figures.appends = {(a["messages"], a["delay_ms"]): a for a in data["append"]}
        amortized = data.get("amortized")
        figures.amortized = (int(amortized[0]), float(amortized[1])) if amortized else None
        return figures

    def as_json(self) -> dict[str, Any]:
        """What ``from_json`` reads back."""
        return {
            "has_resume": self.has_resume,
            "plan": asdict(self.plan),
            "resume": [
                {"variant": v, "messages": n, "delay_ms": d, "samples": [asdict(s) for s in ss]}
                for (v, n, d), ss in self.samples.items()
            ],
            "append": [{"messages": n, "delay_ms": d, **a} for (n, d), a in self.appends.items()],
            "amortized": self.amortized,
        }

    def label(self, variant: str) -> str:
        call = "`resume()`" if self.has_resume else "`open()` + `context()`"
        return {
            "evstore-defaults": f"evstore, defaults ({call})",
            "evstore-compacted": "evstore after `compact` (`open()` + `context()`)",
            "evstore-uncompacted": "evstore, uncompacted (`open()` + `context()`)",
            "strands-s3": "Strands `S3SessionManager`",
            "strands-snapshot": "Strands `SnapshotSessionManager`",
        }[variant]

    def report(self) -> str:
        """The resume table and its notes, the append table and its note, and the targets."""
        return "\n".join([*self.resume_table(), "", *self.resume_notes(), "", *self.append_table(), "", self.targets()])

    def resume_table(self) -> list[str]:
        """A row per size and variant measured at every delay."""
        delays = self.plan.delays_ms
        head = ["messages", "variant", "requests", "dependent round trips"]
        for d in delays:
            head += [f"time @ {d:g} ms", f"÷ {d:g} ms"]
        head += [
            "not latency: time - dependent x delay @ " + " / ".join(f"{d:g}" for d in delays) + " ms",
            "client CPU",
            "server + proxy CPU",
        ]
        lines = ["### Resume: a fresh process opens the session, gets its context, appends one message", ""]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for n in self.plan.sizes:
            for variant in VARIANTS:
                got = {d: self.samples.get((variant, n, d), []) for d in delays}
                if all(got.values()):
                    lines.append("| " + " | ".join(self.resume_row(n, variant, got)) + " |")
        return lines

    def resume_row(self, n: int, variant: str, got: dict[float, list[Sample]]) -> list[str]:
        """One variant at ``n`` messages, from its samples at each delay."""
        delays = self.plan.delays_ms
        every = [s for d in delays for s in got[d]]
        row = [f"{n:,}", self.label(variant), spread([s.requests for s in every]), spread([s.depth for s in every])]
        med = {d: median(s.seconds for s in got[d]) for d in delays}
        for d in delays:
            row += [fmt_ms(med[d]), f"{med[d] / (d / 1000):,.1f}"]
        rest = [median(s.seconds - s.depth * d / 1000 for s in got[d]) for d in delays]
        return [
            *row,
            " / ".join(fmt_ms(r) for r in rest),
            fmt_ms(median(s.cpu for s in every)),
            fmt_ms(median(s.server_cpu for s in every)) if any(s.server_cpu for s in every) else "not measured",
        ]

    def resume_notes(self) -> list[str]:
        """How the resume table was measured, and the variants not run at the largest sizes."""
        rounds = f"{self.plan.rounds} round(s)" + (
            f" ({self.plan.big_rounds} at {BIG:,} and more)" if any(n >= BIG for n in self.plan.sizes) else ""
        )
        if self.plan.few_request_rounds > min(self.plan.rounds, self.plan.big_rounds):
            rounds += f", and of {self.plan.few_request_rounds} at every size for {', '.join(map(self.label, FEW_REQUESTS))}"
        lines = [
            f"Median of {rounds} per cell, variants interleaved in alternating order. Requests and dependent round trips "
            "are counted by the proxy (a single figure when every round agreed, else the range); each run meets the same "
            "N messages (the session is put back after each). Not latency: the median over rounds of each run's time "
            "less its dependent round trips times the delay, i.e. the client's CPU, the server's own time and the "
            "transfer. Client CPU: the resuming process, all threads. Server + proxy CPU: what the server's processes "
            "and the proxy ran meanwhile, "
            + (
                "on cores other than the client's (--pin)."
                if self.plan.pinned
                else "on the same cores as the client (without --pin)."
            )
        ]
        if any(n > PER_MESSAGE_UP_TO for n in self.plan.sizes):
            lines.append("")
            lines.append(
                f"Not run past {PER_MESSAGE_UP_TO:,} messages: {' and '.join(map(self.label, PER_MESSAGE))}, which read "
                "one object per message (a GET each, every run)."
            )
        return lines

    def append_table(self) -> list[str]:
        """A row per delay and size, and how they were measured."""
        lines = ["### Append: median time per append, and ratio to a raw conditional PUT of the same bytes", ""]
        head = ["delay", "messages", "evstore `append`", "raw `put_object(IfNoneMatch=\"*\")`", "Strands snapshot save",
                "evstore ÷ PUT", "snapshot ÷ PUT", "evstore ÷ PUT, means", "evstore requests / append (these)"]  # fmt: skip
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for d in self.plan.delays_ms:
            for n in self.plan.sizes:
                a = self.appends.get((n, d))
                if a is None:
                    continue
                per = {k: median(v) for k, v in a["times"].items()}
                row = [
                    f"{d:g} ms",
                    f"{n:,}",
                    fmt_ms(per["evstore"]),
                    fmt_ms(per["raw"]),
                    fmt_ms(per["snapshot"]),
                    f"{per['evstore'] / per['raw']:.3f}x",
                    f"{per['snapshot'] / per['raw']:.2f}x",
                    f"{statistics.fmean(a['times']['evstore']) / statistics.fmean(a['times']['raw']):.3f}x",
                    f"{a['evstore_requests_per_append']:.3g}",
                ]
                lines.append("| " + " | ".join(row) + " |")
        lines.append("")
        lines.append(
            f"{self.plan.append_rounds} interleaved rounds per row, warm clients in one process, through the proxy. "
            f"An evstore event is {next(iter(self.appends.values()))['event_bytes'] if self.appends else '?'} bytes; "
            "the snapshot save writes the whole agent. Medians, and the ratio of the means (which includes "
            "any compaction work an append does on the caller's path)."
        )
        return lines

    def targets(self) -> str:
        """The figures issues 16 and 28 set targets for, read off the tables above: issue 28's 2 dependent
        round trips before the append at every size, and a resume at most as long as the snapshot's
        below 10,000 messages and half as long from 10,000 on (issue 28 names 10,000; 100,000 is held
        to the same)."""
        at = 15.0 if 15.0 in self.plan.delays_ms else min(self.plan.delays_ms)
        rows = ["### Against the targets", "", "| figure | measured | target | met |", "|---|---|---|---|"]

        def row(figure: str, measured: str, target: str, met: bool) -> None:
            rows.append(f"| {figure} | {measured} | {target} | {'yes' if met else '**no**'} |")

        for n in self.plan.sizes:
            mine = {d: self.samples.get(("evstore-defaults", n, d), []) for d in self.plan.delays_ms}
            theirs = self.samples.get(("strands-snapshot", n, at), [])
            if not all(mine.values()):
                continue
            # the chain less its last link, the appended message's PUT (it starts after every read finished)
            before = [s.depth - 1 for runs in mine.values() for s in runs]
            typical = median(before)
            row(
                f"default resume of {n:,}: dependent round trips before the append, median (range) of all runs",
                f"{typical:g} ({spread(before)})",
                "<= 2",
                typical <= 2,
            )
            for d, runs in mine.items():
                # each run against its own bound: 4 round trips, the append's PUT, and that run's client CPU,
                # which varies from run to run more than the margin (a median time against a median bound
                # would set one run's time against another run's CPU)
                over = [s.seconds - (5 * d / 1000 + s.cpu) for s in runs]
                within = sum(1 for o in over if o <= 0)
                took, bound = median(s.seconds for s in runs), median(5 * d / 1000 + s.cpu for s in runs)
                row(
                    f"default resume of {n:,} at {d:g} ms: each run's time less its bound, 4 round trips + the append's + "
                    "its client CPU; median",
                    f"{median(over) * 1000:+.1f} ms ({within} of {len(runs)} runs within; the medians apart: "
                    f"{fmt_ms(took)} against {fmt_ms(bound)})",
                    "<= 0",
                    median(over) <= 0,
                )
            if theirs:
                ratio = median(s.seconds for s in mine[at]) / median(s.seconds for s in theirs)
                wanted = 0.5 if n >= HALF_FROM else 1.0
                row(
                    f"default resume of {n:,} ÷ Strands snapshot resume, at {at:g} ms",
                    f"{ratio:.2f}x",
                    f"<= {wanted:g}x",
                    ratio <= wanted,
                )
        for (n, d), a in sorted(self.appends.items()):
            ratio = median(a["times"]["evstore"]) / median(a["times"]["raw"])
            row(f"append at {n:,}, {d:g} ms: evstore ÷ raw conditional PUT (medians)", f"{ratio:.3f}x", "<= 1.05x", ratio <= 1.05)
        if self.amortized:
            count, per = self.amortized
            row(f"requests per append, amortized over {count:,} appends to a new session", f"{per:.4g}", "<= 1.05", per <= 1.05)
        return "\n".join(rows)
