"""Session ids, seqs and the names of objects: the layout of format v1.

::

    <root>/sessions/<sid>/<seq>            one event; seq zero-padded to 20 digits
    <root>/sessions/<sid>/manifest         created once, before the first event
    <root>/sessions/<sid>/tombstone        written by delete; the session is gone
    <root>/sessions/<sid>/forks/<c>@<uid>  one marker per fork c of this session
    <root>/sessions/<sid>/segments/<a>-<b> a compaction segment holding events a..b
    <root>/sessions/<sid>/young/<M-b>-<a>  a segment of a lower level of automatic compaction,
                                           named by its end counted down from M = MAX_SEQ
    <root>/sessions/<sid>/ztree/<M-e>      the Merkle tree's checkpoint object at e events (``_tree``),
                                           named as young/ is, newest first, and after it

Every name that is not a seq starts with a lowercase letter, so it sorts after
all seqs: a LIST of a session yields its events in order, then the rest, with
``young/`` last but for ``ztree/`` (which only a Merkle proof reads). Automatic
compaction leaves a segment of its lowest level every 32 events and none is ever replaced; a reader needs only the newest few, and
named newest first at the end of the listing, they are the first it meets there.
Pure functions only.
"""

from __future__ import annotations

import re

from ._errors import InvalidInputError

SEQ_WIDTH = 20
MAX_SEQ = 10**SEQ_WIDTH - 1
SESSIONS = "sessions/"
SEGMENTS = "segments/"
YOUNG = "young/"
TREE = "ztree/"

_SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def validate_session_id(session_id: object) -> str:
    """Return ``session_id`` if it is a valid id, else raise ``InvalidInputError``."""
    if not isinstance(session_id, str) or not _SESSION_ID.fullmatch(session_id) or ".." in session_id:
        shown = repr(session_id)[:80] if isinstance(session_id, str) else type(session_id).__name__
        raise InvalidInputError(
            f"invalid session id {shown}: use 1-128 characters from A-Z a-z 0-9 . _ -, "
            "starting with a letter or digit, without '..'"
        )
    return session_id


def validate_seq(seq: object, *, allow_zero: bool = False) -> int:
    low = 0 if allow_zero else 1
    if isinstance(seq, bool) or not isinstance(seq, int) or not low <= seq <= MAX_SEQ:
        raise InvalidInputError(f"invalid seq {seq!r}: expected an integer from {low} to {MAX_SEQ}")
    return seq


def format_seq(seq: int) -> str:
    return f"{seq:0{SEQ_WIDTH}d}"


def parse_seq(name: str) -> int | None:
    """The seq named by the last component of a key, or None if it is not a seq."""
    if len(name) == SEQ_WIDTH and name.isascii() and name.isdigit():
        return int(name)
    return None


#: What ``seq_after`` appends to a seq's name: it sorts after every ASCII character (``~`` and all).
_PAST_ASCII = "\x7f"


def seq_after(name: str) -> str | None:
    """For a session-relative ``name`` that is no seq: a start-after key for a LIST that goes on
    from the first name after it that can be a seq (every name it skips can be none); None when
    no seq sorts after ``name`` (it starts with a letter, or past every seq's digits).

    The names between seqs ``s`` and ``s + 1`` are ``s`` followed by more characters: the key is
    ``s`` and DEL (U+007F), past those whose next character is ASCII (``<s>~1``, ``<s>.tmp``), so
    one LIST jumps over any number of them. The key is never before ``name``: a listing that pages
    on from it always makes progress, and pages over names past DEL a page at a time. Pure.
    """
    digits = len(name) - len(name.lstrip("0123456789"))
    if digits >= SEQ_WIDTH:  # a seq and more characters: the next seq is the one after it
        following = int(name[:SEQ_WIDTH]) + 1
    elif digits == len(name) or name[digits] < "0":  # digits, then nothing or a character before "0"
        following = int(name[:digits] + "0" * (SEQ_WIDTH - digits))
    elif digits == 0 or name[:digits] == "9" * digits:  # a character after "9": no seq starts so
        return None
    else:
        following = (int(name[:digits]) + 1) * 10 ** (SEQ_WIDTH - digits)
    if following > MAX_SEQ:
        return None
    return name if following == 0 else max(name, format_seq(following - 1) + _PAST_ASCII)


class Layout:
    """Names the objects of one store root (the prefix inside the bucket)."""

    def __init__(self, root: str = "") -> None:
        root = root.strip("/")
        self.root = root + "/" if root else ""
        self.sessions = self.root + SESSIONS

    def session_prefix(self, session_id: str) -> str:
        return f"{self.sessions}{session_id}/"

    def event_key(self, session_id: str, seq: int) -> str:
        return self.session_prefix(session_id) + format_seq(seq)

    def manifest_key(self, session_id: str) -> str:
        return self.session_prefix(session_id) + "manifest"

    def tombstone_key(self, session_id: str) -> str:
        return self.session_prefix(session_id) + "tombstone"

    def fork_marker_key(self, parent_id: str, child_id: str, child_uid: str) -> str:
        return f"{self.session_prefix(parent_id)}forks/{child_id}@{child_uid}"

    def segment_key(self, session_id: str, first: int, last: int) -> str:
        return f"{self.session_prefix(session_id)}{SEGMENTS}{format_seq(first)}-{format_seq(last)}"

    def young_key(self, session_id: str, first: int, last: int) -> str:
        """A lower-level segment's name: its end counted down from ``MAX_SEQ``, so the newest sort first."""
        return f"{self.session_prefix(session_id)}{YOUNG}{format_seq(MAX_SEQ - last)}-{format_seq(first)}"

    def young_prefix(self, session_id: str) -> str:
        return self.session_prefix(session_id) + YOUNG

    def young_start(self, session_id: str, upto: int) -> str:
        """A start-after key for a LIST of ``young_prefix`` that skips the segments ending after ``upto``."""
        return f"{self.young_prefix(session_id)}{format_seq(MAX_SEQ - upto - 1)}~" if upto < MAX_SEQ else ""

    def tree_key(self, session_id: str, size: int) -> str:
        """The Merkle checkpoint object at ``size`` events: its size counted down, the newest first."""
        return f"{self.tree_prefix(session_id)}{format_seq(MAX_SEQ - size)}"

    def tree_prefix(self, session_id: str) -> str:
        return self.session_prefix(session_id) + TREE

    def after_events(self, session_id: str) -> str:
        """A start-after key that skips every event of the session (lists its other objects)."""
        return self.event_key(session_id, MAX_SEQ)

    def split(self, key: str) -> tuple[str, str] | None:
        """(session id, name within the session) for a key under sessions/, else None."""
        if not key.startswith(self.sessions):
            return None
        session_id, slash, name = key[len(self.sessions) :].partition("/")
        if not slash or not session_id:
            return None
        return session_id, name


def parse_fork_marker(name: str) -> tuple[str, str] | None:
    """(child id, child uid) from a session-relative name ``forks/<c>@<uid>``."""
    if not name.startswith("forks/"):
        return None
    child, at, uid = name[len("forks/") :].rpartition("@")
    return (child, uid) if at and child and uid else None


def parse_tree(name: str) -> int | None:
    """The size of the checkpoint object named by a session-relative ``ztree/<M-e>``, else None."""
    countdown = parse_seq(name[len(TREE) :]) if name.startswith(TREE) else None
    return None if countdown is None or countdown == MAX_SEQ else MAX_SEQ - countdown


def parse_segment(name: str) -> tuple[int, int] | None:
    """(first, last) seq from a session-relative name ``segments/<a>-<b>`` or ``young/<M-b>-<a>``."""
    if name.startswith(SEGMENTS):
        a_text, dash, b_text = name[len(SEGMENTS) :].partition("-")
        a, b = parse_seq(a_text), parse_seq(b_text)
    elif name.startswith(YOUNG):
        down, dash, a_text = name[len(YOUNG) :].partition("-")
        a, countdown = parse_seq(a_text), parse_seq(down)
        b = None if countdown is None else MAX_SEQ - countdown
    else:
        return None
    return (a, b) if dash and a is not None and b is not None and a <= b else None
