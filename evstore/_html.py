"""A session as one self-contained HTML page, for auditors. Pure rendering: no I/O.

The page needs nothing but itself: no network (a Content-Security-Policy of
``default-src 'none'`` forbids every fetch), no scripts (there are none), inline
CSS only. It shows the transcript in seq order (the audit view): each message's
role, content, tool calls and tool results; tool calls no tool result answers
marked *dangling*; messages a rewind withdrew from the context view marked
*withdrawn* with the rewind that did it; summaries marked with what they stand
for; events a fork inherits marked with the ancestor whose log holds them; the
session's forks; and the verification result with its receipt.

A session that fails verification gets its page too: the verified part (the
events before the failure, with their receipt), then the failure, its seq and
reason, where it occurs and in the header; nothing from there on is shown.

Every stored string (content, roles, tool names and ids, session ids, meta) is
HTML-escaped, and control characters are shown as visible ``\\xNN`` escapes, so
hostile content can neither add markup nor hide text.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import msgspec

from ._codec import Message, RewindBody
from ._views import ContextFolder, Event, Position, dangling_tool_calls, is_summary

if TYPE_CHECKING:
    from . import IntegrityError, SessionInfo, VerifyResult

__all__ = ["render_html"]

_encoder = msgspec.json.Encoder()
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")

_STYLE = """
body{font:15px/1.45 system-ui,sans-serif;margin:2rem auto;max-width:60rem;padding:0 1rem;color:#1d1d1f}
code,pre{font:13px/1.4 ui-monospace,monospace}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.2rem 1rem}dt{font-weight:600}dd{margin:0}
.verification{padding:.6rem 1rem;border-radius:6px;margin:1rem 0}
.verification.ok{background:#e7f6ea;border:1px solid #5bb36b}.verification.failed{background:#fdeaea;border:1px solid #d9534f}
ol.events{list-style:none;padding:0}
li.event{border-left:3px solid #ccc;margin:.8rem 0;padding:.2rem .8rem}
li.event.inherited{border-left-color:#8a6fd1;background:#f7f4fd}
.event-head{color:#666;font-size:13px}
.message{margin:.4rem 0;padding:.3rem .5rem;border-radius:4px}
.role{font-weight:700;text-transform:lowercase}
.role-user{background:#eef4ff}.role-assistant{background:#f4f4f4}.role-system{background:#fff7e0}.role-tool{background:#eefaf3}
.content{white-space:pre-wrap;overflow-wrap:anywhere;margin:.2rem 0}
.withdrawn{opacity:.6}.withdrawn .content{text-decoration:line-through}
.badge{display:inline-block;font-size:12px;padding:0 .4rem;border-radius:3px;margin-left:.4rem}
.badge.withdrawn-label{background:#d9534f;color:#fff;opacity:1}.badge.summary-label{background:#2e7dd7;color:#fff}
.badge.inherited-label{background:#8a6fd1;color:#fff}
.rewind{font-style:italic;color:#a33}
.failed-label{color:#b52a25;font-weight:700}
li.break{border:2px solid #d9534f;border-left-width:6px;background:#fdeaea;margin:1.2rem 0;padding:.6rem 1rem}
li.break h3{margin:0 0 .3rem;color:#b52a25}
.badge.dangling-label{background:#e08a00;color:#fff}.badge.in-question-label{background:#d9534f;color:#fff}
li.in-question{border-left-color:#d9534f}
ul.tool-calls{margin:.2rem 0;padding-left:1.2rem}
details pre{white-space:pre-wrap;overflow-wrap:anywhere;background:#fafafa;padding:.4rem}
"""


def count(number: int, noun: str, plural: str | None = None) -> str:
    """``1 message``, ``2 messages``: a number with its noun in the right form."""
    return f"{number} {noun if number == 1 else plural or noun + 's'}"


def _neutral(text: str) -> str:
    """Control characters (but newline and tab) and bidi overrides as visible escapes."""
    return "".join(
        (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")
        if (c < " " and c not in "\n\t") or "\x7f" <= c <= "\x9f" or c in _BIDI
        else c
        for c in text
    )


def esc(value: object) -> str:
    """Any stored value as safe HTML text."""
    return html.escape(_neutral(value if isinstance(value, str) else _json(value)), quote=True)


def _json(value: object) -> str:
    try:
        return _encoder.encode(value).decode()
    except (TypeError, msgspec.EncodeError):
        return repr(value)


def _block(block: Any) -> str:
    if not isinstance(block, dict):
        return esc(block)
    if isinstance(block.get("text"), str):
        return esc(block["text"])
    use = block.get("toolUse")
    if isinstance(use, dict):
        return (
            f'<span class="tool-call">call <code class="tool-name">{esc(use.get("name", "?"))}</code>'
            f"(<code>{esc(use.get('input', ''))}</code>) id <code>{esc(use.get('toolUseId', '?'))}</code></span>"
        )
    result = block.get("toolResult")
    if isinstance(result, dict):
        parts = result.get("content")  # any JSON value: shown, never iterated unless a list
        inner = " ".join(map(_block, parts)) if isinstance(parts, list) else "" if parts is None else _block(parts)
        return f'<span class="tool-result">result of <code>{esc(result.get("toolUseId", "?"))}</code>: {inner}</span>'
    return f"<code>{esc(block)}</code>"


def _content(message: Message) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return esc(content)
    if isinstance(content, list):
        return " ".join(_block(part) for part in content)
    if content is None:
        meta = message.get("meta")
        keys = ", ".join(map(str, meta)) if isinstance(meta, dict) and meta else ""
        return f"<em>(no content{'; meta: ' + esc(keys) if keys else ''})</em>"
    return esc(content)


def _tool_calls(message: Message, dangling: set[str]) -> str:
    calls = message.get("tool_calls")
    if not isinstance(calls, list) or not calls:
        return ""
    items = []
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        function = function if isinstance(function, dict) else {}
        call_id = call.get("id") if isinstance(call, dict) else None
        unanswered = call_id in dangling
        flag = ' <span class="badge dangling-label">dangling: no tool result answers this call</span>' if unanswered else ""
        items.append(
            f'<li class="tool-call{" dangling" if unanswered else ""}">tool call'
            f' <code class="tool-name">{esc(function.get("name", "?"))}</code>'
            f"(<code>{esc(function.get('arguments', ''))}</code>) id <code>{esc(call_id or '?')}</code>{flag}</li>"
        )
    return f'<ul class="tool-calls">{"".join(items)}</ul>'


def _summary_note(message: Message) -> str:
    covered = message["meta"].get("summary_of")
    if isinstance(covered, int) and not isinstance(covered, bool) and covered > 0:
        return f"summary: stands for the {'message' if covered == 1 else f'{covered} messages'} before it"
    return "summary: stands for every message before it"


def _withdrawals(events: list[Event]) -> dict[Position, int]:
    """Each withdrawn message's position, and the seq of the rewind that withdrew it."""
    folder = ContextFolder()
    withdrawn: dict[Position, int] = {}
    for event in events:
        before = {position for position, _ in folder.live}
        folder.add(event.seq, event.body)
        if isinstance(event.body, RewindBody):
            after = {position for position, _ in folder.live}
            for position in before - after:
                withdrawn[position] = event.seq
    return withdrawn


def _message(message: Message, position: Position, withdrawn_by: int | None, dangling: set[str]) -> str:
    role = str(message.get("role", "?"))
    classes = ["message", f"role-{role if role in ('user', 'assistant', 'system', 'tool') else 'other'}"]
    badges = []
    if withdrawn_by is not None:
        classes.append("withdrawn")
        badges.append(f'<span class="badge withdrawn-label">withdrawn by the rewind at seq {withdrawn_by}</span>')
    if is_summary(message):
        classes.append("summary")
        badges.append(f'<span class="badge summary-label">{esc(_summary_note(message))}</span>')
    result_of = ""
    if role == "tool" and message.get("tool_call_id") is not None:
        result_of = f' <span class="tool-result">result of call <code>{esc(message.get("tool_call_id"))}</code></span>'
    return (
        f'<article class="{" ".join(classes)}" data-seq="{position.seq}" data-index="{position.index}">'
        f'<div class="message-head"><span class="role">{esc(role)}</span>{result_of}{"".join(badges)}</div>'
        f'<div class="content">{_content(message)}</div>{_tool_calls(message, dangling)}'
        f"<details><summary>stored message</summary><pre>{esc(_pretty(message))}</pre></details></article>"
    )


def _pretty(message: Message) -> str:
    try:
        return msgspec.json.format(_encoder.encode(message), indent=2).decode()
    except (TypeError, msgspec.EncodeError):
        return repr(message)


def _event(event: Event, session_id: str, withdrawn: dict[Position, int], dangling: set[str], in_question: str) -> str:
    inherited = event.session_id != session_id
    head = f"seq {event.seq} · {esc(event.ts)}"
    if inherited:
        head += f' <span class="badge inherited-label">inherited from {esc(event.session_id)}</span>'
    if in_question:
        head += f' <span class="badge in-question-label">{in_question}</span>'
    if isinstance(event.body, RewindBody):
        rewind = event.body
        keep = f", keeping {rewind.keep} of its messages" if rewind.keep is not None else ""
        number = sum(1 for by in withdrawn.values() if by == event.seq)
        inner = (
            f'<p class="rewind">rewind to seq {rewind.to_seq}{keep}: withdrew {count(number, "message")} from the context'
            f" view (the audit view keeps {'it' if number == 1 else 'them'})</p>"
        )
    else:
        inner = "".join(
            _message(message, Position(event.seq, i), withdrawn.get(Position(event.seq, i)), dangling)
            for i, message in enumerate(event.messages)
        )
    cls = "event" + (" inherited" if inherited else "") + (" in-question" if in_question else "")
    return (
        f'<li class="{cls}" id="seq-{event.seq}" data-session="{esc(event.session_id)}">'
        f'<div class="event-head">{head}</div>{inner}</li>'
    )


def _failure_text(failure: IntegrityError) -> str:
    """The failure where it occurs: its seq and reason, and what is therefore not shown."""
    seq = failure.seq
    text = f"Verification fails at seq {seq}: {esc(failure.detail)}. Nothing from seq {seq} on is shown: it is not verified."
    if failure.broken_link and seq is not None and seq > 1:
        text += (
            f" Seq {seq} does not chain to seq {seq - 1} as stored: either of the two may have been altered (a receipt"
            f" issued before for seq {seq - 1} or later tells which: evstore verify --expect SEQ:HASH)."
        )
    return text


def render_html(
    session_id: str,
    events: Iterable[Event],
    *,
    verified: VerifyResult,
    info: SessionInfo | None = None,
    generated: str | None = None,
    failure: IntegrityError | None = None,
) -> str:
    """The page for ``session_id``: ``events`` is its audit view (``Store.replay``),
    ``verified`` the ``VerifyResult`` of ``Store.verify`` for the same session, ``info``
    its ``SessionInfo`` (optional), ``generated`` when the page was made (shown as given).

    ``failure``: verification failed there (``Store.audit``): ``verified`` and ``events``
    are then the verified part before it, and the page shows the failure after them."""
    timeline = list(events)
    withdrawn = _withdrawals(timeline)
    dangling = dangling_tool_calls([message for event in timeline for message in event.messages])
    in_question, question_seq = "", None
    if failure is not None and failure.broken_link and failure.seq is not None:
        in_question = f"in question: seq {failure.seq} does not chain to this event as stored"
        question_seq = failure.seq - 1
    rows = []
    if failure is not None:
        rows.append(("verification", f'<span class="failed-label">FAILED at seq {failure.seq}</span>: {esc(failure.detail)}'))
    else:
        rows.append(("verification", f"chain intact, {count(verified.events, 'event')}"))
    if info is not None:
        unshown = f" (from seq {failure.seq} on not verified, not shown)" if failure is not None else ""
        rows.append(("head", f"{info.head}{unshown}"))
        rows.append(("created", esc(info.created)))
        rows.append(("retention", esc(info.retention)))
        rows.append(("encryption", f"sealed under key id <code>{esc(info.key_id)}</code>" if info.key_id else "plaintext"))
        if info.parent is not None:
            rows.append(("fork of", f"<code>{esc(info.parent.sid)}</code> at seq {info.parent.seq}"))
        if info.forks:
            forks = ", ".join(
                f'<span class="fork"><code>{esc(fork)}</code> at seq {info.fork_seqs[fork]}</span>'
                if fork in info.fork_seqs
                else f'<span class="fork"><code>{esc(fork)}</code></span>'
                for fork in info.forks
            )
            rows.append(("forks", f'<span id="forks">{forks}</span>'))
    messages = count(sum(len(e.messages) for e in timeline), "message")
    shown = " (the verified part)" if failure is not None else ""
    rows.append(("messages", f"{messages} in {count(len(timeline), 'event')}{shown}; {len(withdrawn)} withdrawn"))
    if dangling:
        ids = ", ".join(f"<code>{esc(call_id)}</code>" for call_id in sorted(dangling))
        unanswered = f"{count(len(dangling), 'call')} that no tool result answers: {ids}"
        rows.append(("dangling tool calls", f'<span id="dangling">{unanswered}</span>'))
    if generated:
        rows.append(("page made", esc(generated)))
    checked = f", {count(verified.sealed_checked, 'tag')} checked" if verified.sealed_checked else ""
    unchecked = (
        f", {count(verified.sealed_unchecked, 'sealed event')} not checked (no key)" if verified.sealed_unchecked else ""
    )
    receipt = esc(str(verified.receipt))
    if failure is None:
        verification = [
            '<section class="verification ok" id="verification"><h2>Verification</h2>',
            f"<p>verified: {count(verified.events, 'event')}, chain intact{checked}{unchecked}</p>",
            f'<p>receipt: <code id="receipt">{receipt}</code></p></section>',
        ]
        breaks = ""
    else:
        upto = f"seq {timeline[0].seq} to {timeline[-1].seq}" if timeline else "no events"
        verification = [
            '<section class="verification failed" id="verification"><h2>Verification failed</h2>',
            f'<p class="failure">{_failure_text(failure)}</p>',
            f"<p>verified part: {upto} ({count(verified.events, 'event')}), chain intact{checked}{unchecked}</p>",
            f'<p>receipt of the verified part: <code id="receipt">{receipt}</code></p></section>',
        ]
        breaks = (
            f'<li class="break" id="break" data-seq="{failure.seq}"><h3>Verification fails here, at seq {failure.seq}</h3>'
            f'<p class="failure">{_failure_text(failure)}</p></li>'
        )
    title = f"evstore session {esc(session_id)}"
    return "".join(
        [
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">",
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{title}</title><style>{_STYLE}</style></head><body>",
            f"<header><h1>Session <code>{esc(session_id)}</code></h1><dl>",
            "".join(f"<dt>{name}</dt><dd>{value}</dd>" for name, value in rows),
            "</dl></header>",
            *verification,
            '<section id="transcript"><h2>Transcript</h2><ol class="events">',
            "".join(
                _event(event, session_id, withdrawn, dangling, in_question if event.seq == question_seq else "")
                for event in timeline
            ),
            breaks,
            "</ol></section></body></html>\n",
        ]
    )
