"""Messages, event envelopes and manifests, encoded with msgspec as JSON.

An event object is one JSON envelope. Its header (format version, session id,
session uid, seq, timestamp, write id, prev hash, key id) is readable without
any key; the body is either plain JSON (``body``) or sealed with AES-256-GCM
(``sealed``, base64 of nonce || ciphertext). Pure functions only.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import itertools
from datetime import UTC, datetime
from typing import Any, Literal

import msgspec

from ._errors import IntegrityError, InvalidInputError

FORMAT_VERSION = 1
DEFAULT_MAX_EVENT_BYTES = 5 * 1024 * 1024
#: How deep JSON values in a message may nest (objects and lists). Far inside what decoding
#: (msgspec's recursion limit is near 1,000 levels), the views and the command need.
MAX_NESTING = 64
#: Reads of small per-session objects (manifest, tombstone, salt, fork marker) are refused above this.
MAX_SMALL_OBJECT_BYTES = 64 * 1024
#: A segment larger than this is never written, and never read (the loose events stand for it).
MAX_SEGMENT_BYTES = 64 * 1024 * 1024
#: A rekey record larger than this is not read: it vouches for nothing.
MAX_RECORD_BYTES = 32 * 1024 * 1024
ROLES = frozenset({"user", "assistant", "system", "tool"})

Message = dict[str, Any]
Retention = Literal["permanent", "ephemeral"]
RETENTIONS: tuple[Retention, ...] = ("permanent", "ephemeral")


class MessagesBody(msgspec.Struct, tag="messages", frozen=True, gc=False):
    """One message, or an atomic batch of messages from one append call.

    Not tracked by the garbage collector (``gc=False``): a read decodes one per event, and
    none can be part of a reference cycle (its messages are JSON values, made before it).
    """

    messages: list[Message]


class RewindBody(msgspec.Struct, tag="rewind", frozen=True):
    """Withdraws every message after position (to_seq, keep) from the context view.

    Messages of events before ``to_seq`` stay; of event ``to_seq`` the first
    ``keep`` stay (all of them when ``keep`` is None). ``to_seq`` 0 clears.
    """

    to_seq: int
    keep: int | None = None


Body = MessagesBody | RewindBody


class Envelope(msgspec.Struct, omit_defaults=True, frozen=True, gc=False):
    v: int
    sid: str
    uid: str
    seq: int
    ts: str
    wid: str
    prev: str
    kid: str | None = None
    body: Body | None = None
    sealed: str | None = None
    #: The caller's idempotency key: an append retried with it, from any process, lands once.
    idem: str | None = None


class ForkRef(msgspec.Struct, omit_defaults=True, frozen=True):
    """The parent of a fork: its id and uid, the fork seq and the hash of its event there.

    ``copied`` is true when the parent's events up to ``seq`` were copied into the
    fork (forks of ephemeral sessions), so replay never reads the parent.
    """

    sid: str
    uid: str
    seq: int
    hash: str
    copied: bool = False
    #: How many forks deep the child is (1 for a fork of a session that is no fork; 0: not recorded).
    depth: int = 0


class Manifest(msgspec.Struct, omit_defaults=True, frozen=True):
    v: int
    sid: str
    uid: str
    created: str
    retention: Retention = "permanent"
    parent: ForkRef | None = None
    kid: str | None = None
    salt: str | None = None
    #: Seqs up to ``base`` belong to earlier incarnations of the id (a deleted session and its
    #: fence): this one's events start after it, so no seq slot is ever used twice.
    base: int = 0
    #: A fork's ancestors above its parent, nearest first: the ``parent`` each one's manifest
    #: names, so that a reader loads them all at once instead of one after another. A hint: each
    #: is used only where the manifest it stands for says the same. Empty for a session that is
    #: no fork, and in forks made before it was recorded (or of one of those): readers walk.
    ancestry: tuple[ForkRef, ...] = ()


class Tombstone(msgspec.Struct, frozen=True):
    sid: str
    uid: str
    deleted: str
    #: The forks (``child@uid``) alive when the session was deleted: the only ones that may read
    #: its events from then on, and keep them from gc. Only an operator writes a tombstone (the
    #: writer role may not), so a fork planted after the delete is not among them. None in
    #: tombstones written before this field: their markers decide, as they did.
    forks: list[str] | None = None


class RekeyRecord(msgspec.Struct, frozen=True):
    """``sessions/<sid>/rekeys/<time>-<id>``: what one rekey round re-sealed, from seq
    ``first`` on: the hash of each old event object and of its replacement."""

    sid: str
    uid: str
    at: str
    kid: str
    first: int
    old: list[str]
    new: list[str]


_json_encoder = msgspec.json.Encoder()
_envelope_decoder = msgspec.json.Decoder(Envelope)
_body_decoder = msgspec.json.Decoder(Body)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def format_ts(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def parse_ts(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def b64decode(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


def b64decode_canonical(text: str) -> bytes | None:
    """The bytes whose base64 (``b64encode``) is exactly ``text``, else None.

    Strict decoding refuses anything but the alphabet and exact padding; the one
    freedom left, nonzero spare bits in a padded last quantum (``QR==`` decodes as
    ``QQ==`` does), is refused by re-encoding that quantum. Equivalent to
    ``b64encode(b64decode(text)) == text``, without re-encoding the whole text.
    """
    try:
        data = binascii.a2b_base64(text, strict_mode=True)
    except ValueError:  # binascii.Error, and a str that is not ASCII
        return None
    if text.endswith("="):
        spare = len(data) % 3
        if binascii.b2a_base64(data[len(data) - spare :], newline=False) != text[-4:].encode("ascii"):
            return None
    return data


def max_event_object_bytes(max_event_bytes: int) -> int:
    """The largest event object a reader accepts: a body of ``max_event_bytes``, sealed
    (base64 grows it by a third) inside its envelope."""
    return max_event_bytes * 4 // 3 + 64 * 1024


def check_nesting(value: object, limit: int = MAX_NESTING) -> None:
    """``InvalidInputError`` when lists and objects in ``value`` nest deeper than ``limit`` (iterative)."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list | tuple) else None
        if children is None:
            continue
        if depth > limit:
            raise InvalidInputError(f"a message may nest lists and objects at most {limit} levels deep")
        stack.extend((child, depth + 1) for child in children)


#: The fields of a message whose type is fixed (each may also be null), with the type's name.
_TYPED_FIELDS: tuple[tuple[str, type | tuple[type, ...], str], ...] = (
    ("content", (str, list), "text, a list of parts"),
    ("tool_calls", list, "a list"),
    ("tool_call_id", str, "text"),
    ("name", str, "text"),
    ("meta", dict, "an object"),
)


def message_problem(message: object) -> str | None:
    """What makes ``message`` no message (its shape, nesting aside), or None: the one rule
    that append enforces and every read checks again (``check_messages``)."""
    if not isinstance(message, dict):
        return f"a message must be a JSON object, not {type(message).__name__}"
    role = message.get("role")
    if not isinstance(role, str) or role not in ROLES:
        return f"message role must be one of {', '.join(sorted(ROLES))}, not {role!r}"[:200]
    for field, kind, name in _TYPED_FIELDS:
        value = message.get(field)
        if value is not None and not isinstance(value, kind):
            return f"message field {field!r} must be {name} or null"
    return None


def validate_message(message: object) -> Message:
    """Check one message's shape; unknown fields are kept as they are."""
    problem = message_problem(message)
    if problem is not None or not isinstance(message, dict):
        raise InvalidInputError(problem or "a message must be a JSON object")
    check_nesting(message)
    return message


def check_messages(body: Body, session_id: str, seq: int) -> Body:
    """``body``, or ``IntegrityError`` naming the seq when one of its messages breaks the
    message schema (``message_problem``).

    Append never writes such a message, so an event that holds one was written around evstore
    (forged, or by another program): the log is refused at that seq, as for any other forged
    event, rather than shown. An auditor is told exactly where the log stops being evstore's,
    and the context view, the adapters and the command's printers never meet a shape they
    cannot handle. Checked once, where an event is decoded: a few dict lookups a message.
    """
    if type(body) is MessagesBody:
        for message in body.messages:
            # the common message, {"role": ..., "content": "..."}, is valid by this alone
            role = message.get("role")
            if len(message) == 2 and type(role) is str and role in ROLES and type(message.get("content")) is str:
                continue
            if (problem := message_problem(message)) is not None:
                index = body.messages.index(message)  # the first message equal to it: as invalid
                raise IntegrityError(session_id, seq, f"message {index} is not a valid message: {problem}")
    return body


def decode_json_value(data: str | bytes, where: str = "") -> Any:
    """Any JSON value from text given to evstore; ``InvalidInputError`` when it is not JSON or
    nests too deep for the decoder (deeper than any message may: ``MAX_NESTING``)."""
    prefix = f"{where}: " if where else ""
    try:
        return msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise InvalidInputError(f"{prefix}invalid JSON: {exc}") from None
    except RecursionError:
        raise InvalidInputError(f"{prefix}a message may nest lists and objects at most {MAX_NESTING} levels deep") from None


def decode_message_json(text: str | bytes) -> Message:
    """One message from JSON text; ``InvalidInputError`` when it is not valid JSON or not a message."""
    return validate_message(decode_json_value(text))


def encode_json(value: object) -> bytes:
    try:
        return _json_encoder.encode(value)
    except (TypeError, UnicodeEncodeError, msgspec.EncodeError) as exc:
        raise InvalidInputError(f"cannot encode as JSON: {exc}") from None


def encode_body(body: Body, max_bytes: int) -> bytes:
    data = encode_json(body)
    if len(data) > max_bytes:
        raise InvalidInputError(f"event of {len(data)} bytes exceeds the limit of {max_bytes} bytes")
    return data


def decode_body(data: bytes, session_id: str, seq: int) -> Body:
    try:
        body = _body_decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
        raise IntegrityError(session_id, seq, f"event body does not decode ({exc})") from None
    return check_messages(body, session_id, seq)


def header_aad(envelope: Envelope) -> bytes:
    """Associated data binding a sealed body to its header and so to its place in the log."""
    e = envelope
    header = [e.v, e.sid, e.uid, e.seq, e.ts, e.wid, e.prev, e.kid]
    return _json_encoder.encode(header if e.idem is None else [*header, e.idem])


def decode_envelope(data: bytes | memoryview, session_id: str, seq: int) -> Envelope:
    """Decode an event object and check it belongs at (session_id, seq)."""
    try:
        envelope = _envelope_decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
        raise IntegrityError(session_id, seq, f"not a valid event object ({exc})") from None
    if envelope.v != FORMAT_VERSION:
        raise IntegrityError(session_id, seq, f"unsupported format version {envelope.v}")
    if envelope.sid != session_id or envelope.seq != seq:
        raise IntegrityError(session_id, seq, f"object belongs to seq {envelope.seq} of session {envelope.sid!r}"[:200])
    if (envelope.body is None) == (envelope.sealed is None):
        raise IntegrityError(session_id, seq, "event must carry exactly one of body or sealed")
    if (envelope.sealed is None) != (envelope.kid is None):
        raise IntegrityError(session_id, seq, "key id and sealed body must come together")
    if envelope.body is not None:
        check_messages(envelope.body, session_id, seq)
    return envelope


def encode_manifest(manifest: Manifest) -> bytes:
    return _json_encoder.encode(manifest)


def decode_manifest(data: bytes, session_id: str) -> Manifest:
    try:
        manifest = msgspec.json.decode(data, type=Manifest)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
        raise IntegrityError(session_id, None, f"manifest does not decode ({exc})") from None
    if manifest.v != FORMAT_VERSION:
        raise IntegrityError(session_id, None, f"unsupported manifest version {manifest.v}")
    if manifest.sid != session_id:
        raise IntegrityError(session_id, None, f"manifest belongs to session {manifest.sid!r}"[:200])
    if (manifest.kid is None) != (manifest.salt is None):
        raise IntegrityError(session_id, None, "manifest key id and salt must come together")
    if manifest.salt is not None:
        try:
            salt = b64decode(manifest.salt)
        except (binascii.Error, ValueError):
            salt = b""
        if len(salt) != 32:
            raise IntegrityError(session_id, None, "manifest salt is not 32 bytes of base64")
    return manifest


def decode_tombstone(data: bytes, session_id: str) -> Tombstone:
    try:
        return msgspec.json.decode(data, type=Tombstone)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
        raise IntegrityError(session_id, None, f"tombstone does not decode ({exc})") from None


def fence_of(data: bytes) -> Tombstone | None:
    """The tombstone whose bytes ``delete`` wrote at the head's next seq (a fence), or None:
    ``data`` is no fence (an event, or anything else)."""
    if len(data) > MAX_SMALL_OBJECT_BYTES:
        return None
    try:
        return msgspec.json.decode(data, type=Tombstone)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None


# ---- compaction segments --------------------------------------------------
# A segment is the exact bytes of a run of events, so the chain and GCM tags
# check them as they check loose events: b"evstore-segment\n", one JSON header
# line (session id, uid, first seq, the length of each event), the bytes.
# Automatic compaction and ``compact`` store it as one zstd frame of those bytes (``compress_segment``);
# a reader takes either (``expand_segment``).

_SEGMENT_MAGIC = b"evstore-segment\n"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
#: zstd's level for segments: its default, 2.8x (32 events) to 5.6x (2,048) on English prose turns.
SEGMENT_ZSTD_LEVEL = 3


def compress_segment(data: bytes) -> bytes:
    """A packed segment as one zstd frame that states its size (so ``expand_segment`` can
    refuse one too large before it decompresses anything)."""
    import zstandard  # only a writer that compacts pays its import

    return zstandard.ZstdCompressor(level=SEGMENT_ZSTD_LEVEL, write_content_size=True).compress(data)


def expand_segment(data: bytes, max_bytes: int) -> bytes | None:
    """A stored segment's packed bytes: a zstd frame decompressed, anything else as it is
    (segments written before compression, or junk that ``segment_offsets`` refuses). None for a
    frame that does not decompress, or that would decompress to more than ``max_bytes`` (checked
    before decompressing, and bounded while it does: a planted frame cannot make a reader
    allocate more)."""
    if not data.startswith(_ZSTD_MAGIC):
        return data
    import zstandard

    try:
        size = zstandard.frame_content_size(data)
        if size > max_bytes:
            return None
        return zstandard.ZstdDecompressor().decompress(data, max_output_size=max_bytes)
    except zstandard.ZstdError:
        return None


class _SegmentHeader(msgspec.Struct):
    sid: str
    uid: str
    first: int
    lengths: list[int]


def pack_segment(session_id: str, uid: str, events: list[tuple[int, bytes]]) -> bytes:
    header = _SegmentHeader(session_id, uid, events[0][0], [len(data) for _, data in events])
    return _SEGMENT_MAGIC + msgspec.json.encode(header) + b"\n" + b"".join(data for _, data in events)


def segment_offsets(data: bytes, session_id: str, uid: str, first: int, last: int) -> list[int]:
    """Where each event of the segment ``first``-``last`` starts in ``data``, then where the
    last one ends; ``IntegrityError`` unless it is a segment of that session and range."""
    bad = IntegrityError(session_id, first, f"segment {first}-{last} does not decode")
    if not data.startswith(_SEGMENT_MAGIC):
        raise bad
    line_end = data.find(b"\n", len(_SEGMENT_MAGIC))
    try:
        header = msgspec.json.decode(data[len(_SEGMENT_MAGIC) : line_end], type=_SegmentHeader)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        raise bad from None
    if (
        line_end < 0
        or header.sid != session_id
        or header.uid != uid
        or header.first != first
        or len(header.lengths) != last - first + 1
        or any(n < 0 for n in header.lengths)
        or sum(header.lengths) != len(data) - line_end - 1
    ):
        raise bad
    return list(itertools.accumulate(header.lengths, initial=line_end + 1))


def unpack_segment(data: bytes, session_id: str, uid: str, first: int, last: int) -> list[tuple[int, bytes]]:
    """(seq, bytes) of each event of the segment (see ``segment_offsets``)."""
    offsets = segment_offsets(data, session_id, uid, first, last)
    return [(first + i, data[start:end]) for i, (start, end) in enumerate(itertools.pairwise(offsets))]
