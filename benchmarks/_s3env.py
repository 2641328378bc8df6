"""The S3 endpoint the benchmarks run against, and their bulk setup.

Not a public interface. ``Env`` starts moto's S3 server on 127.0.0.1 (in a process of its
own, ``_moto_server.py``, so that client and server do not share one GIL; or in this process),
unless ``AWS_ENDPOINT_URL`` / ``AWS_ENDPOINT_URL_S3`` names an endpoint; it makes buckets and
stores setup objects as they are. ``load_rgw`` loads ``infra/rgw.py``, which starts a throwaway
Ceph RGW where its binaries are installed.

Bulk setup (sessions of thousands of events that are not themselves being timed) is written by
evstore into a MemoryStore and then copied byte for byte into the bucket: straight into moto's
backend when the server is ours (through the server process's setup channel), else by parallel
PUTs. The objects are exactly what appends would have written; only the setup is faster.
evstore is imported only when a session is built (``resume.py`` chooses its source first).
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

from benchmarks._data import message
from benchmarks._harness import REPO


def load_rgw() -> ModuleType:
    spec = importlib.util.spec_from_file_location("evstore_infra_rgw", REPO / "infra" / "rgw.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Env:
    """The endpoint (our own moto server unless AWS_ENDPOINT_URL names one), buckets, bulk setup, fixtures.

    ``segment_size``: the segments of a compacted fixture (``fixture(n, "compacted")``; compact's default)."""

    def __init__(self, segment_size: int = 1000, *, stock_list: bool = False, in_process: bool = False) -> None:
        self.segment_size = segment_size
        self.fast_list = False
        self.endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or ""
        #: "process" (moto in a process of its own), "thread" (moto in this process) or "" (an external endpoint)
        self.server_mode = ""
        self.server: Any = None
        self._server_process: subprocess.Popen[str] | None = None
        self._bulk_dir = ""
        if not self.endpoint:
            # our own server: dummy credentials, never the user's
            os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
            if in_process:
                self._start_thread_server(stock_list)
            else:
                self._start_process_server(stock_list)
        os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
        import boto3
        from botocore.config import Config as BotoConfig

        self.setup = boto3.session.Session().client(
            "s3",
            endpoint_url=self.endpoint,
            config=BotoConfig(
                max_pool_connections=32, retries={"mode": "standard", "max_attempts": 5}, s3={"addressing_style": "path"}
            ),
        )
        self._fixtures: dict[tuple[str, int, str], str] = {}
        #: the event bytes of each fixture, back to back (for the single-object bound)
        self.joined: dict[tuple[str, int, str], bytes] = {}
        self._shared_bucket = ""
        if self.fast_list and self.server_mode == "thread":
            from benchmarks import _moto_fastlist

            _moto_fastlist.check(self.moto_backend(), self.new_bucket("listcheck"))

    def _start_thread_server(self, stock_list: bool) -> None:
        import logging

        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        port = free_port()
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        self.server.start()
        self.endpoint = f"http://127.0.0.1:{port}"
        self.server_mode = "thread"
        if not stock_list:
            from benchmarks import _moto_fastlist

            _moto_fastlist.install()
            self.fast_list = True

    def _start_process_server(self, stock_list: bool) -> None:
        command = [sys.executable, str(REPO / "benchmarks" / "_moto_server.py")] + (["--stock-list"] if stock_list else [])
        proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO)
        self._server_process = proc
        assert proc.stdout is not None
        line = proc.stdout.readline()  # the fast-list check runs first: a mismatch ends the server (and the run)
        if not line:
            raise RuntimeError(f"the moto server process exited with {proc.wait()} before listening")
        hello = json.loads(line)
        self.endpoint = f"http://127.0.0.1:{hello['port']}"
        self.fast_list = bool(hello["fast_list"])
        self.server_mode = "process"
        self._bulk_dir = tempfile.mkdtemp(prefix="evstore-bench-bulk-")

    def _server_command(self, command: Mapping[str, Any]) -> dict[str, Any]:
        proc = self._server_process
        assert proc is not None and proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(command) + "\n")
        proc.stdin.flush()
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the moto server process exited with {proc.wait()}")
        return dict(json.loads(line))

    def moto_backend(self) -> Any:
        from moto.core import DEFAULT_ACCOUNT_ID  # type: ignore[attr-defined]
        from moto.s3.models import s3_backends

        return s3_backends[DEFAULT_ACCOUNT_ID]["aws"]

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()
        if self._server_process is not None:
            assert self._server_process.stdin is not None
            self._server_process.stdin.close()  # EOF: the server stops
            try:
                self._server_process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._server_process.kill()
                self._server_process.wait()
        if self._bulk_dir:
            import shutil

            shutil.rmtree(self._bulk_dir, ignore_errors=True)

    def new_bucket(self, tag: str) -> str:
        name = f"evb-{tag}-{uuid.uuid4().hex[:8]}"
        self.setup.create_bucket(Bucket=name)
        return name

    def s3store(self, bucket: str) -> Any:
        from evstore._backends._s3 import S3Store

        return S3Store(bucket, endpoint_url=self.endpoint)

    def bulk_put(self, bucket: str, items: Iterable[tuple[str, bytes, Mapping[str, str]]]) -> int:
        """Setup only: store objects as they are (into moto's backend directly when the server is ours)."""
        count = 0
        if self.server_mode == "thread":
            backend = self.moto_backend()
            for key, data, metadata in items:
                stored = backend.put_object(bucket, key, data)
                if metadata:
                    stored.set_metadata({f"x-amz-meta-{k}": v for k, v in metadata.items()})
                count += 1
            return count
        if self.server_mode == "process":
            import pickle

            # in batches, through a file the server process loads into its backend
            path = Path(self._bulk_dir) / "batch.pickle"
            batch = 0
            stream = path.open("wb")
            try:
                for key, data, metadata in items:
                    pickle.dump((key, data, dict(metadata)), stream, protocol=pickle.HIGHEST_PROTOCOL)
                    batch += 1
                    if batch == 5_000:
                        stream.close()
                        count += int(self._server_command({"op": "bulk", "bucket": bucket, "file": str(path)})["stored"])
                        stream, batch = path.open("wb"), 0
            finally:
                stream.close()
            if batch:
                count += int(self._server_command({"op": "bulk", "bucket": bucket, "file": str(path)})["stored"])
            return count

        def put(item: tuple[str, bytes, Mapping[str, str]]) -> None:
            key, data, metadata = item
            self.setup.put_object(Bucket=bucket, Key=key, Body=data, Metadata=dict(metadata))

        with ThreadPoolExecutor(16) as pool:
            for _ in pool.map(put, items):
                count += 1
        return count

    @property
    def shared_bucket(self) -> str:
        if not self._shared_bucket:
            self._shared_bucket = self.new_bucket("main")
        return self._shared_bucket

    def fixture(self, events: int, kind: str = "loose", keyring: Any = None, bucket: str | None = None) -> str:
        """A session of ``events`` 1 KiB messages in the shared bucket (``kind``: loose or compacted)."""
        bucket = bucket or self.shared_bucket
        cache = (bucket, events, kind)
        if cache in self._fixtures:
            return self._fixtures[cache]
        sid = f"{kind}-{events}-{uuid.uuid4().hex[:6]}"
        segment = self.segment_size
        memory, _ = build_in_memory(sid, events, keyring=keyring, compact=segment if kind == "compacted" else None)
        self.bulk_put(bucket, memory_objects(memory))
        self._fixtures[cache] = sid
        self.joined[cache] = b"".join(event_bytes(memory, sid))
        return sid

    def keys(self, bucket: str) -> Iterable[str]:
        """Every key in ``bucket`` (setup's client: not counted)."""
        for page in self.setup.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            for item in page.get("Contents", []):
                yield str(item["Key"])


def build_in_memory(
    sid: str, events: int, *, keyring: Any = None, compact: int | None = None, size: int = 1024
) -> tuple[Any, Any]:
    from evstore import MemoryStore, Store

    memory = MemoryStore()
    store = Store(memory, keyring=keyring)
    session = store.create(sid)
    for i in range(events):
        session.append(message(i, size))
    if compact:
        store.compact(sid, segment_size=compact)
    return memory, session


def memory_objects(memory: Any, prefix: str = "") -> Iterable[tuple[str, bytes, Mapping[str, str]]]:
    for info in memory.list(prefix):
        stored = memory.get(info.key)
        yield stored.key, stored.data, stored.metadata


def event_bytes(memory: Any, sid: str) -> list[bytes]:
    prefix = f"sessions/{sid}/"
    return [memory.get(i.key).data for i in memory.list(prefix) if i.key[len(prefix) :].isdigit()]


def seq_of(key: str) -> int:
    """An event object's seq, 0 for any other key."""
    name = key.rsplit("/", 1)[-1]
    return int(name) if name.isdigit() else 0
