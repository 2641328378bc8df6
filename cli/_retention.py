"""Commands that keep a store's size in check: ``gc``, the ``lifecycle`` group (``apply``,
``show``, ``preview``) and ``compact``.

``register(cli)`` adds them to the command group (``cli/_main.py`` calls it). Imports
``_common`` and ``_output``.
"""

from __future__ import annotations

import click
import msgspec

import evstore
from evstore._context import FENCE_HOLD

from ._common import Context, Group, Progress, echo, json_safe, not_empty, pass_context, say, say_json
from ._output import write_json


@click.command()
@click.option("--dry-run", is_flag=True, help="Print the plan; change nothing.")
@click.option("--grace", default="1d", show_default=True, help="Never touch objects younger than this (90s, 15m, 12h, 1d, 2w).")
@click.option(
    "--apply-lifecycle",
    is_flag=True,
    help="Also expire what the bucket's lifecycle rules would (for stores that never run them).",
)
@click.option(
    "--keep",
    type=click.IntRange(min=0),
    help="Keep only the newest N ephemeral sessions whose ids start with --prefix, of those older than --grace.",
)
@click.option("--prefix", default="", help="Only sessions whose id starts with this.")
@click.option(
    "--now",
    "now_text",
    metavar="TIME",
    callback=not_empty,
    help="Evaluate as of this time (YYYY-MM-DD or RFC 3339); for previews and tests.",
)
@click.option("--json", "as_json", is_flag=True)
@click.option("--verbose", "-v", is_flag=True, help="Print every object removed (always, with --dry-run).")
@pass_context
def gc(
    state: Context,
    dry_run: bool,
    grace: str,
    apply_lifecycle: bool,
    keep: int | None,
    prefix: str,
    now_text: str | None,
    as_json: bool,
    verbose: bool,
) -> None:
    """Remove expired remnants, deleted sessions no fork needs, orphans and stale uploads."""
    from evstore._retention import parse_duration, parse_time

    if keep is not None and not prefix:
        raise click.UsageError("--keep needs --prefix (which sessions the count applies to)")
    progress = Progress(enabled=not as_json)

    def on_remove(key: str, size: int, reason: str) -> None:
        progress.tick()
        if (dry_run or verbose) and not as_json:
            progress.clear()
            say(f"{'would remove' if dry_run else 'removed'} {key} ({size} bytes): {reason}")

    report = state.store.gc(
        dry_run=dry_run,
        grace=parse_duration(grace),
        apply_lifecycle=apply_lifecycle,
        keep=keep,
        prefix=prefix,
        now=parse_time(now_text) if now_text is not None else None,
        on_remove=on_remove,
    )
    progress.clear()
    if as_json:
        say_json(report)
        return
    verb = "would remove" if dry_run else "removed"
    say(
        f"gc: {report.sessions} sessions, {report.objects_scanned} objects scanned; {verb} {report.objects_removed} objects "
        f"({report.bytes_removed} bytes) of {report.sessions_removed} sessions, {report.uploads_aborted} incomplete uploads; "
        f"kept {report.kept_young} objects younger than the grace period or fenced by a delete less than "
        f"{FENCE_HOLD.total_seconds() / 60:.0f} minutes ago; {report.requests} requests"
    )
    for reason, count in sorted(report.reasons.items()):
        say(f"  {reason}: {count}")
    if report.sessions_deleted:
        deleted = "would delete" if dry_run else "deleted"
        say(
            f"gc: {deleted} {report.sessions_deleted} sessions beyond --keep {keep} (the newest of those older than "
            f"--grace {grace} are kept); a gc run after the fence hold removes their objects"
        )
    if report.kept_by_grace:
        say(f"gc: kept {report.kept_by_grace} sessions younger than --grace {grace}, not counted against --keep {keep}")


@click.group(cls=Group)
def lifecycle() -> None:
    """The bucket's lifecycle rules: ephemeral sessions expire by them."""


@lifecycle.command("apply")
@click.option("--ephemeral-days", type=click.IntRange(1, 36500), default=90, show_default=True)
@pass_context
def lifecycle_apply(state: Context, ephemeral_days: int) -> None:
    """Install the rules (merged with the bucket's own; running it twice changes nothing)."""
    state.makes_store = True  # setting a store up, as creating a session does
    store = state.store
    changed, rules = store.apply_lifecycle(ephemeral_days)
    line = ("installed" if changed else "unchanged") + f": {len(rules)} rules"
    if isinstance(store.backend, evstore.LocalStore | evstore.MemoryStore):
        line = (
            ("saved" if changed else "unchanged") + f": {len(rules)} rules, recorded with the store, but a local store never"
            " runs lifecycle rules: run `evstore gc --apply-lifecycle` (e.g. daily) to expire ephemeral sessions"
        )
    say(line)


@lifecycle.command("show")
@pass_context
def lifecycle_show(state: Context) -> None:
    """Print the bucket's lifecycle rules as JSON."""
    echo(json_safe(msgspec.json.format(msgspec.json.encode(state.store.lifecycle_rules()), indent=2)).decode())


@lifecycle.command("preview")
@click.option("--at", "at_text", required=True, metavar="DATE", help="YYYY-MM-DD or an RFC 3339 time.")
@click.option("--json", "as_json", is_flag=True)
@pass_context
def lifecycle_preview(state: Context, at_text: str, as_json: bool) -> None:
    """List the sessions and objects the installed rules will have expired by --at."""
    from evstore._retention import parse_time

    sessions: dict[str, int] = {}
    items = state.store.preview_lifecycle(parse_time(at_text))
    if as_json:  # one JSON array, [] when nothing is due
        write_json({"session": item.session_id, "key": item.key, "expires": item.expires} for item in items)
        return
    for item in items:
        sessions[item.session_id] = sessions.get(item.session_id, 0) + 1
        say(f"{item.expires.isoformat()}  {item.key}")
    say(f"{sum(sessions.values())} objects of {len(sessions)} sessions expire by {at_text}")


@click.command()
@click.argument("session")
@click.option("--segment-size", type=click.IntRange(2, 100_000), default=1000, show_default=True)
@pass_context
def compact(state: Context, session: str, segment_size: int) -> None:
    """Pack runs of SESSION's events into segments so replay needs fewer requests."""
    made = state.store.compact(session, segment_size=segment_size)
    if made:
        say(f"{len(made)} segments written ({made[0][0]}-{made[-1][1]})")
        return
    info = state.store.info(session)
    say(
        f"0 segments written: a segment packs a full run of {segment_size} events (--segment-size) that no segment"
        f" holds yet, and {session} has no such run (head {info.head}, {info.segments} segments already)"
    )


def register(group: click.Group) -> None:
    """Add ``gc``, ``lifecycle`` and ``compact`` to the ``evstore`` command group."""
    for command in (gc, lifecycle, compact):
        group.add_command(command)
