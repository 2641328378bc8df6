"""Master keys, per-session keys and sealing. Pure functions only (no I/O but reading a keyring file).

* A master key is 32 bytes, named by a key id that every session records.
  A keyring file names its keys; a key from ``EVSTORE_KEY`` is called
  ``EVSTORE_KEY_ID`` (default ``default``), so that the wrong key fails as an
  integrity error at the first sealed event, not as a missing key.
* Session key = HKDF-SHA256(master[kid], salt = manifest salt,
  info = ``evstore/v1/session/<sid>``), used with AES-256-GCM, a random 96-bit
  nonce per event, and the event header as associated data.
"""

from __future__ import annotations

import binascii
import hashlib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from ._codec import b64decode, b64encode
from ._errors import InvalidInputError

if TYPE_CHECKING:  # cryptography loads on first use: plaintext stores never pay its import time
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

KEY_BYTES = 32
SALT_BYTES = 32
NONCE_BYTES = 12
_KEY_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


class _KeyringFile(msgspec.Struct):
    active: str
    keys: dict[str, str]


def key_fingerprint(key: bytes) -> str:
    return "k-" + hashlib.sha256(b"evstore/v1/key-id/" + key).hexdigest()[:16]


def _decode_key(text: str, where: str) -> bytes:
    try:
        key = b64decode(text.strip())
    except (binascii.Error, ValueError):
        key = b""
    if len(key) != KEY_BYTES:
        raise InvalidInputError(f"{where} must be base64 of exactly {KEY_BYTES} bytes")
    return key


def generate_key() -> str:
    """A new master key, as base64 text."""
    return b64encode(os.urandom(KEY_BYTES))


class Keyring(msgspec.Struct, frozen=True):
    """Master keys by key id; ``active`` seals new sessions. Its repr shows no key."""

    keys: Mapping[str, bytes] = msgspec.field(default_factory=dict)
    active: str | None = None

    def __repr__(self) -> str:
        return f"Keyring(active={self.active!r}, key_ids={sorted(self.keys)!r})"

    def __post_init__(self) -> None:
        for kid, key in self.keys.items():
            if not _KEY_ID.fullmatch(kid) or len(key) != KEY_BYTES:
                raise InvalidInputError(f"keyring entry {kid!r:.70} is not a valid key id with a 32-byte key")
        if self.active is not None and self.active not in self.keys:
            raise InvalidInputError(f"active key id {self.active!r:.70} is not in the keyring")

    @classmethod
    def from_key(cls, key_b64: str, key_id: str = "default") -> Keyring:
        return cls({key_id: _decode_key(key_b64, "EVSTORE_KEY")}, key_id)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Keyring:
        try:
            raw = Path(path).read_bytes()
        except OSError as exc:
            raise InvalidInputError(f"cannot read keyring {str(path)!r}: {exc.strerror}") from None
        try:
            parsed = msgspec.json.decode(raw, type=_KeyringFile)
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise InvalidInputError(
                f'keyring {str(path)!r} is not JSON of the form {{"active": ID, "keys": {{ID: BASE64}}}}'
            ) from None
        keys = {kid: _decode_key(text, f"keyring key {kid!r:.70}") for kid, text in parsed.keys.items()}
        return cls(keys, parsed.active)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Keyring:
        """``EVSTORE_KEYRING`` (a file) and ``EVSTORE_KEY`` (one key), merged; the key is active."""
        env = os.environ if environ is None else environ
        keys: dict[str, bytes] = {}
        active = None
        if env.get("EVSTORE_KEYRING"):
            ring = cls.from_file(env["EVSTORE_KEYRING"])
            keys.update(ring.keys)
            active = ring.active
        if env.get("EVSTORE_KEY"):
            single = cls.from_key(env["EVSTORE_KEY"], env.get("EVSTORE_KEY_ID") or "default")
            keys.update(single.keys)
            active = single.active
        return cls(keys, active)

    def get(self, kid: str) -> bytes | None:
        return self.keys.get(kid)


def add_key_to_file(path: str | os.PathLike[str], key_id: str | None = None) -> str:
    """Add a new key to a keyring file (created if missing), make it active; return its id."""
    target = Path(path)
    ring = Keyring.from_file(target) if target.exists() else Keyring()
    key = os.urandom(KEY_BYTES)
    kid = key_id or key_fingerprint(key)
    if kid in ring.keys:
        raise InvalidInputError(f"key id {kid!r:.70} is already in the keyring")
    keys = dict(ring.keys)
    keys[kid] = key
    Keyring(keys, kid)  # validates the new id
    document = _KeyringFile(kid, {k: b64encode(v) for k, v in keys.items()})
    tmp = target.with_name(target.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(msgspec.json.format(msgspec.json.encode(document)))
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, target)
    return kid


def new_salt() -> bytes:
    return os.urandom(SALT_BYTES)


def derive_session_key(master: bytes, salt: bytes, session_id: str) -> AESGCM:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    hkdf = HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=salt, info=b"evstore/v1/session/" + session_id.encode())
    return AESGCM(hkdf.derive(master))


def seal(key: AESGCM, plaintext: bytes, aad: bytes) -> bytes:
    nonce = os.urandom(NONCE_BYTES)
    return nonce + key.encrypt(nonce, plaintext, aad)


def open_sealed(key: AESGCM, sealed: bytes, aad: bytes) -> bytes | None:
    """The plaintext, or None when the tag does not verify (wrong key, moved or edited object)."""
    from cryptography.exceptions import InvalidTag

    if len(sealed) < NONCE_BYTES + 16:
        return None
    try:
        return key.decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], aad)
    except InvalidTag:
        return None
