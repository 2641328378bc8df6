"""How the command prints sessions: text for people, JSON lines for scripts."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import Any, BinaryIO

import click
import msgspec

from evstore import Event, SessionInfo
from evstore._codec import RewindBody


def event_lines(events: Iterable[Event], session_id: str) -> Iterator[dict[str, Any]]:
    """One dict per message (``seq``, ``ts``, ``message``), one per rewind; ``session`` for inherited events."""
    for event in events:
        origin = {"session": event.session_id} if event.session_id != session_id else {}
        if isinstance(event.body, RewindBody):
            yield {"seq": event.seq, "ts": event.ts, **origin, "rewind": msgspec.to_builtins(event.body)}
            continue
        for message in event.messages:
            yield {"seq": event.seq, "ts": event.ts, **origin, "message": message}


def write_jsonl(lines: Iterable[dict[str, Any]]) -> None:
    encoder = msgspec.json.Encoder()
    out: BinaryIO = sys.stdout.buffer
    for line in lines:
        out.write(encoder.encode(line) + b"\n")
    out.flush()


def write_json(lines: Iterable[dict[str, Any]]) -> None:
    encoder = msgspec.json.Encoder()
    out: BinaryIO = sys.stdout.buffer
    out.write(b"[")
    for i, line in enumerate(lines):
        out.write((b",\n" if i else b"\n") + encoder.encode(line))
    out.write(b"\n]\n")
    out.flush()


def _text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        parts = [p.get("text", "") if isinstance(p, dict) else str(p) for p in content]
        text = " ".join(p for p in parts if p)
    else:
        text = content or ""
    for call in message.get("tool_calls") or []:
        function = call.get("function", {}) if isinstance(call, dict) else {}
        text += f"{' ' if text else ''}-> {function.get('name', '?')}({function.get('arguments', '')})"
    return text


def render_text(lines: Iterable[dict[str, Any]]) -> None:
    for line in lines:
        seq = f"[{line['seq']}] " if "seq" in line else ""
        if "rewind" in line:
            rewind = line["rewind"]
            keep = f" keeping {rewind['keep']} of its messages" if rewind.get("keep") is not None else ""
            click.echo(f"{seq}(rewind to seq {rewind['to_seq']}{keep})")
            continue
        message = line["message"]
        role = message.get("role", "?")
        meta = message.get("meta")
        if isinstance(meta, dict) and meta.get("is_summary") is True:
            role += " (summary)"
        if message.get("role") == "tool" and message.get("tool_call_id"):
            role += f" [{message['tool_call_id']}]"
        click.echo(f"{seq}{role}: {_text_of(message)}")


def info_json(info: SessionInfo) -> dict[str, Any]:
    parent = info.parent
    return {
        "session": info.session_id,
        "head": info.head,
        "created": info.created,
        "retention": info.retention,
        "encrypted": info.encrypted,
        "key_id": info.key_id,
        "parent": parent.sid if parent else None,
        "fork_seq": parent.seq if parent else None,
        "copied_from_parent": parent.copied if parent else None,
        "forks": info.forks,
        "segments": info.segments,
    }


def render_tree(infos: list[SessionInfo]) -> None:
    """Forks indented under their parents; roots are sessions whose parent is not listed."""
    by_id = {info.session_id: info for info in infos}
    children: dict[str, list[SessionInfo]] = {}
    roots = []
    for info in infos:
        if info.parent is not None and info.parent.sid in by_id and not info.parent.copied:
            children.setdefault(info.parent.sid, []).append(info)
        else:
            roots.append(info)

    def show(info: SessionInfo, depth: int) -> None:
        at = f" @{info.parent.seq}" if info.parent and depth else ""
        click.echo(f"{'  ' * depth}{'└─ ' if depth else ''}{info.session_id}{at} (head {info.head})")
        for child in children.get(info.session_id, []):
            show(child, depth + 1)

    for root in roots:
        show(root, 0)
