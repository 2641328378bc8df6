"""The read path: a session's manifest and listing -> a verified stream of events.

Decoding, session keys, the hash chain, segments, lineage across forks and
bounded prefetch live here; every function takes the shared ``StoreContext``.
This module names the read path's public functions; each lives in the room of
its concern, and a room imports only the rooms before it in this list:

* ``_manifest``: the manifest and the listing of the other objects (``load``,
  ``Meta``, tombstones, the forks a session keeps alive);
* ``_events``: one event object: its GET, decoding, session keys, opening, rekey records;
* ``_listing``: the LIST pages of the event names, the head, the ids of the sessions;
* ``_loose``: loose events fetched in order, and a tail's GETs sent early;
* ``_vouching``: which events a segment is trusted for (the one place that decides it);
* ``_segments``: a session's own events, from vouched segments and the loose events;
* ``_lineage``: the events across forks, with the hash chain checked;
* ``_operations``: replay, the context view, info;
* ``_follow``: polling and following a session as writers append.

Requests (N = events, S = segments):

* load: GET manifest, LIST of the non-event objects (names after the digits).
* find the head: one LIST from the newest segment (or seq 1) while fewer than
  1,000 events follow it (64 in a session with segments, two LISTs to 1,063:
  ``_TAIL_FIRST_PAGE``); beyond that, HEAD probes that gallop and bisect:
  O(log N) in the worst case. Names among the events that are no seqs cost at most a LIST
  page per 1,000 of them, and a run of ``<seq>~...`` names one page (``_ids.seq_after``).
* replay: load, one GET per segment and a LIST per 1,000 events the segments
  cover (the listing whose ETags vouch for them), 2 * concurrency requests and
  two groups' bytes in flight,
  with the LIST of the loose tail; then a LIST per 1,000 loose events and their GETs,
  ``2 * concurrency`` in flight.
* a fork whose manifest records its ancestry: its load; then, in one round on the context's wide
  pool, each ancestor's manifest GET and listing, the GETs of each inherited range of up to 32
  events, and the GETs of the fork's own events its first listing named; then the segments of a
  longer range (an ancestor's short loose tail to the fork seq by its seqs, no LIST): 3 dependent
  round trips at any depth (``_send_ahead``).
"""

from ._events import (
    RawEvent,
    canonical_hash,
    check_key_id,
    decode_at,
    decode_raw,
    get_event_bytes,
    is_fence,
    load_records,
    open_body,
    records,
    rekeyed_key_id,
    salt_key,
    same_event,
    session_key,
    to_event,
)
from ._follow import Polled, follow, poll
from ._lineage import MAX_FORK_DEPTH, event_hash, lineage, lineage_batches
from ._listing import find_head, list_sessions, missing_start
from ._manifest import (
    Loaded,
    Meta,
    cancel_load,
    deleted,
    finish_load,
    first_name,
    first_own_seq,
    fork_points,
    gone,
    held_by_forks,
    live_forks,
    load,
    read_manifest,
    read_meta,
    reads_deleted_parent,
    recorded_forks,
    send_load,
    tombstoned,
)
from ._operations import SessionInfo, check_range, context, folded, info, replay
from ._segments import own_batches, own_raw, segment_chain, segment_runs

__all__ = [
    "Loaded",
    "MAX_FORK_DEPTH",
    "Meta",
    "Polled",
    "RawEvent",
    "SessionInfo",
    "cancel_load",
    "canonical_hash",
    "check_key_id",
    "check_range",
    "context",
    "decode_at",
    "decode_raw",
    "deleted",
    "event_hash",
    "find_head",
    "finish_load",
    "first_name",
    "first_own_seq",
    "folded",
    "follow",
    "fork_points",
    "get_event_bytes",
    "gone",
    "held_by_forks",
    "info",
    "is_fence",
    "lineage",
    "lineage_batches",
    "list_sessions",
    "live_forks",
    "load",
    "load_records",
    "missing_start",
    "open_body",
    "own_batches",
    "own_raw",
    "poll",
    "read_manifest",
    "read_meta",
    "reads_deleted_parent",
    "recorded_forks",
    "records",
    "rekeyed_key_id",
    "replay",
    "salt_key",
    "same_event",
    "segment_chain",
    "segment_runs",
    "send_load",
    "session_key",
    "to_event",
    "tombstoned",
]
