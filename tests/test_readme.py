"""The README's examples run as written, and so do those of ``docs/``; their links resolve.

How it works, for whoever adds a README section or a ``docs/`` page:

* Every fenced block whose info string is ``python``, ``sh``, ``bash`` or ``shell`` is run,
  README.md's first, in README order, then each page of ``docs/`` in the order ``DOCS`` lists
  them (a page there that ``DOCS`` does not list fails the test), each page's blocks in page order:
  as one new user would run them one after another. Shell blocks run with
  ``bash -e -o pipefail`` (a failing command fails the block), Python blocks as a script.
  Blocks share a working directory (a copy of this checkout: the quick start's
  ``pip install .`` and paths such as ``infra/...`` work there), ``HOME`` and
  ``XDG_DATA_HOME`` (so the default local store carries state from block to block: a
  session one block makes, a later block, on the same page or a page run after it, may use;
  ``docs/commands.md`` uses the sessions the README's Concepts example makes).
* Blocks with no info string (synopses, output, layouts) are never run. Give an example
  the ``sh`` or ``python`` tag and make it runnable.
* A block that cannot run here (it deploys to AWS, needs Docker, runs for minutes) gets an
  HTML comment on the line right before its fence, with the reason::

      <!-- not-run: deploys to an AWS account -->

  A ``not-run`` comment that is not right before a fence, or has no reason, fails the test
  (in README.md and in every page of ``docs/``).
* What the harness provides, standing in for what a user has: ``evstore`` and ``python`` on
  ``PATH`` (after the quick start, its own ``.venv`` first, as if activated); Python blocks run
  under this test's interpreter (the extras of ``.[dev]`` installed); ``AWS_ENDPOINT_URL``
  set to moto's server on 127.0.0.1 (the README's example endpoint ``http://127.0.0.1:5000``
  is rewritten to it), test credentials, and every bucket an ``s3://NAME`` URL in a runnable
  block names already created; no ``EVSTORE_*`` variable; ``OPENAI_BASE_URL`` pointing at a
  fake Responses API on 127.0.0.1 that answers every request with one short message, and
  ``OPENAI_AGENTS_DISABLE_TRACING=1``. Nothing reaches another network.
* Every relative link (``[text](path)``, ``[label]: path``) in README.md, ``docs/*.md`` and the
  other documents in ``LINKED`` names a file or directory of this checkout, resolved from the
  linking file's own directory; a ``#fragment`` into a markdown file names one of its headings
  (GitHub's anchors). Links inside code are not links.
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
# The pages of docs/ whose blocks run after the README's, in this order (state carries over).
DOCS = [
    "commands.md",
    "forks.md",
    "format.md",
    "security.md",
    "retention.md",
    "adapters.md",
    "operations.md",
    "compatibility.md",
    "performance.md",
    "reliability.md",
]
# Other documents whose relative links must resolve too.
LINKED = ["CONTRIBUTING.md", "RELIABILITY.md", "BENCHMARKS.md", "infra/README.md"]
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
        assert end is not None, f"line {i + 1}: a code fence is never closed"
        previous = lines[i - 1].strip() if i else ""
        marker = NOT_RUN.fullmatch(previous)
        reason = marker.group(1).strip() if marker else None
        blocks.append(Block(fence.group(2).lower(), "\n".join(lines[i + 1 : end]) + "\n", i + 1, reason))
        i = end + 1
    return blocks


def example_pages() -> list[Path]:
    """README.md, then the pages of docs/ in the order their blocks run."""
    return [README, *(ROOT / "docs" / name for name in DOCS)]


def test_every_docs_page_is_listed_in_run_order() -> None:
    assert sorted(DOCS) == sorted(p.name for p in (ROOT / "docs").glob("*.md")), "list every docs/*.md page in DOCS"
    assert len(set(DOCS)) == len(DOCS)


@pytest.mark.parametrize("page", example_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_not_run_markers_are_placed_right_and_give_a_reason(page: Path) -> None:
    name = page.relative_to(ROOT)
    text = page.read_text()
    lines = text.splitlines()
    for number, line in enumerate(lines, 1):
        if "<!--" in line and "not-run" in line:
            marker = NOT_RUN.fullmatch(line.strip())
            assert marker and marker.group(1).strip(), f"{name} line {number}: write <!-- not-run: the reason -->"
            following = lines[number] if number < len(lines) else ""
            assert following.startswith("```"), f"{name} line {number}: a not-run comment goes right before a fence"
    blocks = readme_blocks(text)
    if page == README:
        assert {RUNNABLE[b.lang] for b in blocks if b.lang in RUNNABLE and b.not_run is None} == {"python", "sh"}


def test_readme_blocks_are_parsed_with_their_markers() -> None:
    sample = "text\n```sh\necho one\n```\n<!-- not-run: needs AWS -->\n```python\nprint(2)\n```\n```\nsynopsis\n```\n"
    assert readme_blocks(sample) == [
        Block("sh", "echo one\n", 2, None),
        Block("python", "print(2)\n", 6, "needs AWS"),
        Block("", "synopsis\n", 9, None),
    ]


# ---- links --------------------------------------------------------------------

INLINE_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s.*)?$")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def _prose(text: str, code_spans: bool = False) -> list[tuple[int, str]]:
    """The lines outside code fences, numbered; inline code spans blanked unless ``code_spans``."""
    lines, fence = [], None
    for number, line in enumerate(text.splitlines(), 1):
        opening = re.match(r"^\s{0,3}(`{3,}|~{3,})", line)
        if fence is None and opening:
            fence = opening.group(1)
        elif fence is not None:
            if line.strip().startswith(fence):
                fence = None
        else:
            lines.append((number, line if code_spans else re.sub(r"(`+).*?\1", "", line)))
    return lines


def anchors(text: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to '-', repeats numbered."""
    seen: dict[str, int] = {}
    found = set()
    for _, line in _prose(text, code_spans=True):
        heading = re.match(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def relative_links(text: str) -> list[tuple[int, str]]:
    links = []
    for number, line in _prose(text):
        targets = [m.group(1) for m in INLINE_LINK.finditer(line)]
        if reference := REFERENCE.match(line):
            targets.append(reference.group(1))
        links += [(number, t) for t in targets if not SCHEME.match(t) and not t.startswith("//")]
    return links


def test_link_parsing_finds_relative_links_and_anchors() -> None:
    sample = (
        "# A `code` title: here\n[a](docs/x.md#y) [b](https://e.org) `[c](no.md)` ![d](img.png)\n"
        "```\n[e](no.md)\n# not a heading\n```\n[f]: ../up.md\n## Twice\n## Twice\n[g](#twice-1)\n"
    )
    assert relative_links(sample) == [(2, "docs/x.md#y"), (2, "img.png"), (7, "../up.md"), (10, "#twice-1")]
    assert anchors(sample) == {"a-code-title-here", "twice", "twice-1"}


@pytest.mark.parametrize(
    "page",
    [*example_pages(), *(ROOT / name for name in LINKED)],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_relative_links_point_at_files_of_the_checkout(page: Path) -> None:
    name = page.relative_to(ROOT)
    text = page.read_text()
    for number, link in relative_links(text):
        path, _, fragment = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        assert target.is_relative_to(ROOT.resolve()), f"{name} line {number}: {link} leaves the checkout"
        assert target.exists(), f"{name} line {number}: {link} names no file ({target.relative_to(ROOT.resolve())})"
        if fragment and target.suffix == ".md":
            assert fragment in anchors(target.read_text()), f"{name} line {number}: {link}: no such heading"


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


@pytest.mark.slow
def test_readme_examples_run_as_written(tmp_path: Path, moto_endpoint: str, fake_openai: str) -> None:
    import boto3

    blocks = [
        (page.relative_to(ROOT), b)
        for page in example_pages()
        for b in readme_blocks(page.read_text())
        if b.lang in RUNNABLE and b.not_run is None
    ]
    work = tmp_path / "checkout"
    work.mkdir()
    _copy_checkout(work)
    scripts = tmp_path / "blocks"
    scripts.mkdir()
    # a user's environment: none of evstore's settings, nor what other tests set (test_strands
    # disables OpenTelemetry's SDK for the whole run, which the README's tracing example needs)
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("EVSTORE_", "AWS_ENDPOINT", "VIRTUAL_ENV", "OPENAI_", "OTEL_"))
    }
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
    for bucket in sorted({m for _, b in blocks for m in re.findall(r"s3://([a-z0-9][a-z0-9.-]+[a-z0-9])", b.code)}):
        s3.create_bucket(Bucket=bucket)
    tools = os.path.dirname(sys.executable)

    for number, (page, block) in enumerate(blocks):
        code = block.code.replace(EXAMPLE_ENDPOINT, moto_endpoint)
        venv = work / ".venv" / "bin"  # the quick start's venv, once it exists: "activated"
        env["PATH"] = os.pathsep.join([*([str(venv)] if venv.is_dir() else []), tools, os.environ.get("PATH", "")])
        if RUNNABLE[block.lang] == "python":
            script = scripts / f"block_{number}_{page.stem}_line_{block.line}.py"
            script.write_text(code)
            command = [sys.executable, str(script)]
        else:
            command = ["bash", "-e", "-o", "pipefail", "-c", code]
        done = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, (
            f"{page} line {block.line} ({block.lang} block) exited {done.returncode}\n"
            f"--- block ---\n{code}--- stdout ---\n{done.stdout[-3000:]}\n--- stderr ---\n{done.stderr[-3000:]}"
        )
