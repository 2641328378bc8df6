"""What readers ask for: replay (the audit view), the folded context view, and a session's info."""

from __future__ import annotations

from collections.abc import Iterator

import msgspec

from .._codec import ForkRef, Message, Retention
from .._context import StoreContext
from .._errors import InvalidInputError
from .._ids import validate_seq
from .._views import ContextFolder, Event, Repair
from ._events import open_body, rekeyed_key_id
from ._lineage import lineage_batches
from ._listing import find_head
from ._manifest import fork_points, load


class SessionInfo(msgspec.Struct, frozen=True):
    session_id: str
    uid: str
    created: str
    retention: Retention
    head: int
    key_id: str | None
    parent: ForkRef | None
    forks: list[str] = msgspec.field(default_factory=list)
    segments: int = 0
    #: Each fork in ``forks`` and the seq it was forked at.
    fork_seqs: dict[str, int] = msgspec.field(default_factory=dict)

    @property
    def encrypted(self) -> bool:
        return self.key_id is not None


def check_range(start: int, end: int | None) -> None:
    validate_seq(start)
    if end is not None:
        validate_seq(end, allow_zero=True)


def replay(ctx: StoreContext, session_id: str, *, start: int = 1, end: int | None = None) -> Iterator[Event]:
    """The audit view: every event in [start, end] (a fork's inherited ones included), streamed.

    Raises ``SessionNotFoundError``, ``SessionExpiredError``, ``IntegrityError``
    (at the first event that does not decode, authenticate or chain) or
    ``KeyRequiredError`` — lazily, as iteration reaches the problem.
    """
    check_range(start, end)
    loaded = load(ctx, session_id, upto=end, first_page=start == 1)
    for manifest, batch in lineage_batches(ctx, loaded, start, end):
        plain = manifest.kid is None  # else a plaintext body is refused by open_body
        for raw in batch:
            env = raw.envelope
            body = env.body if plain and env.body is not None else open_body(ctx, manifest, raw)
            yield Event(raw.session_id, raw.seq, env.ts, env.wid, env.kid, raw.hash, body, env.prev)


def folded(ctx: StoreContext, session_id: str) -> ContextFolder:
    """The whole lineage folded into the context view: replay's events, without making an ``Event`` of each."""
    folder = ContextFolder()
    add = folder.add
    for manifest, batch in lineage_batches(ctx, load(ctx, session_id, first_page=True), 1, None):
        plain = manifest.kid is None  # else a plaintext body is refused by open_body
        for raw in batch:
            body = raw.envelope.body
            add(raw.seq, body if plain and body is not None else open_body(ctx, manifest, raw))
    return folder


def context(ctx: StoreContext, session_id: str, *, repair: Repair = "error") -> list[Message]:
    """The context view: what an agent should send to a model next (see ``evstore._views``)."""
    if repair not in ("error", "drop", "none"):
        raise InvalidInputError(f"repair must be error, drop or none, not {repair!r:.40}")
    return folded(ctx, session_id).messages(repair)


def info(ctx: StoreContext, session_id: str) -> SessionInfo:
    loaded = load(ctx, session_id, every=True)  # every segment, to count them
    head = find_head(ctx, loaded)
    manifest = loaded.manifest
    forks = fork_points(ctx, manifest.uid, loaded.meta.forks)  # a GET per marker: info is not a hot path
    return SessionInfo(
        session_id,
        manifest.uid,
        manifest.created,
        manifest.retention,
        head,
        rekeyed_key_id(ctx, loaded),
        manifest.parent,
        sorted(forks),
        len(loaded.meta.segments),
        dict(sorted(forks.items())),
    )
