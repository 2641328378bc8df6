"""Commands that read sessions: ``replay``, ``list`` and ``info``. ``tail`` and ``export``
are ``_ecosystem``'s.

``register(cli)`` adds them to the command group (``cli/_main.py`` calls it). Imports
``_common`` and ``_output``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import click

from evstore import IntegrityError, InvalidInputError, SessionExpiredError, SessionNotFoundError

from ._common import CommandError, Context, Progress, counted, is_terminal, pass_context, say, say_json
from ._output import event_lines, info_json, render_text, render_tree, write_json, write_jsonl


@click.command()
@click.argument("session")
@click.option("--format", "fmt", type=click.Choice(["text", "jsonl", "json"]), default="text", show_default=True)
@click.option(
    "--view",
    type=click.Choice(["audit", "context"]),
    default="audit",
    show_default=True,
    help="audit: every event as written; context: what to send to a model next.",
)
@click.option(
    "--repair",
    type=click.Choice(["error", "drop", "none"]),
    default="error",
    show_default=True,
    help="Context view: answer dangling tool calls with an error result, drop them, or leave them.",
)
@click.option("--from", "start", type=click.IntRange(min=1), default=1, help="First seq (audit view).")
@click.option("--to", "end", type=click.IntRange(min=0), help="Last seq (audit view).")
@pass_context
def replay(state: Context, session: str, fmt: str, view: str, repair: str, start: int, end: int | None) -> None:
    """Print SESSION's messages, streamed in seq order."""
    store = state.store
    if view == "context":
        if start != 1 or end is not None:
            raise click.UsageError("--from and --to apply to the audit view")
        lines: Iterator[dict[str, Any]] = ({"message": m} for m in store.context(session, repair=repair))  # type: ignore[arg-type]
    else:
        lines = event_lines(store.replay(session, start=start, end=end), session)
    if not is_terminal(sys.stdout):  # replaying into a file or pipe: count on a watching terminal
        lines = counted(lines, Progress(unit="messages"))
    if fmt == "jsonl":
        write_jsonl(lines)
    elif fmt == "json":
        write_json(lines)
    else:
        render_text(lines)


@click.command("list")
@click.option("--prefix", default="", help="Only sessions whose id starts with this.")
@click.option("--limit", type=click.IntRange(min=1), help="At most this many.")
@click.option("--long", "long_", is_flag=True, help="With head, retention and parent (reads each session).")
@click.option("--tree", is_flag=True, help="Show forks under their parents (reads each session).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@pass_context
def list_(state: Context, prefix: str, limit: int | None, long_: bool, tree: bool, as_json: bool) -> None:
    """List the session ids that have objects in the store, in order.

    That includes deleted sessions whose objects gc has yet to remove (after the fence hold,
    or later while forks read them) and expired remnants; --long, --tree and --json mark them.
    A session that cannot be read (its manifest does not decode, or its name is no session
    id) is listed as unreadable, with why, among the rest; then the command exits 5.
    """
    if long_ + tree + as_json > 1:
        raise click.UsageError("--long, --tree and --json are alternatives: give one")
    store = state.store
    ids = store.list_sessions(prefix, limit=limit)
    if not (long_ or tree or as_json):
        for session_id in ids:
            say(session_id)
        return
    infos = []
    gone: dict[str, str] = {}  # id -> why it has objects but no live session
    held: dict[str, tuple[str, ...]] = {}  # id of a deleted session -> the live forks that keep it
    unreadable: dict[str, str] = {}  # id -> why it cannot be read
    for session_id in ids:
        try:
            infos.append(store.info(session_id))
        except SessionNotFoundError as error:
            gone[session_id] = "deleted" if error.deleted else "no manifest"
            if error.kept_for_forks:
                held[session_id] = error.kept_for_forks
        except SessionExpiredError:
            gone[session_id] = "expired"
        except IntegrityError as error:
            unreadable[session_id] = str(error)
        except InvalidInputError:  # a name under sessions/ that no session can have
            unreadable[session_id] = "not a valid session id (an object evstore never wrote)"
    if tree:
        render_tree(infos, {**gone, **{sid: f"unreadable: {why}" for sid, why in unreadable.items()}})
    elif as_json:
        for info in infos:
            say_json(info_json(info))
        for session_id, state_ in gone.items():
            line: dict[str, object] = {"session": session_id, "state": state_}
            if session_id in held:
                line["kept_for_forks"] = list(held[session_id])
            say_json(line)
        for session_id, why in unreadable.items():
            say_json({"session": session_id, "state": "unreadable", "error": why})
    else:
        for info in infos:
            parent = f" fork of {info.parent.sid}@{info.parent.seq}" if info.parent else ""
            say(f"{info.session_id}\thead={info.head}\t{info.retention}{parent}")
        for session_id, state_ in gone.items():
            forks = held.get(session_id)
            note = GONE_NOTES[state_] if forks is None else HELD_NOTE.format(forks=", ".join(forks)[:200])
            say(f"{session_id}\t({note})")
        for session_id, why in unreadable.items():
            say(f"{session_id}\t(unreadable: {why})")
    if unreadable:  # everything readable is listed; a script still learns that something is wrong
        named = ", ".join(repr(sid) for sid in list(unreadable)[:5]) + (", ..." if len(unreadable) > 5 else "")
        raise CommandError(f"cannot read {len(unreadable)} of the sessions listed (marked unreadable): {named}", 5)


#: What ``list`` says about an id that has objects but no live session.
HELD_NOTE = "deleted; kept while its forks ({forks}) read it: the id stays taken until they are deleted and gc has removed it"
GONE_NOTES = {
    "deleted": "deleted; gc removes it after the fence hold; the id can be created again",
    "expired": "expired; remnants until gc removes them",
    "no manifest": "no manifest; remnants until gc removes them",
}


@click.command()
@click.argument("session")
@click.option("--json", "as_json", is_flag=True)
@pass_context
def info(state: Context, session: str, as_json: bool) -> None:
    """Show SESSION's head, creation time, retention, encryption, parent and forks."""
    details = state.store.info(session)
    data = info_json(details)
    if as_json:
        say_json(data)
        return
    for key, value in data.items():
        if value is not None and value != []:
            say(f"{key}: {', '.join(value) if isinstance(value, list) else value}")


def register(group: click.Group) -> None:
    """Add ``replay``, ``list`` and ``info`` to the ``evstore`` command group."""
    for command in (replay, list_, info):
        group.add_command(command)
