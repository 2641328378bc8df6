"""OpenTelemetry spans and metrics for evstore's store operations: ``instrument(store)``.

Install with ``pip install 'evstore[otel]'`` (the OpenTelemetry API; the SDK, or any other
implementation, is the application's). This module imports OpenTelemetry; ``import evstore``
never does, and a ``Store`` that was not instrumented pays nothing::

    from evstore.integrations.opentelemetry import instrument

    store = instrument(evstore.open_store("s3://bucket/agents"))   # the global providers
    writer = store.open("chat-42", create=True)                    # span evstore.open
    writer.append({"role": "user", "content": "hi"})               # span evstore.append: 1 PUT

What is measured
----------------
Each operation of the instrumented store and of the writers it makes is one span named
``evstore.<operation>`` (kind INTERNAL, a child of the span current when it is called),
counted in the metrics below. The store's operations: ``open``, ``create``, ``resume``,
``fork``, ``replay``, ``context``, ``info``, ``compact``, ``delete``, ``gc``, ``verify`` and
``verify_all``; a writer's: ``append``, ``rewind``, ``pop``, ``clear``, ``fork``, ``catch_up``
and ``refresh``. Other methods (``list_sessions``, ``follow``, ``shred``, ...) run as on the
store itself, with no span. The framework adapters that resume through
``integrations._common.SessionLog`` (OpenAI Agents, Strands, Pydantic AI) do so below the
facade (``_write.resume_folded``): that resume and the writer it makes are not spanned; what
they call on the store's own methods is.

Span attributes:

* ``gen_ai.conversation.id``: the session id (the OpenTelemetry GenAI semantic conventions'
  name for a conversation); a fork's is its source, ``evstore.fork.target`` its new session.
  ``gc`` and ``verify_all`` name no session.
* ``evstore.outcome``: ``ok``, or the class name of the exception the
  operation raised (``SessionNotFoundError``, ``WriteConflictError``, ...), which is also
  ``error.type`` (fully qualified) with the span status ERROR (description: the class name).
  The exception is not recorded as a span event: its message can quote what it refused.
* ``evstore.requests`` and, by kind, ``evstore.requests.put`` / ``.get`` / ``.head`` /
  ``.list`` / ``.delete``: the requests the operation sent to the backend, from any thread
  (reads prefetched on the store's pool, gc's and verify_all's workers). A request the backend
  retried (``S3Store``'s transient failures) counts once; a batch delete counts as the
  DELETE requests it took (one per 1,000 keys).
* ``evstore.bytes.up`` / ``evstore.bytes.down``: the object bodies sent (PUT) and received
  (GET). That is what the backend interface knows: LIST and HEAD responses, headers and
  metadata are not in it.
* ``evstore.round_trips``: dependent round trips, the longest chain of the operation's requests
  each of which was sent after the one before it had answered (as ``benchmarks/`` count them):
  1 for requests sent side by side, N for N sent one after another; a batch delete of N
  requests counts N. Over a backend that answers at once (``MemoryStore``) requests meant to
  overlap rarely do, so there round trips come out near the requests.
* ``evstore.seq`` (append, rewind, clear: the seq written); ``evstore.events`` (replay,
  catch_up: the events returned; verify_all: the verdicts); ``evstore.stream.complete``
  (replay, verify_all: whether the caller read the stream to its end).

A count or size that is zero is left out (an append has ``evstore.requests.put`` = 1 and no
other kind): each attribute costs the SDK a validation on every span.

**No message content, by default and always**: no attribute, metric attribute or status holds a
message, a tool call, an argument or a result; only ids, counts, sizes and class names.

A stream (``replay``, ``verify_all``) is one span from the call to the stream's end: its last
item, its error, or the caller closing it (or dropping it, when it is collected). Its duration
therefore includes the caller's own work between items; its requests are the stream's only.

Metrics (attributes ``evstore.operation`` and, on the first two, ``evstore.outcome``; never
the session id, which would make a series per session):

* ``evstore.operation.duration`` (histogram, seconds; its count is the operations too);
* ``evstore.operations`` (counter): operations finished;
* ``evstore.requests`` (counter, also by ``evstore.request.kind``: PUT, GET, HEAD, LIST, DELETE);
* ``evstore.io`` (counter, bytes, by ``network.io.direction``: ``transmit`` for PUT bodies,
  ``receive`` for GET bodies).

The three counters are observable counters (cumulative totals, reported when the reader
collects), so that an operation costs one histogram record, not four synchronous adds; round
trips are on the spans only (a histogram of them would cost another record per operation).

How
---
``instrument`` returns an ``InstrumentedStore``, a ``Store`` over the same shared context (the
same backend, caches and thread pool: the original store stays usable, uninstrumented, and
closing either closes both). Each operation runs on a copy of that context whose backend is a
``Forwarding`` of its own (``_backend.OperationBackend``) that tallies the operation's requests, bytes
and round trips, the way ``gc`` counts its requests: work sent to any thread is counted where
it belongs, and concurrent operations never mix. Writers it makes are ``Session`` objects of
the subclass ``InstrumentedSession``, whose operations do the same around ``Session``'s own.
"""

from __future__ import annotations

from ._names import CONVERSATION_ID as CONVERSATION_ID
from ._names import KINDS as KINDS
from ._session import InstrumentedSession
from ._store import InstrumentedStore, instrument

__all__ = ["InstrumentedSession", "InstrumentedStore", "instrument"]
