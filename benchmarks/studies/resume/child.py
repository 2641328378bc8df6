"""The child of ``benchmarks/resume.py``: one resume + append in a fresh process (``resume.py --child ARGS``).

It sets up without a request, says ready, waits for go on stdin, then resumes and appends one
message, timed, and prints its time, CPU and the requests its client sent."""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from benchmarks._data import message, strands_message
from benchmarks._harness import count_requests, total
from benchmarks.studies.resume.strands_sessions import snapshot_storage, strands_agent, strands_client


def unpack_resume(result: Any) -> tuple[Any, list[Any]]:
    """``Store.resume(id)``'s writer and context, whatever shape it returns them in."""
    if isinstance(result, tuple) and len(result) == 2:
        first, second = result
        return (first, list(second)) if hasattr(first, "append") else (second, list(first))
    writer = next((getattr(result, n) for n in ("session", "writer") if hasattr(result, n)), result)
    context = next((getattr(result, n) for n in ("context", "messages") if hasattr(result, n)), None)
    if context is None or not hasattr(writer, "append"):
        raise TypeError(f"cannot find the writer and the context in Store.resume's {type(result).__name__}")
    return writer, list(context() if callable(context) else context)


def child(args: dict[str, Any]) -> dict[str, Any]:
    """Set up (no request), say ready, wait for go; then resume + append one message, timed."""
    kind, endpoint, bucket, sid = args["kind"], args["endpoint"], args["bucket"], args["sid"]
    index = int(args["index"])
    run: Callable[[], int]
    sent: Mapping[str, int]  # the requests the client sends, counted as it sends them
    if kind == "evstore":
        from evstore import Store
        from evstore._backends._s3 import S3Store

        backend = S3Store(bucket, endpoint_url=endpoint)
        store = Store(backend)
        # "imports everything first", as the Strands children import strands: the modules that
        # ``import evstore`` leaves to the first resume (about 15 ms of a cold process's CPU)
        for name in ("evstore._read", "evstore._write", "evstore._tree", "zstandard"):
            importlib.import_module(name)

        sent = backend.requests

        def run() -> int:
            if args["call"] == "resume":
                writer, context = unpack_resume(store.resume(sid))
            else:
                writer = store.open(sid)
                context = store.context(sid)
            writer.append(message(index))
            return len(context)

    else:
        import boto3

        os.environ.setdefault("OTEL_SDK_DISABLED", "true")
        session = boto3.session.Session()
        strands_client(session, endpoint)  # loads the service model: later clients of this session are cheap
        agent = strands_agent()
        if kind == "strands-s3":
            from strands.session.s3_session_manager import S3SessionManager

            sent = count_requests(session.events)  # clients made from the session after this inherit the hook

            def run() -> int:
                # the manager makes its client and reads the session when constructed: part of the resume
                manager = S3SessionManager(sid, bucket, boto_session=session, endpoint_url=endpoint)
                manager.initialize(agent)
                size = len(agent.messages)
                appended: Any = strands_message(index)
                manager.append_message(appended, agent)
                return size

        elif kind == "strands-snapshot":
            from strands.session.snapshot_session_manager import SnapshotSessionManager

            client = strands_client(session, endpoint)
            sent = count_requests(client.meta.events)
            manager = SnapshotSessionManager(sid, storage=snapshot_storage(bucket, client))

            def run() -> int:
                manager.initialize(agent)
                size = len(agent.messages)
                agent.messages.append(strands_message(index))
                manager.sync_agent(agent)  # what the agent does after its turn: saves the whole snapshot
                return size

        else:
            raise SystemExit(f"unknown child kind {kind!r}")
    print(json.dumps({"ready": True}), flush=True)
    if sys.stdin.readline().strip() != "go":
        raise SystemExit("child: no go")
    cpu, started = time.process_time(), time.perf_counter()
    context = run()
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    return {"seconds": seconds, "cpu": cpu, "client_requests": total(sent), "context": context}
