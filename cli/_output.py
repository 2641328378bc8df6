"""How the command prints sessions: text for people, JSON lines for scripts; every stored
string passes ``neutral`` (text) or ``json_safe`` (JSON) on its way out."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import Any, BinaryIO

import msgspec

from evstore import Event, SessionInfo
from evstore._codec import RewindBody

from ._common import echo, json_bytes, neutral, say, writing_stdout


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
    """A JSON object per line on standard output (``writing_stdout``: only the writes, never the
    reads that make ``lines``, are taken for standard output's failures)."""
    encoder = msgspec.json.Encoder()
    out: BinaryIO = sys.stdout.buffer
    for line in lines:
        data = json_bytes(line, encoder) + b"\n"
        with writing_stdout():
            out.write(data)
    with writing_stdout():
        out.flush()


def write_json(lines: Iterable[dict[str, Any]]) -> None:
    """One JSON array on standard output, an element per line (as ``write_jsonl``)."""
    encoder = msgspec.json.Encoder()
    out: BinaryIO = sys.stdout.buffer
    with writing_stdout():
        out.write(b"[")
    for i, line in enumerate(lines):
        data = (b",\n" if i else b"\n") + json_bytes(line, encoder)
        with writing_stdout():
            out.write(data)
    with writing_stdout():
        out.write(b"\n]\n")
        out.flush()


def _compact_json(value: Any) -> str:
    try:
        return msgspec.json.encode(value).decode()
    except (TypeError, msgspec.EncodeError):
        return str(value)


def _block_text(block: Any) -> str:
    """One content block: chat-completions/Responses parts and Bedrock/Strands blocks."""
    if not isinstance(block, dict):
        return str(block)
    if isinstance(block.get("text"), str):
        return str(block["text"])
    use = block.get("toolUse")
    if isinstance(use, dict):
        return f"-> {use.get('name', '?')}({_compact_json(use.get('input', ''))}) [{use.get('toolUseId', '?')}]"
    result = block.get("toolResult")
    if isinstance(result, dict):
        parts = result.get("content")  # any JSON value: shown, never iterated unless a list
        inner = " ".join(map(_block_text, parts)) if isinstance(parts, list) else "" if parts is None else _block_text(parts)
        status = f" {result['status']}" if isinstance(result.get("status"), str) else ""
        return f"<- [{result.get('toolUseId', '?')}]{status}: {inner}"
    kind = block.get("type") or next(iter(block), "empty")
    return f"({kind} block)"


def _record_note(message: dict[str, Any]) -> str:
    """What a message without text stands for: an adapter's record, or an item it wrapped."""
    meta = message.get("meta")
    if isinstance(meta, dict):
        strands = meta.get("strands")
        if isinstance(strands, dict):
            kind = strands.get("kind", "?")
            if kind == "message" and isinstance(strands.get("message"), dict):
                return _text_of(strands["message"]) or "(strands message)"
            record = strands.get("record")
            name = strands.get("id") or (record.get("session_id") if isinstance(record, dict) else None)
            return f"(strands {kind} record{f' {name}' if name else ''})"
        item = meta.get("openai_item")
        if isinstance(item, dict):
            kind = item.get("type", "message")
            if "output" in item:
                output = item["output"]
                return output if isinstance(output, str) else _compact_json(output)
            if isinstance(item.get("content"), str | list):
                return _text_of({"content": item["content"]}) or f"(openai {kind} item)"
            summary = item.get("summary")
            texts = [_block_text(part) for part in summary] if isinstance(summary, list) else []
            return f"(openai {kind} item{': ' + ' '.join(texts) if any(texts) else ''})"
        if meta:
            return f"(no content; meta: {', '.join(map(str, meta))})"
    return "(no content)" if message.get("role") in ("system", "tool") else ""


def _text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        text = " ".join(part for part in map(_block_text, content) if part)
    elif isinstance(content, str):
        text = content
    else:
        text = "" if content is None else _compact_json(content)
    for call in message.get("tool_calls") or []:
        function = call.get("function", {}) if isinstance(call, dict) else {}
        function = function if isinstance(function, dict) else {}
        call_id = f" [{call['id']}]" if isinstance(call, dict) and isinstance(call.get("id"), str) else ""
        text += f"{' ' if text else ''}-> {function.get('name', '?')}({function.get('arguments', '')}){call_id}"
    if not text:
        text = _record_note(message)
    return text


def render_text(lines: Iterable[dict[str, Any]]) -> None:
    """One entry per message: ``[seq] role: text``; lines after the first of a multi-line
    message are indented to where the text starts. Every stored string passes ``neutral``."""
    for line in lines:
        seq = f"[{line['seq']}] " if "seq" in line else ""
        if "rewind" in line:
            rewind = line["rewind"]
            keep = f" keeping {rewind['keep']} of its messages" if rewind.get("keep") is not None else ""
            echo(f"{seq}(rewind to seq {rewind['to_seq']}{keep})")
            continue
        message = line["message"]
        role = str(message.get("role", "?"))
        meta = message.get("meta")
        if isinstance(meta, dict) and meta.get("is_summary") is True:
            role += " (summary)"
        if message.get("role") == "tool" and message.get("tool_call_id"):
            role += f" [{message['tool_call_id']}]"
        prefix = f"{seq}{neutral(role)}: "
        text = neutral(_text_of(message), newlines=True)
        echo(prefix + text.replace("\n", "\n" + " " * len(prefix)))


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


def render_tree(infos: list[SessionInfo], gone: dict[str, str] | None = None) -> None:
    """Forks indented under their parents; roots are sessions whose parent is not listed.
    ``gone``: ids with objects but no live session (a deleted parent its forks still read),
    by state; shown as roots, marked, with their forks under them."""
    gone = gone or {}
    by_id = {info.session_id: info for info in infos}
    children: dict[str, list[SessionInfo]] = {}
    roots: list[SessionInfo | str] = []
    for info in infos:
        if info.parent is not None and (info.parent.sid in by_id or info.parent.sid in gone) and not info.parent.copied:
            children.setdefault(info.parent.sid, []).append(info)
        else:
            roots.append(info)
    roots.extend(gone)

    def show(item: SessionInfo | str, depth: int) -> None:
        if isinstance(item, str):
            say(f"{item} ({gone[item]})")
            session_id = item
        else:
            at = f" @{item.parent.seq}" if item.parent and depth else ""
            say(f"{'  ' * depth}{'└─ ' if depth else ''}{item.session_id}{at} (head {item.head})")
            session_id = item.session_id
        for child in children.get(session_id, []):
            show(child, depth + 1)

    for root in roots:
        show(root, 0)
