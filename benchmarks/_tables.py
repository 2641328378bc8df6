"""How the benchmarks print their figures, and keep them for ``--json``.

Not a public interface. Two kinds of table:

* ``Table``: rows of figures with sizes (or lengths, depths) as columns, and per row the
  figure wanted and whether each column meets it; ``Report`` prints each as it is done and
  keeps it, by section, for the JSON file (``scale.py``, ``frameworks.py``, ``plot_costs.py``);
* ``TextTable``: rows of text cells under free headers (``run.py``: one row per contender).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


def label(n: int) -> str:
    """1000 -> 1k, 300000 -> 300k, 1000000 -> 1M."""
    if n >= 1_000_000 and n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    if n >= 1_000 and n % 1_000 == 0:
        return f"{n // 1_000}k"
    return str(n)


def fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
    return str(value)


def at_most(values: list[Any], bound: float) -> list[bool | None]:
    return [None if v is None else v <= bound for v in values]


def only(met: list[bool | None], bounded: list[bool]) -> list[bool | None]:
    """``met`` for the columns a bound applies to, None (no verdict) for the others."""
    return [m if b else None for m, b in zip(met, bounded, strict=True)]


class Table:
    """Rows of figures with sizes as columns, and per row the wanted figure and whether it is met."""

    def __init__(self, title: str, columns: list[str], notes: Iterable[str] = ()) -> None:
        self.title = title
        self.columns = columns
        self.notes = list(notes)
        self.rows: list[dict[str, Any]] = []

    def row(self, name: str, values: list[Any], wanted: str = "", met: Sequence[bool | None] | None = None) -> None:
        self.rows.append({"name": name, "values": values, "wanted": wanted, "met": None if met is None else list(met)})

    @staticmethod
    def verdict(row: dict[str, Any], columns: list[str]) -> str:
        met: list[bool | None] | None = row["met"]
        if met is None or all(m is None for m in met):
            return ""
        missed = [c for c, m in zip(columns, met, strict=True) if m is False]
        if not missed:
            return "met"
        return "not met" if len(columns) == 1 else "not met (" + ", ".join(missed) + ")"

    def render(self) -> str:
        cells = [[fmt(v) for v in r["values"]] for r in self.rows]
        first = max([len(r["name"]) for r in self.rows] + [8])
        widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(self.columns)]
        wanted = max([len(r["wanted"]) for r in self.rows] + [6])
        lines = [f"\n## {self.title}"]
        lines += [f"   {note}" for note in self.notes]
        head = f"{'':<{first}}  " + "  ".join(f"{c:>{w}}" for c, w in zip(self.columns, widths, strict=True))
        lines.append(head + f"  {'wanted':<{wanted}}  met")
        for r, row in zip(self.rows, cells, strict=True):
            line = f"{r['name']:<{first}}  " + "  ".join(f"{c:>{w}}" for c, w in zip(row, widths, strict=True))
            lines.append(line + f"  {r['wanted']:<{wanted}}  {self.verdict(r, self.columns)}".rstrip())
        return "\n".join(lines)

    def as_json(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "columns": self.columns,
            "notes": self.notes,
            "rows": [{**r, "verdict": self.verdict(r, self.columns)} for r in self.rows],
        }


class Report:
    """Tables printed as each is done, and kept for ``--json``."""

    def __init__(self) -> None:
        self.sections: dict[str, dict[str, Any]] = {}

    def add(self, section: str, table: Table) -> None:
        print(table.render(), flush=True)
        self.sections.setdefault(section, {"tables": []})["tables"].append(table.as_json())

    def note(self, section: str, key: str, value: Any) -> None:
        self.sections.setdefault(section, {"tables": []})[key] = value

    def timed(self, section: str, run: Callable[[], T]) -> T:
        """Run a section, and note and print how long it took."""
        began = time.perf_counter()
        result = run()
        seconds = time.perf_counter() - began
        self.note(section, "seconds", seconds)
        print(f"   ({section}: {seconds:.1f} s)", flush=True)
        return result


class TextTable:
    """Rows of text cells under free headers, left-aligned; floats to 2 places."""

    def __init__(self, title: str, columns: list[str]) -> None:
        self.title = title
        self.columns = columns
        self.rows: list[list[str]] = []

    def add(self, *cells: object) -> None:
        self.rows.append([c if isinstance(c, str) else f"{c:.2f}" if isinstance(c, float) else str(c) for c in cells])

    def show(self) -> None:
        widths = [
            max(len(self.columns[i]), *(len(r[i]) for r in self.rows)) if self.rows else len(self.columns[i])
            for i in range(len(self.columns))
        ]
        print(f"\n## {self.title}")
        print("  ".join(c.ljust(w) for c, w in zip(self.columns, widths, strict=True)))
        print("  ".join("-" * w for w in widths))
        for row in self.rows:
            print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
        sys.stdout.flush()
