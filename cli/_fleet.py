"""``evstore verify --all``: every session of the store verified, one line each, then a summary.

Exit 5 when any session is tampered with, else 1 when any could not be read, else 0 (expired
and deleted sessions are reported, not failures). The lines come in id order, so after a crash
``--resume-from`` the last id printed goes on from there. Imports ``_common`` only.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime

from evstore._fleet import STATUSES

from ._common import CommandError, Context, Progress, counted, say, say_json

_LABEL = {"ok": "ok", "tampered": "TAMPERED", "expired": "expired", "deleted": "deleted", "unreadable": "UNREADABLE"}


def verify_all(state: Context, *, prefix: str, since: datetime | None, resume_from: str, as_json: bool) -> None:
    counts: Counter[str] = Counter()
    verdicts = state.store.verify_all(prefix=prefix, since=since, start_after=resume_from)
    for found in counted(verdicts, Progress(unit="sessions")):
        counts[found.status] += 1
        if as_json:
            say_json(found)
        elif found.status == "ok":
            say(f"ok          {found.session_id}: {found.events} events, receipt {found.receipt}")
        else:
            say(f"{_LABEL[found.status]:<11} {found.session_id}: {found.detail}")
    if as_json:
        say_json({"summary": {status: counts[status] for status in STATUSES}})
    else:
        say("summary: " + ", ".join(f"{counts[status]} {status}" for status in STATUSES))
    if counts["tampered"]:
        raise CommandError(f"{counts['tampered']} sessions failed verification (tampered)", 5)
    if counts["unreadable"]:
        raise CommandError(f"{counts['unreadable']} sessions could not be read", 1)
