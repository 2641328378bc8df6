"""``evstore verify --all``: every session of the store verified, one line each, then a summary.

Exit 5 when any session is tampered with, else 1 when any could not be read, else 0 (expired
and deleted sessions are reported, not failures). The lines come in id order, so after a crash
``--resume-from`` the last id printed goes on from there.

While a terminal watches standard error, a status line there counts the sessions checked so far
by status, out of the total known so far (``tally``): the sessions a second listing of the
store's ids, on a thread of its own, has found (``Listed``: one more LIST per 1,000 sessions,
only then; none with ``--since``, whose sessions only the verify's own listing knows). The
line is wiped before each line written to a terminal's standard output, at the end, and on an
interruption (Ctrl-C), so it never mixes into the lines. Imports ``_common`` only.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import datetime

from evstore._fleet import STATUSES

from ._common import CommandError, Context, StatusLine, is_terminal, say, say_json

_LABEL = {
    "ok": "ok",
    "tampered": "TAMPERED",
    "expired": "expired",
    "deleted": "deleted",
    "remnant": "remnant",
    "unreadable": "UNREADABLE",
}


class Listed:
    """Sessions counted from ``ids`` on a thread of its own, for the status line's total:
    ``found`` so far, ``complete`` once the listing ended, ``failed`` if it ended in an error
    (the total is then unknown). A daemon thread: it never holds the command open."""

    def __init__(self, ids: Iterable[str]) -> None:
        self.found = 0
        self.complete = False
        self.failed = False
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._count, args=(ids,), name="evstore-verify-count", daemon=True)
        self._thread.start()

    def _count(self, ids: Iterable[str]) -> None:
        try:
            for _ in ids:
                if self._stopped.is_set():
                    return
                self.found += 1  # read by the command's thread: an int, written whole
        except Exception:  # only a display: the verify's own listing reports what failed
            self.failed = True
            return
        self.complete = True

    def stop(self) -> None:
        """Stop counting (at the next id: the listing's page in flight is dropped)."""
        self._stopped.set()

    def wait(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)


def tally(counts: Mapping[str, int], listed: Listed | None = None) -> str:
    """The status line, e.g. ``verify --all: 1,204/30,000+ sessions checked: 1,200 ok, 1 tampered, ...``
    (``+``: still counting; no total without ``listed`` or when its listing failed)."""
    done = sum(counts.values())
    by_status = ", ".join(f"{counts.get(status, 0):,} {status}" for status in STATUSES)
    total = ""
    if listed is not None and not listed.failed:
        total = f"/{max(done, listed.found):,}" + ("" if listed.complete else "+")
    return f"verify --all: {done:,}{total} sessions checked: {by_status}"


def verify_all(
    state: Context,
    *,
    prefix: str,
    since: datetime | None,
    resume_from: str,
    as_json: bool,
    line: StatusLine | None = None,
    lines_to_terminal: bool | None = None,
    listed: Listed | None = None,
) -> None:
    """``line``: where the status line goes (``StatusLine.on_stderr()`` when not given);
    ``lines_to_terminal``: whether the per-session lines share its screen (standard output is a
    terminal, when not given), so that it is wiped before each; ``listed``: its total (when not
    given, counted here if the line is on a terminal and there is no ``since``)."""
    counts: Counter[str] = Counter()
    line = StatusLine.on_stderr() if line is None else line
    if lines_to_terminal is None:
        lines_to_terminal = is_terminal(sys.stdout)
    if listed is None and line.is_terminal and since is None:
        listed = Listed(state.store.list_sessions(prefix, start_after=resume_from))
    try:
        line.show(tally(counts, listed))  # while the first page of ids is listed
        for found in state.store.verify_all(prefix=prefix, since=since, start_after=resume_from):
            counts[found.status] += 1
            if lines_to_terminal:
                line.clear()
            if as_json:
                say_json(found)
            elif found.status == "ok":
                say(f"ok          {found.session_id}: {found.events} events, receipt {found.receipt}")
            else:
                say(f"{_LABEL[found.status]:<11} {found.session_id}: {found.detail}")
            line.show(tally(counts, listed))
    finally:
        line.clear()  # at the end, on an error and on Ctrl-C: before the summary or the error line
        if listed is not None:
            listed.stop()
    if as_json:
        say_json({"summary": {status: counts[status] for status in STATUSES}})
    else:
        say("summary: " + ", ".join(f"{counts[status]} {status}" for status in STATUSES))
    if counts["tampered"]:
        raise CommandError(f"{counts['tampered']} sessions failed verification (tampered)", 5)
    if counts["unreadable"]:
        raise CommandError(f"{counts['unreadable']} sessions could not be read", 1)
