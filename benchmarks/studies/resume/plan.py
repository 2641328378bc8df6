"""What ``benchmarks/resume.py`` runs: its variants, the sizes, delays and rounds of the full and quick
plans, a resume's sample, and how its tables show a time and a spread."""

from __future__ import annotations

import dataclasses

SEGMENT = 1000  # compact's default segment size; a session shorter than that becomes one segment
AGENT_ID = "main"
Item = tuple[str, bytes, dict[str, str]]

VARIANTS = ("evstore-defaults", "evstore-compacted", "evstore-uncompacted", "strands-s3", "strands-snapshot")
#: Variants that read one object per message: past ``PER_MESSAGE_UP_TO`` messages they are not set up
#: or run (a GET per message each run; they are the baseline up to 10,000).
PER_MESSAGE = ("evstore-uncompacted", "strands-s3")
PER_MESSAGE_UP_TO = 10_000


def variants_at(n: int) -> tuple[str, ...]:
    """The variants set up and run at ``n`` messages."""
    return tuple(v for v in VARIANTS if n <= PER_MESSAGE_UP_TO or v not in PER_MESSAGE)


@dataclasses.dataclass(frozen=True)
class Plan:
    sizes: tuple[int, ...]
    delays_ms: tuple[float, ...]
    rounds: int  # resume rounds for sizes below BIG
    big_rounds: int  # resume rounds for sizes of BIG and more
    append_rounds: int
    amortized_appends: int
    #: resume rounds, at every size, for the variants that resume in a few requests (``FEW_REQUESTS``),
    #: when more than the size's rounds: each such run takes under a second, one of the others up to
    #: 100 s, and the bound these are held to leaves a few ms of margin, so their medians need more runs
    few_request_rounds: int = 0
    #: the resuming client on a core of its own, the server and the proxy on the others (--pin)
    pinned: bool = False


BIG = 10_000
#: From this many messages issue 28 wants the default resume within half the snapshot's time (below it, within it).
HALF_FROM = 10_000
FEW_REQUESTS = ("evstore-defaults", "evstore-compacted", "strands-snapshot")
#: With --pin: the core of the resuming client; the server, the proxy and the appends run on the others.
CLIENT_CORES = {0}
FULL = Plan(
    sizes=(100, 1_000, 10_000, 100_000),
    delays_ms=(15, 50),
    rounds=3,
    big_rounds=1,
    append_rounds=30,
    amortized_appends=2048,
    few_request_rounds=9,
)
QUICK = Plan(sizes=(100, 1_000), delays_ms=(15, 50), rounds=1, big_rounds=1, append_rounds=5, amortized_appends=256)


def fmt_ms(seconds: float) -> str:
    return f"{seconds * 1000:,.1f} ms" if seconds < 10 else f"{seconds:,.1f} s"


def spread(values: list[int]) -> str:
    """``5`` when every round agreed, else ``min-max``."""
    lo, hi = min(values), max(values)
    return f"{lo:,}" if lo == hi else f"{lo:,}-{hi:,}"


@dataclasses.dataclass
class Sample:
    """One resume in a fresh process: its time and CPU, the proxy's counts, and what it resumed."""

    seconds: float
    cpu: float
    requests: int
    depth: int
    client_requests: int
    by_kind: dict[str, int]
    context: int
    #: CPU the other side used during the run: the server's processes and the proxy (this process).
    server_cpu: float = 0.0
