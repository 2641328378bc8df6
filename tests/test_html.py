"""``export --format html``: one self-contained page for auditors, checked with an HTML
parser (structure, escaping) and, where Chromium is installed, with a headless browser."""

from __future__ import annotations

import os
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
        self.text: list[str] = []

    @property
    def classes(self) -> set[str]:
        return set((self.attrs.get("class") or "").split())

    def all_text(self) -> str:
        return "".join(self.text) + "".join(child.all_text() for child in self.children)

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
        self.tags.append(tag)
        self.attr_names.update(name for name, _ in attrs)
        if tag not in VOID:
            self.current = node

    def handle_endtag(self, tag: str) -> None:
        assert self.current.tag == tag, f"</{tag}> closes <{self.current.tag}>: the page is not well nested"
        assert self.current.parent is not None
        self.current = self.current.parent

    def handle_data(self, data: str) -> None:
        self.current.text.append(data)


def parse(page: str) -> TreeBuilder:
    builder = TreeBuilder()
    builder.feed(page)
    builder.close()
    assert builder.current is builder.root, "unclosed elements"
    return builder


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


def test_headless_chromium_renders_the_page_as_text(tmp_path: Path) -> None:
    browser = _chromium()
    if browser is None:
        if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
            pytest.fail("CI must have chromium (.ci/run installs it)")
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    store = evstore.open_store("memory://")
    build(store)
    page = tmp_path / "child.html"
    verified = store.verify("child")
    page.write_text(render_html("child", store.replay("child"), verified=verified, info=store.info("child")))
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
    tree = parse(dom.stdout)
    # the browser built the same document: no script element appeared, the text is there
    assert "script" not in tree.tags and "img" not in tree.tags and "svg" not in tree.tags
    text = tree.root.all_text()
    assert '<script>alert("x")</script>' in text and SVG in text
    assert str(verified.receipt) in text
    assert "withdrawn by the rewind at seq 6" in text and "inherited from parent" in text
    assert len([n for n in tree.root.walk() if n.tag == "article"]) == 6
