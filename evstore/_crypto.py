"""Master keys, per-session keys and sealing. Pure functions only (no I/O but reading and
writing a keyring file).

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
import contextlib
import fcntl
import hashlib
import os
import re
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, BinaryIO

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


#: A keyring file larger than this is refused (about 14,000 keys).
MAX_KEYRING_BYTES = 1 << 20


def open_regular_file(path: str | os.PathLike[str], what: str, limit: int) -> BinaryIO:
    """``path`` open for reading: a regular file (reached through symlinks, as mounted secrets
    are) of at most ``limit`` bytes; a FIFO or device is refused at once (``InvalidInputError``),
    never read or waited on. ``what`` names the file in messages ("keyring", "input file")."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise InvalidInputError(f"cannot read {what} {str(path)!r}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InvalidInputError(f"{what} {str(path)!r} is not a regular file")
        if info.st_size > limit:
            raise InvalidInputError(f"{what} {str(path)!r} is larger than {limit} bytes")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _read_keyring_file(path: str | os.PathLike[str]) -> bytes:
    """The keyring file's bytes (``open_regular_file``), at most ``MAX_KEYRING_BYTES``."""
    try:
        with open_regular_file(path, "keyring", MAX_KEYRING_BYTES) as handle:
            raw = handle.read(MAX_KEYRING_BYTES + 1)
    except OSError as exc:
        raise InvalidInputError(f"cannot read keyring {str(path)!r}: {exc.strerror}") from None
    if len(raw) > MAX_KEYRING_BYTES:
        raise InvalidInputError(f"keyring {str(path)!r} is larger than {MAX_KEYRING_BYTES} bytes")
    return raw


def generate_key() -> str:
    """A new master key, as base64 text."""
    return b64encode(os.urandom(KEY_BYTES))


class Keyring:
    """Master keys by key id; ``active`` seals new sessions. Immutable.

    It never shows key bytes by accident: ``repr``/``str`` and rich's repr
    (``__rich_repr__``) name the key ids only, and it is not a type msgspec can
    encode (``msgspec.to_builtins``/``msgspec.json.encode`` raise ``TypeError``).
    The bytes are reachable only by asking for them (``keys``, ``get``).
    """

    __slots__ = ("_active", "_keys")
    _keys: Mapping[str, bytes]
    _active: str | None

    def __init__(self, keys: Mapping[str, bytes] | None = None, active: str | None = None) -> None:
        frozen = MappingProxyType(dict(keys or {}))
        for kid, key in frozen.items():
            if not isinstance(kid, str) or not _KEY_ID.fullmatch(kid) or not isinstance(key, bytes) or len(key) != KEY_BYTES:
                raise InvalidInputError(f"keyring entry {kid!r:.70} is not a valid key id with a 32-byte key")
        if active is not None and active not in frozen:
            raise InvalidInputError(f"active key id {active!r:.70} is not in the keyring")
        object.__setattr__(self, "_keys", frozen)
        object.__setattr__(self, "_active", active)

    @property
    def keys(self) -> Mapping[str, bytes]:
        """The master keys by key id (read-only)."""
        return self._keys

    @property
    def active(self) -> str | None:
        return self._active

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("a Keyring is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("a Keyring is immutable")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Keyring):
            return NotImplemented
        return self._active == other._active and dict(self._keys) == dict(other._keys)

    __hash__ = None  # type: ignore[assignment]  # equal by content, which is a mutable-looking mapping

    def __reduce__(self) -> tuple[type[Keyring], tuple[dict[str, bytes], str | None]]:
        # copy/deepcopy/pickle rebuild it through the validating constructor
        return (Keyring, (dict(self._keys), self._active))

    def __repr__(self) -> str:
        return f"Keyring(active={self._active!r}, key_ids={sorted(self._keys)!r})"

    def __rich_repr__(self) -> Iterator[tuple[str, object]]:
        yield "active", self._active
        yield "key_ids", sorted(self._keys)

    @classmethod
    def from_key(cls, key_b64: str, key_id: str = "default") -> Keyring:
        return cls({key_id: _decode_key(key_b64, "EVSTORE_KEY")}, key_id)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Keyring:
        raw = _read_keyring_file(path)
        try:
            parsed = msgspec.json.decode(raw, type=_KeyringFile)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
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
    """Add a new key to a keyring file (created if missing), make it active; return its id.

    Safe under concurrent runs and in shared directories: an exclusive ``flock`` on
    ``<file>.lock`` (beside it, opened without following a symlink, kept afterwards)
    serializes read-modify-write, so no run's key is lost; the new keyring is written to
    a fresh ``mkstemp`` file (mode 0600) in the same directory, fsynced, renamed over the
    keyring, and the directory fsynced. A planted ``<file>.tmp`` or symlink receives nothing.
    """
    target = Path(path)
    lock_path = target.with_name(target.name + ".lock")
    try:
        lock_fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise InvalidInputError(f"cannot lock keyring {str(target)!r} ({str(lock_path)!r}): {exc.strerror}") from None
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        ring = Keyring.from_file(target) if os.path.lexists(target) else Keyring()
        key = os.urandom(KEY_BYTES)
        kid = key_id or key_fingerprint(key)
        if kid in ring.keys:
            raise InvalidInputError(f"key id {kid!r:.70} is already in the keyring")
        keys = dict(ring.keys)
        keys[kid] = key
        Keyring(keys, kid)  # validates the new id
        document = _KeyringFile(kid, {k: b64encode(v) for k, v in keys.items()})
        _replace_file(target, msgspec.json.format(msgspec.json.encode(document)))
    finally:
        os.close(lock_fd)  # releases the lock
    return kid


def _replace_file(target: Path, data: bytes) -> None:
    """Write ``data`` to a new private temp file beside ``target``, fsync it, rename it over
    ``target`` and fsync the directory; the temp file never outlives a failure."""
    import tempfile  # here: keyring files are written by hand, and it costs ``import evstore`` 4 ms

    directory = target.parent
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as exc:
        raise InvalidInputError(f"cannot write keyring {str(target)!r}: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise InvalidInputError(f"cannot write keyring {str(target)!r}: {exc.strerror}") from None


def new_salt() -> bytes:
    return os.urandom(SALT_BYTES)


#: HKDF's ``info`` for a session key: part of the stored format (a change makes every sealed
#: session unreadable; tests/test_known_answers.py pins it).
SESSION_KEY_INFO = b"evstore/v1/session/"


def session_key_bytes(master: bytes, salt: bytes, session_id: str) -> bytes:
    """The session's 32-byte AES key: HKDF-SHA256(master, salt, ``SESSION_KEY_INFO`` + sid)."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    return HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=salt, info=SESSION_KEY_INFO + session_id.encode()).derive(
        master
    )


def derive_session_key(master: bytes, salt: bytes, session_id: str) -> AESGCM:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    return AESGCM(session_key_bytes(master, salt, session_id))


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
