"""Commands that check and seal sessions: ``verify`` (one session against a receipt, or
``--all``: ``_fleet``; against a tree head: ``_proofs``), ``rekey``, ``shred``, and ``keygen``,
which makes the keys they seal with. ``tree-head``, ``prove`` and ``check-proof`` are ``_proofs``'s.

``register(cli)`` adds them to the command group (``cli/_main.py`` calls it). Imports
``_common``, ``_ecosystem``, ``_fleet`` and ``_proofs``.
"""

from __future__ import annotations

import click

import evstore
from evstore import InvalidInputError, Receipt

from ._common import Context, not_empty, pass_context, say, say_json
from ._ecosystem import check_output_path
from ._fleet import verify_all
from ._proofs import is_receipt, verify_tree_head


@click.command()
@click.argument("session", required=False)
@click.option(
    "--expect",
    metavar="SEQ:HASH|FILE",
    callback=not_empty,
    help="Fail (exit 5) unless the session still extends this receipt, or the tree head in FILE (from tree-head; - reads stdin).",
)
@click.option("--full", is_flag=True, help="With a tree head: check it against every event, not the checkpoint objects.")
@click.option("--json", "as_json", is_flag=True)
@click.option("--receipt", "receipt_only", is_flag=True, help="Print only the receipt, SEQ:HASH (for --expect later).")
@click.option("--all", "every", is_flag=True, help="Verify every session of the store (not SESSION), a line each.")
@click.option("--prefix", default="", help="With --all: only sessions whose id starts with this.")
@click.option(
    "--since",
    callback=not_empty,
    help="With --all: only sessions written to at or after this date (YYYY-MM-DD or RFC 3339).",
)
@click.option("--resume-from", default="", metavar="ID", help="With --all: start after this session id.")
@pass_context
def verify(
    state: Context,
    session: str | None,
    expect: str | None,
    full: bool,
    as_json: bool,
    receipt_only: bool,
    every: bool,
    prefix: str,
    since: str | None,
    resume_from: str,
) -> None:
    """Check SESSION's chain, contiguity and (with a key) every tag; print its receipt.

    The last line of the text output is always ``receipt: SEQ:HASH``; --receipt
    prints exactly ``SEQ:HASH`` and nothing else. With --all, every session is checked, a few
    at a time, one line each in id order, then a summary: exit 5 if any is tampered with,
    else 1 if any could not be read.
    """
    if every:
        if session is not None or expect is not None or receipt_only:
            raise click.UsageError("--all checks every session: give no SESSION, --expect or --receipt")
        from evstore._retention import parse_time

        moment = parse_time(since) if since is not None else None
        verify_all(state, prefix=prefix, since=moment, resume_from=resume_from, as_json=as_json)
        return
    if session is None:
        raise click.UsageError("give SESSION, or --all")
    if prefix or since is not None or resume_from:
        raise click.UsageError("--prefix, --since and --resume-from go with --all")
    if as_json and receipt_only:
        raise click.UsageError("--json and --receipt exclude each other")
    if expect is not None and not is_receipt(expect):
        verify_tree_head(state, session, expect, full=full, as_json=as_json, receipt_only=receipt_only)
        return
    if full:
        raise click.UsageError("--full goes with --expect FILE (a tree head): verify reads every event already")
    expected = Receipt.parse(expect) if expect is not None else None
    result = state.store.verify(session, expect=expected)
    if receipt_only:
        say(str(result.receipt))
        return
    if as_json:
        say_json(
            {
                "session": result.session_id,
                "ok": True,
                "head_seq": result.receipt.seq,
                "head_hash": result.receipt.hash,
                "receipt": str(result.receipt),
                "events": result.events,
                "sealed_checked": result.sealed_checked,
                "sealed_unchecked": result.sealed_unchecked,
                "expected": str(expected) if expected else None,
                "superseded_by_rekey": result.superseded_by_rekey,
            }
        )
        return
    say(
        f"ok: {result.events} events, chain intact"
        + (f", {result.sealed_checked} tags checked" if result.sealed_checked else "")
        + (f", {result.sealed_unchecked} sealed events not checked (no key)" if result.sealed_unchecked else "")
    )
    if expected and result.superseded_by_rekey:
        say(f"receipt {expected} is superseded by a recorded rekey: the log re-sealed that event and extends it")
    elif expected:
        say(f"extends receipt {expected}")
    say(f"receipt: {result.receipt}")


@click.command()
@click.argument("session")
@pass_context
def rekey(state: Context, session: str) -> None:
    """Re-seal SESSION under the active key (encrypts a plaintext session). Receipts issued
    before stay checkable through the rekey record it writes."""
    result = state.store.rekey(session)
    say(
        f"rekeyed {session} under key {result.key_id}: {result.resealed} events re-sealed, "
        f"{result.already_current} already current" + (f"; recorded in {', '.join(result.records)}" if result.records else "")
    )


@click.command()
@click.argument("session")
@click.option("--include-forks", is_flag=True, help="Shred the session's live forks too (they read its events).")
@pass_context
def shred(state: Context, session: str, include_forks: bool) -> None:
    """Fence SESSION as delete does, then destroy its salt and every object's content: no
    surviving copy of its events can be opened, and no append lands after it."""
    result = state.store.shred(session, include_forks=include_forks)
    salt = "salt destroyed" if result.salt_destroyed else "plaintext session: no salt to destroy"
    forks = f"; forks shredded: {', '.join(result.shredded_forks)}" if result.shredded_forks else ""
    gc = f", gc removes them after {result.removable_after}" if result.removable_after else ""
    say(
        f"shredded {session}: {salt}, {result.objects_removed} objects destroyed{forks}; fenced at seq "
        f"{result.fenced_at} (its slots hold the fence, with the tombstone and the manifest without its salt{gc})"
    )


@click.command()
@click.option(
    "--keyring",
    "keyring_path",
    type=click.Path(dir_okay=False),
    callback=not_empty,
    help="Add the key to this keyring file and make it active.",
)
@click.option("--key-id", callback=not_empty, help="Key id for the keyring (default: derived from the key).")
def keygen(keyring_path: str | None, key_id: str | None) -> None:
    """Print a new master key (base64), or add one to a keyring file and make it active."""
    if keyring_path is None:
        if key_id is not None:
            raise click.UsageError("--key-id needs --keyring")
        say(evstore.generate_key())
        return
    check_output_path(keyring_path)
    try:
        kid = evstore._crypto.add_key_to_file(keyring_path, key_id)
    except OSError as exc:
        raise InvalidInputError(f"cannot write keyring {keyring_path!r}: {exc.strerror or exc}") from None
    say(f"added key {kid} to {keyring_path} and made it active")


def register(group: click.Group) -> None:
    """Add ``verify``, ``rekey``, ``shred`` and ``keygen`` to the ``evstore`` command group."""
    for command in (verify, rekey, shred, keygen):
        group.add_command(command)
