"""The sizes of ``benchmarks/run.py``'s full and quick runs, the figures it holds to targets,
and how its tables show a time."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Results = dict[str, Any]


@dataclass(frozen=True)
class Config:
    quick: bool
    append_rounds: int
    append_batch: int
    growth_to: int
    growth_window: int
    open_sizes: tuple[int, ...]
    open_rounds: int
    replay_sizes: tuple[int, ...]
    replay_rounds: int
    fork_rounds: int
    gc_sessions: int
    gc_objects_per_session: int
    crypto_rounds: int
    crypto_replay: int
    import_runs: int
    memory_sizes: tuple[int, ...]
    segment_size: int
    autocompact_appends: int


FULL = Config(
    quick=False,
    append_rounds=300,
    append_batch=1,
    growth_to=10_000,
    growth_window=30,
    open_sizes=(10, 1_000, 10_000),
    open_rounds=5,
    replay_sizes=(1_000, 10_000),
    replay_rounds=3,
    fork_rounds=5,
    gc_sessions=1_000,
    gc_objects_per_session=100,
    crypto_rounds=10,
    crypto_replay=500,
    import_runs=9,
    memory_sizes=(10_000, 100_000),
    segment_size=1000,
    autocompact_appends=10_000,
)
QUICK = Config(
    quick=True,
    append_rounds=40,
    append_batch=1,
    growth_to=1_500,
    growth_window=10,
    open_sizes=(10, 2_500),
    open_rounds=2,
    replay_sizes=(300,),
    replay_rounds=2,
    fork_rounds=2,
    gc_sessions=20,
    gc_objects_per_session=100,
    crypto_rounds=4,
    crypto_replay=100,
    import_runs=3,
    memory_sizes=(1_000, 3_000),
    segment_size=100,
    autocompact_appends=1_000,
)


@dataclass
class Target:
    """A figure a section holds to a target: printed in the closing ``targets`` table."""

    section: str
    name: str
    figure: str
    target: str
    met: bool


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms" if seconds < 10 else f"{seconds:.1f} s"
