"""The README's examples run as written.

How it works, for whoever adds a README section:

* Every fenced block whose info string is ``python``, ``sh``, ``bash`` or ``shell`` is run,
  in README order, as one new user would run them one after another: shell blocks with
  ``bash -e -o pipefail`` (a failing command fails the block), Python blocks as a script.
  Blocks share a working directory (a copy of this checkout: the quick start's
  ``pip install .`` and paths such as ``infra/...`` work there), ``HOME`` and
  ``XDG_DATA_HOME`` (so the default local store carries state from block to block: a
  session one block makes, the next may use).
* Blocks with no info string (synopses, output, layouts) are never run. Give an example
  the ``sh`` or ``python`` tag and make it runnable.
* A block that cannot run here (it deploys to AWS, needs Docker, runs for minutes) gets an
  HTML comment on the line right before its fence, with the reason::

      <!-- not-run: deploys to an AWS account -->

  A ``not-run`` comment that is not right before a fence, or has no reason, fails the test.
* What the harness provides, standing in for what a user has: ``evstore`` and ``python`` on
  ``PATH`` (after the quick start, its own ``.venv`` first, as if activated); Python blocks run
  under this test's interpreter (the extras of ``.[dev]`` installed); ``AWS_ENDPOINT_URL``
  set to moto's server on 127.0.0.1 (the README's example endpoint ``http://127.0.0.1:5000``
  is rewritten to it), test credentials, and every bucket an ``s3://NAME`` URL in a runnable
  block names already created; no ``EVSTORE_*`` variable; ``OPENAI_BASE_URL`` pointing at a
  fake Responses API on 127.0.0.1 that answers every request with one short message, and
  ``OPENAI_AGENTS_DISABLE_TRACING=1``. Nothing reaches another network.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import msgspec
import pytest

ROOT = Path(__file__).parents[1]
README = ROOT / "README.md"
RUNNABLE = {"python": "python", "sh": "sh", "bash": "sh", "shell": "sh"}
EXAMPLE_ENDPOINT = "http://127.0.0.1:5000"
NOT_RUN = re.compile(r"<!--\s*not-run:(.*?)-->")


class Block(msgspec.Struct, frozen=True):
    lang: str  # the fence's info string ("" for none)
    code: str
    line: int  # 1-based line of the opening fence
    not_run: str | None  # the reason, when a not-run comment precedes the fence


def readme_blocks(text: str) -> list[Block]:
    lines = text.splitlines()
    blocks = []
    i = 0
    while i < len(lines):
        fence = re.match(r"^(`{3,})\s*([\w+-]*)", lines[i])
        if not fence:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith(fence.group(1))), None)
        assert end is not None, f"README line {i + 1}: a code fence is never closed"
        previous = lines[i - 1].strip() if i else ""
        marker = NOT_RUN.fullmatch(previous)
        reason = marker.group(1).strip() if marker else None
        blocks.append(Block(fence.group(2).lower(), "\n".join(lines[i + 1 : end]) + "\n", i + 1, reason))
        i = end + 1
    return blocks


def test_not_run_markers_are_placed_right_and_give_a_reason() -> None:
    text = README.read_text()
    lines = text.splitlines()
    for number, line in enumerate(lines, 1):
        if "<!--" in line and "not-run" in line:
            marker = NOT_RUN.fullmatch(line.strip())
            assert marker and marker.group(1).strip(), f"README line {number}: write <!-- not-run: the reason -->"
            following = lines[number] if number < len(lines) else ""
            assert following.startswith("```"), f"README line {number}: a not-run comment goes right before a fence"
    blocks = readme_blocks(text)
    assert {RUNNABLE[b.lang] for b in blocks if b.lang in RUNNABLE and b.not_run is None} == {"python", "sh"}


def test_readme_blocks_are_parsed_with_their_markers() -> None:
    sample = "text\n```sh\necho one\n```\n<!-- not-run: needs AWS -->\n```python\nprint(2)\n```\n```\nsynopsis\n```\n"
    assert readme_blocks(sample) == [
        Block("sh", "echo one\n", 2, None),
        Block("python", "print(2)\n", 6, "needs AWS"),
        Block("", "synopsis\n", 9, None),
    ]


# ---- the run ------------------------------------------------------------------


class _FakeResponses(BaseHTTPRequestHandler):
    """OpenAI's Responses API, as far as one non-streamed ``Runner.run`` needs it."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        answer = {
            "id": "resp_readme",
            "object": "response",
            "created_at": int(time.time()),
            "model": body.get("model", "model"),
            "status": "completed",
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "output": [
                {
                    "type": "message",
                    "id": "msg_readme",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": "Hello from the test model.", "annotations": []}],
                }
            ],
            "usage": {
                "input_tokens": 1,
                "output_tokens": 1,
                "total_tokens": 2,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens_details": {"reasoning_tokens": 0},
            },
        }
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def fake_openai() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeResponses)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/v1"
    server.shutdown()
    server.server_close()


def _copy_checkout(target: Path) -> None:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file() and not name.startswith(".venv"):
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)


def test_readme_examples_run_as_written(tmp_path: Path, moto_endpoint: str, fake_openai: str) -> None:
    import boto3

    blocks = [b for b in readme_blocks(README.read_text()) if b.lang in RUNNABLE and b.not_run is None]
    work = tmp_path / "checkout"
    work.mkdir()
    _copy_checkout(work)
    scripts = tmp_path / "blocks"
    scripts.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVSTORE_", "AWS_ENDPOINT", "VIRTUAL_ENV", "OPENAI_"))}
    env.update(
        HOME=str(tmp_path / "home"),
        XDG_DATA_HOME=str(tmp_path / "data"),
        AWS_ENDPOINT_URL=moto_endpoint,
        OPENAI_BASE_URL=fake_openai,
        OPENAI_API_KEY="readme-test",
        OPENAI_AGENTS_DISABLE_TRACING="1",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
    )
    (tmp_path / "home").mkdir()
    s3 = boto3.client("s3", endpoint_url=moto_endpoint)
    for bucket in sorted({m for b in blocks for m in re.findall(r"s3://([a-z0-9][a-z0-9.-]+[a-z0-9])", b.code)}):
        s3.create_bucket(Bucket=bucket)
    tools = os.path.dirname(sys.executable)

    for number, block in enumerate(blocks):
        code = block.code.replace(EXAMPLE_ENDPOINT, moto_endpoint)
        venv = work / ".venv" / "bin"  # the quick start's venv, once it exists: "activated"
        env["PATH"] = os.pathsep.join([*([str(venv)] if venv.is_dir() else []), tools, os.environ.get("PATH", "")])
        if RUNNABLE[block.lang] == "python":
            script = scripts / f"block_{number}_line_{block.line}.py"
            script.write_text(code)
            command = [sys.executable, str(script)]
        else:
            command = ["bash", "-e", "-o", "pipefail", "-c", code]
        done = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, (
            f"README line {block.line} ({block.lang} block) exited {done.returncode}\n"
            f"--- block ---\n{code}--- stdout ---\n{done.stdout[-3000:]}\n--- stderr ---\n{done.stderr[-3000:]}"
        )
