"""``export --format html``: one self-contained page for auditors, checked with an HTML
parser (structure, escaping) and, where Chromium is installed, with a headless browser."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner
from evstore_cli import cli

import evstore
from evstore._html import render_html

HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>"\'&</pre></article>\x1b[2J\u202e'
SVG = "<svg onload=alert(2)>"


class Node:
    def __init__(self, tag: str, attrs: dict[str, str | None], parent: Node | None) -> None:
        self.tag, self.attrs, self.parent = tag, attrs, parent
        self.children: list[Node] = []
        self.parts: list[str | Node] = []  # text and children, in document order

    @property
    def classes(self) -> set[str]:
        return set((self.attrs.get("class") or "").split())

    def all_text(self) -> str:
        return "".join(part if isinstance(part, str) else part.all_text() for part in self.parts)

    def walk(self) -> list[Node]:
        return [self, *(node for child in self.children for node in child.walk())]

    def find(self, cls: str) -> list[Node]:
        return [node for node in self.walk() if cls in node.classes]


VOID = {"meta", "br", "img", "link", "input", "hr"}


class TreeBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {}, None)
        self.current = self.root
        self.tags: list[str] = []
        self.attr_names: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, dict(attrs), self.current)
        self.current.children.append(node)
        self.current.parts.append(node)
        self.tags.append(tag)
        self.attr_names.update(name for name, _ in attrs)
        if tag not in VOID:
            self.current = node

    def handle_endtag(self, tag: str) -> None:
        assert self.current.tag == tag, f"</{tag}> closes <{self.current.tag}>: the page is not well nested"
        assert self.current.parent is not None
        self.current = self.current.parent

    def handle_data(self, data: str) -> None:
        self.current.parts.append(data)


def parse(page: str) -> TreeBuilder:
    builder = TreeBuilder()
    builder.feed(page)
    builder.close()
    assert builder.current is builder.root, "unclosed elements"
    return builder


def summary(tree: TreeBuilder) -> dict[str, str]:
    """The page's header summary: each row's name and its text."""
    dl = next(node for node in tree.root.walk() if node.tag == "dl")
    names = [node.all_text() for node in dl.children if node.tag == "dt"]
    return dict(zip(names, [node.all_text() for node in dl.children if node.tag == "dd"], strict=True))


def build(store: evstore.Store) -> None:
    """parent: a hostile user message, a tool call and its result, a summary, a rewind;
    child: a fork of parent at seq 4 with its own message and a rewind into the parent's part."""
    parent = store.open("parent", create=True)
    parent.append({"role": "user", "content": HOSTILE})
    call = {"id": 'c1"><b>', "type": "function", "function": {"name": SVG, "arguments": '{"q": "</code>"}'}}
    result = {"role": "tool", "tool_call_id": 'c1"><b>', "content": "42"}
    parent.append([{"role": "assistant", "content": "", "tool_calls": [call]}, result])
    parent.append({"role": "assistant", "content": "so far: a sum", "meta": {"is_summary": True, "summary_of": 2}})
    parent.append({"role": "user", "content": "withdrawn later"})
    child = store.fork("parent", "child", at=4)
    child.append({"role": "assistant", "content": "own reply"})
    child.rewind(3)


def test_page_structure_and_escaping(tmp_path: Path) -> None:
    store = evstore.open_store("memory://")
    build(store)
    verified = store.verify("child")
    page = render_html(
        "child", store.replay("child"), verified=verified, info=store.info("child"), generated="2026-01-01T00:00:00Z"
    )
    tree = parse(page)

    # self-contained and inert: no scripts, no fetched resources, no event handlers
    assert not {"script", "img", "iframe", "link", "object", "embed", "svg"} & set(tree.tags)
    assert not {"src", "href", "onerror", "onload"} & tree.attr_names
    assert "default-src 'none'" in page

    # hostile content is text, whole, and control characters are visible escapes
    articles = [node for node in tree.root.walk() if node.tag == "article"]
    assert len(articles) == 6  # 5 messages from parent up to seq 4 (one event holds 2) + 1 own
    first = articles[0].find("content")[0].all_text()
    assert first == HOSTILE.replace("\x1b", "\\x1b").replace("\u202e", "\\u202e")
    calls = tree.root.find("tool-call")
    assert len(calls) == 1 and SVG in calls[0].all_text() and 'c1"><b>' in calls[0].all_text()
    assert "result of call" in articles[2].all_text() and 'c1"><b>' in articles[2].all_text()

    # roles, summaries, withdrawals, inheritance, the receipt
    assert [a.find("role")[0].all_text() for a in articles] == ["user", "assistant", "tool", "assistant", "user", "assistant"]
    summary = [a for a in articles if "summary" in a.classes]
    assert len(summary) == 1 and "stands for the 2 messages before it" in summary[0].all_text()
    withdrawn = [(a.attrs["data-seq"], a.attrs["data-index"]) for a in articles if "withdrawn" in a.classes]
    assert withdrawn == [("4", "0"), ("5", "0")]
    assert all("withdrawn by the rewind at seq 6" in a.all_text() for a in articles if "withdrawn" in a.classes)
    events = [node for node in tree.root.walk() if node.tag == "li" and "event" in node.classes]
    assert [e.attrs["data-session"] for e in events] == ["parent"] * 4 + ["child"] * 2
    assert all(("inherited" in e.classes) == (e.attrs["data-session"] == "parent") for e in events)
    assert "inherited from parent" in events[0].all_text()
    assert "withdrew 2 messages" in events[-1].all_text()
    receipt = [node for node in tree.root.walk() if node.attrs.get("id") == "receipt"]
    assert receipt[0].all_text() == str(verified.receipt)
    assert "chain intact" in tree.root.find("verification")[0].all_text()


def test_export_html_command_writes_the_page(tmp_path: Path) -> None:
    store_url = (tmp_path / "store").as_uri()
    build(evstore.open_store(store_url))
    runner = CliRunner()
    out = tmp_path / "child.html"
    result = runner.invoke(cli, ["--store", store_url, "export", "child", "--format", "html", "-o", str(out), "--json"])
    assert result.exit_code == 0, result.output
    receipt = runner.invoke(cli, ["--store", store_url, "verify", "child", "--receipt"]).stdout.strip()
    assert f'"receipt":"{receipt}"' in result.stdout
    tree = parse(out.read_text())
    assert [n.all_text() for n in tree.root.walk() if n.attrs.get("id") == "receipt"] == [receipt]
    to_stdout = runner.invoke(cli, ["--store", store_url, "export", "child", "--format", "html"])
    assert to_stdout.exit_code == 0 and to_stdout.stdout.startswith("<!DOCTYPE html>")


def _chromium() -> str | None:
    return next((path for name in ("chromium", "chromium-browser") if (path := shutil.which(name))), None)


def _browser_dom(page: Path, tmp_path: Path) -> TreeBuilder:
    """The document headless Chromium builds from ``page`` (skipped without Chromium, failed in CI)."""
    browser = _chromium()
    if browser is None:
        if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
            pytest.fail("CI must have chromium (.ci/run installs it)")
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    profile = tmp_path / "profile"
    dom = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            f"--user-data-dir={profile}",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HOME": str(tmp_path)},
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    return parse(dom.stdout)


@pytest.mark.slow
def test_headless_chromium_renders_the_page_as_text(tmp_path: Path) -> None:
    store = evstore.open_store("memory://")
    build(store)
    page = tmp_path / "child.html"
    verified = store.verify("child")
    page.write_text(render_html("child", store.replay("child"), verified=verified, info=store.info("child")))
    tree = _browser_dom(page, tmp_path)
    # the browser built the same document: no script element appeared, the text is there
    assert "script" not in tree.tags and "img" not in tree.tags and "svg" not in tree.tags
    text = tree.root.all_text()
    assert '<script>alert("x")</script>' in text and SVG in text
    assert str(verified.receipt) in text
    assert "withdrawn by the rewind at seq 6" in text and "inherited from parent" in text
    assert len([n for n in tree.root.walk() if n.tag == "article"]) == 6


# ---- a session that fails verification ---------------------------------------------

TEXTS = ["what is 6*7?", "6*7 is 42", "and 7*8?", "7*8 is 56", "thanks"]


def _tamper(store_url: str, seq: int, how: str) -> None:
    """Alter the stored bytes of the event at ``seq`` of "audit" in place, through the backend."""
    backend = evstore.open_store(store_url).backend
    key = f"sessions/audit/{seq:020d}"
    stored = backend.get(key)
    if how == "edited":  # the same envelope, its message's content changed: it no longer hashes as seq+1 chained to
        envelope = json.loads(stored.data)
        envelope["body"]["messages"][0]["content"] = "6*7 is 41"
        data = json.dumps(envelope).encode()
    else:  # replaced by bytes that are no event at all
        data = b"garbled"
    backend.replace(key, data, etag=stored.etag)


@pytest.mark.parametrize(
    ("how", "fails_at", "reason"),
    [
        # the edited event still decodes: the failure is its successor's prev, which names its old hash
        ("edited", 4, "prev hash does not match the previous event (chain broken)"),
        ("garbled", 3, None),
    ],
)
@pytest.mark.slow
def test_a_session_failing_verification_gets_its_page_up_to_the_failure(
    tmp_path: Path, how: str, fails_at: int, reason: str | None
) -> None:
    store_url = (tmp_path / "store").as_uri()
    writer = evstore.open_store(store_url).open("audit", create=True)
    for i, text in enumerate(TEXTS):
        writer.append({"role": "user" if i % 2 == 0 else "assistant", "content": text})
    _tamper(store_url, 3, how)
    out = tmp_path / "audit.html"
    result = CliRunner().invoke(cli, ["--store", store_url, "export", "audit", "--format", "html", "-o", str(out)])
    assert result.exit_code == 5, result.output
    verify = CliRunner().invoke(cli, ["--store", store_url, "verify", "audit"])
    assert verify.exit_code == 5
    error = verify.stderr.strip()  # the error export meets is verify's, and says where the page went
    assert result.stderr.splitlines() == [
        f"{error}; the report was written to {str(out)!r}: the verified part (seq 1 to {fails_at - 1}), then the failure"
    ]
    assert f"integrity failure at seq {fails_at} of session 'audit'" in error
    detail = reason or error.split(": ", 2)[-1]

    tree = _browser_dom(out, tmp_path)
    text = " ".join(tree.root.all_text().split())
    verified = TEXTS[: fails_at - 1]
    if how == "edited":
        verified[-1] = "6*7 is 41"  # what is stored now, shown, and flagged
    contents = [node.all_text() for node in tree.root.find("content")]
    assert contents == verified  # the verified messages, in order, and nothing past the failure
    assert not any(later in text for later in TEXTS[fails_at - 1 :] if later not in verified)
    events = [node for node in tree.root.walk() if node.tag == "li" and "event" in node.classes]
    assert [int(e.attrs["id"].removeprefix("seq-")) for e in events] == list(range(1, fails_at))
    # the failure where it occurs: a row after the last verified event, with its seq and reason
    transcript = next(node for node in tree.root.walk() if node.tag == "ol")
    rows = [node for node in transcript.children if node.tag == "li"]
    assert rows[-1].attrs.get("id") == "break" and rows[-1].attrs.get("data-seq") == str(fails_at)
    banner = " ".join(rows[-1].all_text().split())
    assert f"Verification fails here, at seq {fails_at}" in banner and detail in banner
    assert f"Nothing from seq {fails_at} on is shown: it is not verified." in banner
    # and in the header summary, and the verification section: failed, with the verified part's receipt
    header = summary(tree)
    assert header["verification"] == f"FAILED at seq {fails_at}: {detail}"
    assert header["messages"] == f"{fails_at - 1} messages in {fails_at - 1} events (the verified part); 0 withdrawn"
    assert header["head"] == f"5 (from seq {fails_at} on not verified, not shown)"
    section = tree.root.find("verification")[0]
    assert "failed" in section.classes and "ok" not in section.classes
    assert f"verified part: seq 1 to {fails_at - 1} ({fails_at - 1} events), chain intact" in section.all_text()
    prefix = evstore.open_store(store_url).replay("audit", end=fails_at - 1)
    receipt = [n.all_text() for n in tree.root.walk() if n.attrs.get("id") == "receipt"]
    assert receipt == [f"{fails_at - 1}:{list(prefix)[-1].hash}"]
    # a broken link puts the event before it in question: either of the two may have been altered
    flagged = [e.attrs["id"] for e in events if "in-question" in e.classes]
    assert flagged == ([f"seq-{fails_at - 1}"] if how == "edited" else [])
    if how == "edited":
        assert f"seq {fails_at} does not chain to this event as stored" in text


def test_export_html_of_a_failing_session_with_json_reports_the_failure(tmp_path: Path) -> None:
    store_url = (tmp_path / "store").as_uri()
    writer = evstore.open_store(store_url).open("audit", create=True)
    for text in TEXTS:
        writer.append({"role": "user", "content": text})
    _tamper(store_url, 2, "edited")
    out = tmp_path / "audit.html"
    args = ["--store", store_url, "export", "audit", "--format", "html", "-o", str(out), "--json"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 5 and len(result.stderr.splitlines()) == 1
    summary = json.loads(result.stdout)
    assert summary["verified"] is False and summary["events"] == 2 and summary["receipt"].startswith("2:")
    assert summary["failure"] == {"seq": 3, "reason": "prev hash does not match the previous event (chain broken)"}
    to_stdout = CliRunner().invoke(cli, ["--store", store_url, "export", "audit", "--format", "html"])
    assert to_stdout.exit_code == 5 and to_stdout.stdout.startswith("<!DOCTYPE html>")
    assert "the report was written to standard output" in to_stdout.stderr


# ---- dangling tool calls, forks, wording --------------------------------------------


@pytest.mark.slow
def test_dangling_tool_calls_are_flagged(tmp_path: Path) -> None:
    store = evstore.open_store("memory://")
    writer = store.open("s", create=True)
    answered = {"id": "c-ok", "type": "function", "function": {"name": "calc", "arguments": "{}"}}
    unanswered = {"id": 'c-<b>"lost', "type": "function", "function": {"name": "search", "arguments": "{}"}}
    writer.append({"role": "user", "content": "go"})
    writer.append([{"role": "assistant", "content": "", "tool_calls": [answered, unanswered]}])
    writer.append({"role": "tool", "tool_call_id": "c-ok", "content": "42"})
    page = tmp_path / "s.html"
    page.write_text(render_html("s", store.replay("s"), verified=store.verify("s"), info=store.info("s")))
    for tree in (parse(page.read_text()), _browser_dom(page, tmp_path)):
        calls = tree.root.find("tool-call")
        assert [("dangling" in call.classes, "c-ok" in call.all_text()) for call in calls] == [(False, True), (True, False)]
        assert "dangling: no tool result answers this call" in calls[1].all_text()
        assert "dangling" not in calls[0].all_text()
        summary = [n for n in tree.root.walk() if n.attrs.get("id") == "dangling"]
        assert [n.all_text() for n in summary] == ['1 call that no tool result answers: c-<b>"lost']


@pytest.mark.slow
def test_a_parents_page_lists_its_forks_with_their_fork_seqs(tmp_path: Path) -> None:
    store = evstore.open_store("memory://")
    build(store)  # child: a fork of parent at seq 4
    store.fork("parent", "another", at=2)
    page = tmp_path / "parent.html"
    page.write_text(render_html("parent", store.replay("parent"), verified=store.verify("parent"), info=store.info("parent")))
    for tree in (parse(page.read_text()), _browser_dom(page, tmp_path)):
        forks = [n for n in tree.root.walk() if n.attrs.get("id") == "forks"]
        assert [n.all_text() for n in forks] == ["another at seq 2, child at seq 4"]
    child = render_html("child", store.replay("child"), verified=store.verify("child"), info=store.info("child"))
    assert 'id="forks"' not in child  # a session without forks lists none


def test_counts_of_one_are_singular() -> None:
    store = evstore.open_store("memory://")
    writer = store.open("s", create=True)
    writer.append({"role": "user", "content": "one"})
    writer.append({"role": "assistant", "content": "so far", "meta": {"is_summary": True, "summary_of": 1}})
    writer.append({"role": "user", "content": "withdrawn"})
    writer.rewind(2)
    page = render_html("s", store.replay("s"), verified=store.verify("s"), info=store.info("s"))
    text = " ".join(parse(page).root.all_text().split())
    assert "withdrew 1 message from the context view (the audit view keeps it)" in text
    assert "stands for the message before it" in text
    assert "3 messages in 4 events; 1 withdrawn" in text
    assert not re.search(r"\b1 (messages|events|tags|calls)\b", text)
    one = evstore.open_store("memory://")
    one.open("s", create=True).append({"role": "user", "content": "only"})
    text = " ".join(parse(render_html("s", one.replay("s"), verified=one.verify("s"))).root.all_text().split())
    assert "1 message in 1 event; 0 withdrawn" in text and "verified: 1 event, chain intact" in text
