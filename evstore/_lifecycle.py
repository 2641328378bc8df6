"""Bucket lifecycle rules: the ones evstore installs, merging them with a
bucket's own, and evaluating rules the way S3 does. Pure functions only.

S3 semantics kept here: a rule applies when it is ``Enabled`` and its filter
matches (key prefix, every listed tag, size bounds); ``Expiration.Days``
expires an object at the first midnight UTC at or after creation + N days;
``Expiration.Date`` at that date; ``AbortIncompleteMultipartUpload`` counts
from the upload's initiation the same way. When several rules match, the
earliest time wins.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, time, timedelta
from typing import Any

import msgspec

from ._errors import InvalidInputError, StoreUnavailableError

Rule = dict[str, Any]

RETENTION_TAG = "evstore-retention"
EPHEMERAL_RULE_ID = "evstore-ephemeral-expiry"
ABORT_RULE_ID = "evstore-abort-incomplete-uploads"
DEFAULT_EPHEMERAL_DAYS = 90
DEFAULT_ABORT_DAYS = 7


class Filter(msgspec.Struct, frozen=True):
    """A rule's filter in one shape, whichever way the server wrote it."""

    prefix: str = ""
    tags: frozenset[tuple[str, str]] = frozenset()
    size_above: int | None = None
    size_below: int | None = None

    def matches(self, key: str, tags: Mapping[str, str], size: int) -> bool:
        return (
            key.startswith(self.prefix)
            and all(tags.get(k) == v for k, v in self.tags)
            and (self.size_above is None or size > self.size_above)
            and (self.size_below is None or size < self.size_below)
        )


def _tag_pairs(tags: Any) -> set[tuple[str, str]]:
    if isinstance(tags, dict):
        tags = [tags]
    return {(str(t.get("Key", "")), str(t.get("Value", ""))) for t in tags or [] if isinstance(t, dict)}


def rule_filter(rule: Rule) -> Filter:
    """The filter of a rule: ``Filter`` with Prefix/Tag/And/size keys (RGW writes And back as
    Prefix + Tag side by side), or the legacy rule-level ``Prefix``."""
    raw = rule.get("Filter")
    if raw is None:
        return Filter(prefix=str(rule.get("Prefix", "")))
    parts = [raw, raw.get("And") or {}]
    prefix = next((str(p["Prefix"]) for p in parts if p.get("Prefix")), "")
    tags: set[tuple[str, str]] = set()
    for part in parts:
        tags |= _tag_pairs(part.get("Tag")) | _tag_pairs(part.get("Tags"))
    above = next((int(p["ObjectSizeGreaterThan"]) for p in parts if "ObjectSizeGreaterThan" in p), None)
    below = next((int(p["ObjectSizeLessThan"]) for p in parts if "ObjectSizeLessThan" in p), None)
    return Filter(prefix, frozenset(tags), above, below)


def evstore_rules(sessions_prefix: str, ephemeral_days: int, abort_days: int = DEFAULT_ABORT_DAYS) -> list[Rule]:
    """The two rules evstore installs for a store whose sessions live under ``sessions_prefix``.

    Expiration filters on the ephemeral tag; aborting incomplete uploads is a
    rule of its own because S3 refuses that action in a rule with a tag filter.
    """
    if not 1 <= ephemeral_days <= 36500:
        raise InvalidInputError("ephemeral days must be from 1 to 36500")
    root = sessions_prefix.removesuffix("sessions/").strip("/")
    suffix = f":{root}" if root else ""
    return [
        {
            "ID": EPHEMERAL_RULE_ID + suffix,
            "Status": "Enabled",
            "Filter": {"And": {"Prefix": sessions_prefix, "Tags": [{"Key": RETENTION_TAG, "Value": "ephemeral"}]}},
            "Expiration": {"Days": ephemeral_days},
        },
        {
            "ID": ABORT_RULE_ID + suffix,
            "Status": "Enabled",
            "Filter": {"Prefix": sessions_prefix},
            "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": abort_days},
        },
    ]


def _effect(rule: Rule) -> tuple[str, Filter, Any]:
    """What a rule does, independent of its id and of how its filter is spelled."""
    status = rule.get("Status")
    action = {k: rule[k] for k in ("Expiration", "AbortIncompleteMultipartUpload") if k in rule}
    return str(status), rule_filter(rule), sorted((k, sorted(v.items())) for k, v in action.items())


def merge_rules(existing: list[Rule], ours: list[Rule]) -> list[Rule]:
    """The bucket's rules with ours added. Foreign rules are kept as they are; a rule of ours
    (same id) is replaced; a rule with exactly our effect under another id counts as ours."""
    merged = [dict(r) for r in existing]
    for rule in ours:
        if any(_effect(r) == _effect(rule) for r in merged):
            continue
        same_id = [i for i, r in enumerate(merged) if r.get("ID") == rule["ID"]]
        if same_id:
            merged[same_id[0]] = rule
        else:
            merged.append(rule)
    return merged


def rules_equal(a: list[Rule], b: list[Rule]) -> bool:
    return sorted(map(repr, map(_effect, a))) == sorted(map(repr, map(_effect, b))) and len(a) == len(b)


#: The most days a rule's ``Days`` may count that evstore evaluates (a century).
MAX_RULE_DAYS = 36_500


def _days(value: Any) -> int:
    """A rule's ``Days`` or ``DaysAfterInitiation``: a whole number from 0 to ``MAX_RULE_DAYS``."""
    if type(value) is not int or not 0 <= value <= MAX_RULE_DAYS:
        raise ValueError(f"{value!r:.40} is not a number of days from 0 to {MAX_RULE_DAYS}")
    return value


def _date(value: Any) -> datetime:
    """A rule's ``Expiration.Date``: a time with its zone (botocore gives a datetime; a rules file, RFC 3339 text)."""
    date = value if isinstance(value, datetime) else datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    if date.tzinfo is None:
        raise ValueError(f"date {str(value)[:40]!r} has no time zone")
    return date


def checked_rules(rules: list[Rule], where: str) -> list[Rule]:
    """``rules``, once every part of them that evstore evaluates (filters, ``Days``, ``Date``)
    reads as S3 reads it; else ``StoreUnavailableError`` naming the first rule that does not (a
    damaged or planted rules file fails cleanly, never expires objects by a misreading)."""
    for index, rule in enumerate(rules, 1):
        try:
            if not isinstance(rule, dict):
                raise ValueError("not an object")
            rule_filter(rule)
            for name, field in (("Expiration", "Days"), ("AbortIncompleteMultipartUpload", "DaysAfterInitiation")):
                action = rule.get(name)
                if action is not None and not isinstance(action, dict):
                    raise ValueError(f"{name} is not an object")
                if action and field in action:
                    _days(action[field])
            if isinstance(expiration := rule.get("Expiration"), dict) and "Date" in expiration:
                _date(expiration["Date"])
        except (ValueError, TypeError, AttributeError, OverflowError) as exc:
            raise StoreUnavailableError(f"{where}: lifecycle rule {index} cannot be evaluated: {exc}") from None
    return rules


def _after_days(start: datetime, days: int) -> datetime:
    """S3's rounding: creation + N days, moved up to the next midnight UTC."""
    moment = start.astimezone(UTC) + timedelta(days=days)
    midnight = datetime.combine(moment.date(), time(), UTC)
    return midnight if moment == midnight else midnight + timedelta(days=1)


def expiry(rules: list[Rule], key: str, created: datetime, tags: Mapping[str, str], size: int) -> datetime | None:
    """When the rules expire this object (None: never)."""
    times = []
    for rule in rules:
        action = rule.get("Expiration")
        if rule.get("Status") != "Enabled" or not isinstance(action, dict) or not rule_filter(rule).matches(key, tags, size):
            continue
        if "Days" in action:
            times.append(_after_days(created, _days(action["Days"])))
        elif "Date" in action:
            times.append(_date(action["Date"]))
    return min(times, default=None)


def upload_abort(rules: list[Rule], key: str, initiated: datetime) -> datetime | None:
    """When the rules abort an incomplete multipart upload of this key (None: never).
    Tag filters cannot match an upload, as in S3."""
    times = []
    for rule in rules:
        action = rule.get("AbortIncompleteMultipartUpload")
        flt = rule_filter(rule)
        if rule.get("Status") == "Enabled" and isinstance(action, dict) and not flt.tags and key.startswith(flt.prefix):
            times.append(_after_days(initiated, _days(action.get("DaysAfterInitiation", 0))))
    return min(times, default=None)
