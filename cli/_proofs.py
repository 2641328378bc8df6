"""Merkle proofs from the command line: ``tree-head``, ``prove`` and ``check-proof``, and
``verify --expect`` with a tree head (``verify_tree_head``).

``register(cli)`` adds them to the command group (``cli/_main.py`` calls it). ``check-proof``
needs no store and no key: it answers from the proof alone (exit 0 when it holds, 5 when it
does not, 2 for input that is not a proof). Imports ``_common`` only.
"""

from __future__ import annotations

import re
import sys

import click

from evstore import InvalidInputError
from evstore._crypto import open_regular_file
from evstore._proofs import MAX_PROOF_BYTES, InclusionProof, Proof, TreeHead, check_proof, from_json, to_json

from ._common import CommandError, Context, echo, not_empty, pass_context, say, say_json

_CHECKPOINT_HELP = "Use the newest checkpoint object (written at compaction every 256 events): a few requests."


@click.command("tree-head")
@click.argument("session")
@click.option("--size", type=click.IntRange(min=1), help="The tree of the first SIZE events (default: all).")
@click.option(
    "--checkpoint",
    is_flag=True,
    help="The newest checkpoint object's tree, read from it (a few requests): verify --expect --full it before keeping it.",
)
@click.option("--json", "as_json", is_flag=True, help='One JSON object: {"session_id", "size", "root"}.')
@pass_context
def tree_head(state: Context, session: str, size: int | None, checkpoint: bool, as_json: bool) -> None:
    """Print the RFC 9162 Merkle root of SESSION's event hashes as a C2SP checkpoint body.

    Reads the session (no key needed). Keep it, or sign it with a note signer: a later
    ``verify --expect FILE`` or ``prove --since-size`` shows the session still extends it.
    """
    if size is not None and checkpoint:
        raise click.UsageError("give --size or --checkpoint, not both")
    head = state.store.tree_head(session, size=size, checkpoint=checkpoint)
    if as_json:
        say_json(head)
    else:
        for line in head.checkpoint().splitlines():
            say(line)


@click.command()
@click.argument("session")
@click.argument("seq", type=click.IntRange(min=1), required=False)
@click.option("--since-size", type=click.IntRange(min=1), help="Prove the tree of this many events is a prefix (not SEQ).")
@click.option("--size", type=click.IntRange(min=1), help="Prove against the tree of the first SIZE events (default: all).")
@click.option("--checkpoint", is_flag=True, help=_CHECKPOINT_HELP)
@pass_context
def prove(state: Context, session: str, seq: int | None, since_size: int | None, size: int | None, checkpoint: bool) -> None:
    """Print a proof (JSON) that event SEQ is in SESSION's Merkle tree, or with --since-size
    that an earlier tree head is a prefix of today's. ``check-proof`` checks it without keys.
    With --size or --checkpoint, the proof comes from checkpoint objects where they serve."""
    if (seq is None) == (since_size is None):
        raise click.UsageError("give SEQ or --since-size, not both")
    if size is not None and checkpoint:
        raise click.UsageError("give --size or --checkpoint, not both")
    proof: Proof
    if seq is not None:
        proof = state.store.prove(session, seq, size=size, checkpoint=checkpoint)
    else:
        assert since_size is not None
        if checkpoint:  # the newest checkpoint's size, then the proof from checkpoint objects
            size = state.store.tree_head(session, checkpoint=True).size
        proof = state.store.prove_consistency(session, since_size, size=size)
    echo(to_json(proof).decode())  # hex, digits and a validated session id: nothing to neutralize


def _read(file: str, what: str) -> bytes:
    if file == "-":
        return sys.stdin.buffer.read(MAX_PROOF_BYTES + 1)
    with open_regular_file(file, what, MAX_PROOF_BYTES) as handle:
        return handle.read(MAX_PROOF_BYTES + 1)


@click.command("check-proof")
@click.argument("file", default="-")
@click.option(
    "--tree-head",
    "head_file",
    metavar="FILE",
    callback=not_empty,
    help="The tree head you trust (from tree-head): the proof is for it.",
)
def check_proof_command(file: str, head_file: str | None) -> None:
    """Check a proof from ``prove`` (FILE, or - for standard input): exit 0 when it holds, 5 when
    it does not. Needs no store and no key. With --tree-head, an inclusion proof must be for
    that tree and a consistency proof must start from it; without, the proof's own root and
    size are taken at its word."""
    try:
        proof = from_json(_read(file, "proof file"))
        trusted = (
            TreeHead.from_checkpoint(_read(head_file, "tree head").decode("utf-8", "replace")) if head_file is not None else None
        )
    except InvalidInputError as exc:
        raise CommandError(str(exc), 2) from None
    if not check_proof(proof, trusted):
        against = " against that tree head" if trusted else ""
        raise CommandError(f"proof refused: it does not hold for session {proof.session_id!r}{against}", 5)
    if isinstance(proof, InclusionProof):
        say(f"ok: event {proof.seq} ({proof.leaf}) is in the tree of {proof.size} events with root {proof.root}")
    else:
        say(
            f"ok: the tree of {proof.old_size} events ({proof.old_root}) is a prefix of the tree of"
            f" {proof.new_size} ({proof.new_root})"
        )


_RECEIPT = re.compile(r"\s*\d+:[0-9a-f]{64}\s*")


def is_receipt(text: str) -> bool:
    """Whether ``verify --expect`` was given a receipt (SEQ:HASH), not a tree head's file."""
    return _RECEIPT.fullmatch(text) is not None


def verify_tree_head(state: Context, session: str, file: str, *, full: bool, as_json: bool, receipt_only: bool) -> None:
    """``verify SESSION --expect FILE``: that SESSION still extends the tree head in FILE (exit 5
    if not). From checkpoint objects (a few requests) unless --full, or unless they cannot show
    it: then from every event. Prints the tree it proved (its checkpoint body last: the next
    --expect). With --full, ``verify``'s checks of every event and tag run first."""
    if receipt_only:
        raise click.UsageError("--receipt goes with a SEQ:HASH receipt, not a tree head")
    try:
        expected = TreeHead.from_checkpoint(_read(file, "tree head").decode("utf-8", "replace"))
    except InvalidInputError as exc:
        raise CommandError(str(exc), 2) from None
    verified = state.store.verify(session) if full else None
    check = state.store.verify_tree(session, expected, full=full)
    source = "checkpoint objects" if check.stored else "every event, read"
    if as_json:
        say_json(
            {
                "session": session,
                "ok": True,
                "expected": {"size": expected.size, "root": expected.root},
                "tree_head": {"size": check.tree_head.size, "root": check.tree_head.root},
                "from_checkpoint_objects": check.stored,
                "fallback": check.fallback or None,
                "events_verified": verified.events if verified else None,
                "proof": check.proof,
            }
        )
        return
    if verified is not None:
        say(f"ok: {verified.events} events, chain intact (receipt {verified.receipt})")
    if check.fallback:
        say(f"checkpoint objects not used: {check.fallback}")
    size = check.tree_head.size
    say(f"ok: extends the tree head of {expected.size} events: a consistency proof to the tree of {size} ({source})")
    for line in check.tree_head.checkpoint().splitlines():
        say(line)


def register(group: click.Group) -> None:
    """Add ``tree-head``, ``prove`` and ``check-proof`` to the ``evstore`` command group."""
    for command in (tree_head, prove, check_proof_command):
        group.add_command(command)
