"""``evstore verify --all``: every session of the store verified, one line each, then a summary.

Exit 5 when any session is tampered with, else 1 when any could not be read, else 0 (expired
and deleted sessions are reported, not failures). The lines come in id order, so after a crash
``--resume-from`` the last id printed goes on from there. While a terminal watches standard
error, a status line there counts the sessions checked so far by status (``tally``); it is
wiped before each line written to a terminal's standard output, at the end, and on an
interruption (Ctrl-C), so it never mixes into the lines. Imports ``_common`` only.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Mapping
from datetime import datetime

from evstore._fleet import STATUSES

from ._common import CommandError, Context, StatusLine, say, say_json

_LABEL = {"ok": "ok", "tampered": "TAMPERED", "expired": "expired", "deleted": "deleted", "unreadable": "UNREADABLE"}


def tally(counts: Mapping[str, int]) -> str:
    """The status line: e.g. ``verify --all: 1,204 sessions checked: 1,200 ok, 1 tampered, ...``."""
    done = sum(counts.values())
    by_status = ", ".join(f"{counts.get(status, 0):,} {status}" for status in STATUSES)
    return f"verify --all: {done:,} sessions checked: {by_status}"


def verify_all(
    state: Context,
    *,
    prefix: str,
    since: datetime | None,
    resume_from: str,
    as_json: bool,
    line: StatusLine | None = None,
    lines_to_terminal: bool | None = None,
) -> None:
    """``line``: where the status line goes (``StatusLine.on_stderr()`` when not given);
    ``lines_to_terminal``: whether the per-session lines share its screen (standard output is a
    terminal, when not given), so that it is wiped before each."""
    counts: Counter[str] = Counter()
    line = StatusLine.on_stderr() if line is None else line
    if lines_to_terminal is None:
        lines_to_terminal = sys.stdout.isatty()
    try:
        line.show(tally(counts))  # while the first page of ids is listed
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
            line.show(tally(counts))
    finally:
        line.clear()  # at the end, on an error and on Ctrl-C: before the summary or the error line
    if as_json:
        say_json({"summary": {status: counts[status] for status in STATUSES}})
    else:
        say("summary: " + ", ".join(f"{counts[status]} {status}" for status in STATUSES))
    if counts["tampered"]:
        raise CommandError(f"{counts['tampered']} sessions failed verification (tampered)", 5)
    if counts["unreadable"]:
        raise CommandError(f"{counts['unreadable']} sessions could not be read", 1)
