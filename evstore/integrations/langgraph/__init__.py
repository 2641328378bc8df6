"""LangGraph checkpoints on evstore: ``EvstoreSaver``, a ``BaseCheckpointSaver``.

Install with ``pip install 'evstore[langgraph]'``; this package imports LangGraph,
``import evstore`` never does::

    from evstore.integrations.langgraph import EvstoreSaver

    graph = builder.compile(checkpointer=EvstoreSaver(evstore.open_store("s3://bucket/agents")))
    graph.invoke(inputs, {"configurable": {"thread_id": "chat-42"}})

Design
------
**One evstore session per (thread, namespace).** Its id is ``prefix`` + the
thread id, then ``.`` + the namespace for a non-root namespace, each part
encoded reversibly: ``[A-Za-z0-9-]`` stay as they are (a uuid4 thread id is
readable in ``evstore list``), every other UTF-8 byte becomes ``_`` + two hex
digits (``child:abc`` -> ``child_3aabc``), so ``.`` only ever separates the two
parts and ``..`` never appears. A part that would make the id longer than
evstore's 128 characters (a thread part over 80 characters with the prefix, or
a deep subgraph namespace) is ``_h`` + 40 hex digits of its SHA-256 instead
(``_h`` is never an escape); the original string is kept in the session's events
(a ``name`` event for a hashed thread id, every checkpoint for the namespace),
so ``list`` and ``copy_thread`` still recover it. Thread ids must be non-empty.

Each session's events are single messages ``{"role": "system", "content": null,
"meta": {"langgraph": record}}`` of four kinds:

* ``cp`` -- one per ``put``: the checkpoint without its channel values and the
  metadata (LangGraph's serializer, base64), the blobs of **only the channels in
  ``new_versions``**, and ``r``: for every channel with a stored value, the seq
  of the event holding its blob at the current version (unchanged channels are
  referenced, never rewritten, so storage grows with what changed). ``a`` holds,
  per channel, where the delta-channel ancestor walk must start reading.
* ``w`` -- one per ``put_writes`` call: the writes not already stored for that
  (checkpoint, task_id, idx) -- a repeated call appends nothing (special channels
  ERROR/INTERRUPT/... keep the latest value, as LangGraph's savers do).
* ``x`` -- a retraction: checkpoint ids (and their writes) hidden from every
  read from then on (``prune`` keep_latest, ``delete_for_runs``).
* ``name`` -- the original thread id of a hashed session id.

Every event also carries ``lcp``/``lid``: the seq and id of the latest live
checkpoint (the greatest id, as LangGraph's savers order them) once it is
applied. So ``get_tuple`` of the latest checkpoint reads the head event, the
events from that checkpoint to the head (its pending writes: one super-step's),
and one event per distinct seq its channel values live at: a bounded number of
requests that does not grow with the thread (a new process's first read of a
session finds its head as ``Store.open`` does: past 1,000 events without
segments, a few HEAD probes more, O(log n)). ``get_tuple`` of an older
``checkpoint_id`` reads from that checkpoint to the head (the first time a
saver meets an id, the whole session); ``list(limit=k)`` reads each session
backwards from its head, in chunks that double, only as far as its k newest
checkpoints and their writes reach (``_reads.newest_fold``), and without a limit, or
with ``before``, replays the sessions it lists.
A saver keeps, per session it used (the 1,024 most recent), its writer, where
the recent checkpoints are and their small channel values; its next read of
that session lists only what came after the head it knows (``Session.catch_up``:
one LIST when nothing came, and the records another process appended taken in
as they are read), so a graph's turn on a thread it holds reads one LIST at any
length, then puts.

**Concurrency.** Each saver keeps one evstore writer per session and appends
at the head it last read (``get_tuple``, ``get_delta_channel_history``) or wrote; every append is a
conditional PUT. A second process that read an older state and then puts is
refused with ``evstore.WriteConflictError`` (nothing is overwritten); read the
thread again (``get_tuple``) to continue from what is there. Within one saver a
lock per session serializes the parallel tasks' ``put_writes``.

**Copies and deletes.** ``copy_thread`` forks each of the thread's sessions
(``Store.fork``: O(1), the copy shares the source's objects).
``delete_thread`` and ``prune(strategy="delete")`` delete the thread's sessions
(``Store.delete``: their objects are removed at once, or by ``evstore gc`` once
no fork needs them). ``prune(strategy="keep_latest")`` and ``delete_for_runs``
append retractions: the checkpoints are gone for every read, but nothing is
freed (the log is append-only; the audit view keeps them); reclaim their
storage by deleting the thread. Retracted checkpoints still feed
``get_delta_channel_history`` of the checkpoints that remain, so pruning never
breaks a ``DeltaChannel``. ``delete_for_runs`` replays every session under the
prefix (no index of runs is kept): O(store) requests. A thread id that was
deleted while a fork of it lives cannot be used again until gc removes it.

Under LangGraph's default ``durability="async"``, LangGraph calls ``put`` in the
background with live channel objects (a join barrier's set), so a checkpoint
can hold a value the next step already changed; this saver serializes them as
early as it can, but only ``durability="sync"`` makes every checkpoint exact.

Limits: a checkpoint's changed channels (base64 of LangGraph's serialization)
must fit in one evstore event (``Store.max_event_bytes``, 5 MiB by default).
Async methods run the sync ones in ``AsyncStore``'s bounded pool; a cancelled
call settles before ``CancelledError`` is raised.
"""

from __future__ import annotations

from ._mapping import decode_session_id, session_id_for
from ._saver import EvstoreSaver

__all__ = ["EvstoreSaver", "decode_session_id", "session_id_for"]
