"""moto's S3 server in a process of its own, for the benchmarks: ``python benchmarks/_moto_server.py [--stock-list]``.

Started by ``benchmarks/_s3env.py``'s ``Env``; not a public interface. Why a process of its
own: a server in the benchmark's process shares one GIL with the client, so
work the client does in parallel (evstore's bounded parallel GETs, its segment
prefetch) cannot overlap the server's; with its own interpreter, on two or
more cores, it can, as it would against S3.

Protocol, one JSON object per line:

* at startup the server prints ``{"port": P, "fast_list": bool}`` once it
  listens on 127.0.0.1:P (after checking the page-proportional listing of
  ``_moto_fastlist`` against moto's own, unless ``--stock-list``);
* then it reads commands on stdin and answers each on stdout:
  ``{"op": "bulk", "bucket": B, "file": F}`` stores the objects pickled in F
  (a stream of ``(key, data, metadata)`` tuples written by _s3env.Env) straight
  into its S3 backend, the setup shortcut an Env takes with a server in its own process,
  and answers ``{"stored": N}``;
* EOF on stdin stops the server.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import socket
import sys
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _backend() -> Any:
    from moto.core import DEFAULT_ACCOUNT_ID  # type: ignore[attr-defined]
    from moto.s3.models import s3_backends

    return s3_backends[DEFAULT_ACCOUNT_ID]["aws"]


def _bulk(bucket: str, path: str) -> int:
    backend = _backend()
    count = 0
    with open(path, "rb") as stream:  # written by _s3env.Env a moment ago, in a directory of its own
        while True:
            try:
                key, data, metadata = pickle.load(stream)
            except EOFError:
                return count
            stored = backend.put_object(bucket, key, data)
            if metadata:
                stored.set_metadata({f"x-amz-meta-{k}": v for k, v in metadata.items()})
            count += 1


def main() -> int:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
    fast = "--stock-list" not in sys.argv[1:]
    if fast:
        from benchmarks import _moto_fastlist

        _moto_fastlist.install()
        check_bucket = f"evb-listcheck-{uuid.uuid4().hex[:8]}"
        _backend().create_bucket(check_bucket, "us-east-1")
        _moto_fastlist.check(_backend(), check_bucket)  # raises (and the process exits non-zero) on any mismatch
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    print(json.dumps({"port": port, "fast_list": fast}), flush=True)
    try:
        for line in sys.stdin:
            command = json.loads(line)
            if command.get("op") == "bulk":
                print(json.dumps({"stored": _bulk(command["bucket"], command["file"])}), flush=True)
            else:
                print(json.dumps({"error": f"unknown op {command.get('op')!r}"}), flush=True)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
