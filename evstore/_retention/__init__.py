"""Retention: installing lifecycle rules, previewing them (their evaluation is the pure
``evstore._lifecycle``), and garbage collection.

Where it lives: ``_rules`` installs and previews the rules; ``_gc`` runs gc (``collect``: its
listings, in ranges that ``_ranges`` splits); ``_judge`` sends the GETs a session's decision
needs and acts on it; ``_plan`` holds the decisions' pure parts and the report; ``_deletes``
batches the deletes, aborts uploads and counts every request; ``_parse`` reads the command's
durations and times.

gc is session-granular and fork-aware. For each session prefix it removes:

* remnants of expired sessions: no manifest (lifecycle rules delete object by
  object, the manifest, created first, first);
* deleted sessions (tombstone) that no live fork needs, once the tombstone is
  older than ``FENCE_HOLD`` (until then the fence keeps stale writers out:
  see ``_forks``), the tombstone last;
* orphans: objects of a prefix without a manifest (a stale writer's append
  after the session was removed) — the same case as a remnant;
* fork markers whose fork no longer exists;
* a live session's young segments that a higher-level segment covers
  (``SegmentCoverage``: what a writer that may not delete leaves behind), from
  the listing alone;
* incomplete multipart uploads under the store's sessions;
* with ``keep``, the ephemeral sessions under the prefix beyond the newest
  ``keep`` of those older than ``grace`` (by when the store stored each
  manifest): deleted (fenced), their objects removed by a run after
  ``FENCE_HOLD``. A session younger than the grace is neither ranked nor
  counted.

It never touches an object younger than ``grace``, nor any object of a live
session except dead fork markers (and, with ``apply_lifecycle``, what the
bucket's own rules would have expired: the same semantics as S3). Only the
manifest, the tombstone, the rules and the grace decide: a session whose
manifest exists but does not decode, or whose first events are missing, is
left alone and reported (``GcReport.left_alone``), since junk objects anyone
could create must never make gc remove a live session.

How it lists. gc reads ``<root>/sessions/<prefix>`` with flat listings (no
delimiter) of key ranges, one page of 1,000 keys at a time, up to ``concurrency``
ranges at once. It starts with one range, the whole prefix; once the listing has
shown 2,000 objects per range, a range is split in two at a name about halfway
between where its listing is and where it ends (spelled in the characters of the
ids seen so far, from the id alphabet ``[A-Za-z0-9._-]``), and the upper half is
listed alongside. The last range ends, as far as the split can tell, where the
block of ids that start as every id listed so far does (``s0000000``...
``s0000399``: at ``s0001``), or, if they share no start, past every name; a
boundary past the ids costs one LIST that finds none, and halves the gap the next
time. A range that a page or two most likely finish (at the pace its pages went
so far) is not split: its halves would cost a LIST more. A boundary is a
name without ``/``, so it never falls inside a session: all of a session's keys
share the prefix ``<id>/`` and sort together, on one side of it. A session may
span pages of its range; its objects are gathered until the next session's
first key, or the range's end.

What costs a request. A session whose listing shows nothing to do costs none of
its own: a manifest, no tombstone, its first event seq 1 (or none) and no
older than the manifest, no fork marker older than the grace and, with rules, no
object older than the grace that the rules would expire now under either
retention class (a listing shows no tags). A manifest whose listed size no
manifest can have is left alone, from the listing too. Only the others are read,
``4 x concurrency`` sessions at a time, each one's independent requests together:

* no manifest listed (a remnant, an orphan, a deleted session's rest): none;
* any other that needs a decision: a GET of its manifest, then
  - with a tombstone: a GET of the tombstone, sent with the manifest's (its uid
    must be this incarnation's, and it records the forks alive at the delete),
    and, once it is older than ``FENCE_HOLD``, a GET per fork it records whose
    marker is listed (the fork's manifest);
  - a live session: a GET per fork marker older than the grace (the fork's
    manifest), sent with the manifest's.
  This is every fork with events of its own and every re-created id (their
  first seq is not 1), and, with ``keep``, every live session under the prefix
  (its retention class is in its manifest);
* a session of more than ``HELD`` objects that is to be removed (or, with
  rules, has objects due): its pages listed again (only its names that decide
  are held), as the first listing of it did.

Requests per gc, as ``GcReport.requests`` reports them (counted as sent):
``L + G + D + U + [1 lifecycle GET with apply_lifecycle]``, where
``L <= objects/1000 + R`` LIST pages with ``R <= 1 + objects/2000`` ranges
(so ``L <= 1.5 * objects/1000 + 1``: the objects under the prefix), ``G`` the
GETs above, ``D`` = ⌈keys removed/1,000⌉ batch deletes, plus one batch per
1,000 tombstones, sent after every batch before them, and one batch at the end
for what is left of each, ``U`` = one LIST of incomplete uploads (sent with the
first LIST of the sessions) and one request per upload aborted, plus
``delete``'s requests per session beyond ``keep``. Dependent round trips: about ``L / concurrency`` listing rounds
(after the first few, while ranges split) and the sessions read divided by
``4 x concurrency`` (one round each, two for a deleted session with forks),
with the deletes in flight alongside. Memory: per range in flight, one page and one session's
objects (at most ``HELD``), and a bounded queue of sessions waiting for their
GETs; the delete batches in flight.
"""

from ._gc import collect
from ._parse import parse_duration, parse_time
from ._plan import GcReport, OnRemove, SegmentCoverage
from ._ranges import between, block_end, pages_left
from ._rules import ExpiringObject, apply_lifecycle_rules, preview

__all__ = [
    "ExpiringObject",
    "GcReport",
    "OnRemove",
    "SegmentCoverage",
    "apply_lifecycle_rules",
    "between",
    "block_end",
    "collect",
    "pages_left",
    "parse_duration",
    "parse_time",
    "preview",
]
