"""The bucket's lifecycle rules: installing evstore's, merged with the bucket's own, and
previewing what the installed rules will expire (their evaluation is the pure ``_lifecycle``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

from .. import _lifecycle
from .._backends import ObjectMissing
from .._context import StoreContext
from .._errors import EvstoreError
from .._read import list_sessions, read_manifest


@dataclass(frozen=True)
class ExpiringObject:
    key: str
    session_id: str
    expires: datetime


def preview(ctx: StoreContext, at: datetime) -> Iterator[ExpiringObject]:
    """Objects the bucket's lifecycle rules will have expired by ``at`` (the rules as installed).

    Tags are known from each session's retention class (evstore tags every
    object of an ephemeral session), so no per-object tagging request is made.
    """
    rules = ctx.backend.get_lifecycle()
    if not rules:
        return
    for session_id in list_sessions(ctx):
        try:
            found = read_manifest(ctx, session_id)
        except EvstoreError:
            found = None
        retention = found[0].retention if found is not None else None
        prefix = ctx.layout.session_prefix(session_id)
        for info in ctx.backend.list(prefix):
            if retention is None:
                try:
                    tags = ctx.backend.get_tags(info.key)
                except ObjectMissing:
                    continue
            else:
                tags = ctx.tags_for(retention)
            when = _lifecycle.expiry(rules, info.key, info.last_modified, tags, info.size)
            if when is not None and when <= at:
                yield ExpiringObject(info.key, session_id, when)


def apply_lifecycle_rules(ctx: StoreContext, ephemeral_days: int) -> tuple[bool, list[_lifecycle.Rule]]:
    """Install evstore's rules, merged with the bucket's; (changed, resulting rules). Idempotent:
    when the bucket already has them, no write is made."""
    existing = ctx.backend.get_lifecycle()
    merged = _lifecycle.merge_rules(existing, _lifecycle.evstore_rules(ctx.layout.sessions, ephemeral_days))
    if _lifecycle.rules_equal(merged, existing):
        return False, existing
    ctx.backend.put_lifecycle(merged)
    return True, merged
