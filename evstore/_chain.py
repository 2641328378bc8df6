"""The hash chain and receipts. Pure functions only.

Every event's ``prev`` is the SHA-256 of the previous event object's bytes;
for seq 1 of the manifest's bytes, and for a fork's first own event of the
parent's event at the fork seq. A receipt (head seq, head hash) pins a whole
history: a later log extends it only if its event at that seq has that hash.
"""

from __future__ import annotations

import msgspec

from ._errors import InvalidInputError
from ._ids import validate_seq

_HEX = frozenset("0123456789abcdef")


class Receipt(msgspec.Struct, frozen=True):
    """What an auditor records: the head seq and the hash of the head event."""

    seq: int
    hash: str

    def __str__(self) -> str:
        return f"{self.seq}:{self.hash}"

    @classmethod
    def parse(cls, text: str) -> Receipt:
        seq_text, colon, digest = text.strip().partition(":")
        if not colon or not seq_text.isdigit() or len(digest) != 64 or not set(digest) <= _HEX:
            raise InvalidInputError(f"invalid receipt {text[:90]!r}: expected SEQ:SHA256HEX")
        return cls(validate_seq(int(seq_text), allow_zero=True), digest)


class VerifyResult(msgspec.Struct, frozen=True):
    """What ``verify`` found: the receipt of the head, the events checked, the sealed ones
    whose tags a configured key checked and those it could not."""

    session_id: str
    receipt: Receipt
    events: int
    sealed_checked: int
    sealed_unchecked: int
    expected: Receipt | None = None
    #: The expected receipt names an event a rekey re-sealed: it is extended, as recorded in a rekey record.
    superseded_by_rekey: bool = False
