"""Opening a store from a URL: ``s3://bucket[/root]``, ``file:///path``, ``memory://``."""

from __future__ import annotations

import os
import re
import sys
import urllib.parse
from collections.abc import Mapping
from pathlib import Path

from ._backends import ObjectStore
from ._backends._retry import NetworkSettings, RetryNote
from ._crypto import Keyring
from ._errors import InvalidInputError
from ._store import Store

_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_TRUE = frozenset({"1", "true", "yes", "on"})


def default_store_url(environ: Mapping[str, str] | None = None) -> str:
    """``EVSTORE_STORE``, else a directory under the user's data directory."""
    env = os.environ if environ is None else environ
    if env.get("EVSTORE_STORE"):
        return env["EVSTORE_STORE"]
    if sys.platform == "win32":
        base = Path(env.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Application Support"
    else:
        base = Path(env.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return (base / "evstore").resolve().as_uri()


def chosen_store_url(url: str | None, environ: Mapping[str, str] | None = None) -> tuple[str, bool]:
    """The URL to open (``url``, else ``default_store_url``) and whether it was named (``url`` or
    ``EVSTORE_STORE``): a named ``file:`` store is made only where asked (``create_store``), the
    default data directory by any use."""
    env = os.environ if environ is None else environ
    return url or default_store_url(env), bool(url or env.get("EVSTORE_STORE"))


def open_backend(
    url: str,
    *,
    endpoint_url: str | None = None,
    environ: Mapping[str, str] | None = None,
    network: NetworkSettings | None = None,
    on_retry: RetryNote | None = None,
    create_store: bool = True,
) -> tuple[ObjectStore, str]:
    """The backend a URL names, and the store root inside it. ``network`` (default: from the
    environment) and ``on_retry`` apply to S3 stores, the only ones that make requests;
    ``create_store`` to a ``file:`` store (``LocalStore``'s ``create``): a bucket is never made."""
    env = os.environ if environ is None else environ
    shown = redact_url(url)  # what messages show: never the credentials a URL may carry
    if not url.isprintable():  # control characters, NUL, lone surrogates
        raise InvalidInputError(f"store URL {shown!r} has characters a URL cannot have")
    try:
        parsed = urllib.parse.urlsplit(url)
    except ValueError:
        raise InvalidInputError(f"store URL {shown!r} does not parse") from None
    scheme = parsed.scheme.lower()
    if _has_credentials(url, parsed):
        raise InvalidInputError(
            f"store URL {shown!r} carries credentials: evstore never takes them from a URL; "
            "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE"
        )
    if parsed.query or parsed.fragment:
        raise InvalidInputError(f"store URL {shown!r} must not have a query or fragment")
    if scheme == "memory":
        from ._backends import MemoryStore  # loaded for a memory store only

        return MemoryStore(), parsed.path.strip("/")
    if scheme == "file":
        if parsed.netloc not in ("", "localhost") or not parsed.path.startswith("/"):
            raise InvalidInputError(f"store URL {shown!r}: use file:///absolute/path")
        try:
            path = urllib.parse.unquote(parsed.path, errors="strict")
        except UnicodeDecodeError:
            raise InvalidInputError(f"store URL {shown!r}: the path is not UTF-8") from None
        if "\x00" in path:
            raise InvalidInputError(f"store URL {shown!r}: the path has a NUL byte")
        from ._backends import LocalStore  # loaded for a local store only

        return LocalStore(path, create=create_store), ""
    if scheme == "s3":
        bucket = parsed.netloc
        if not _BUCKET.fullmatch(bucket) or ".." in bucket:
            raise InvalidInputError(f"store URL {shown!r}: {bucket[:70]!r} is not a valid bucket name")
        root = parsed.path.strip("/")
        if any(part in ("", ".", "..") for part in root.split("/")) and root:
            raise InvalidInputError(f"store URL {shown!r}: the root has an empty or dot segment")
        from ._backends._s3 import S3Store  # boto3 is slow to import: only when needed

        endpoint = endpoint_url or env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or None
        if endpoint is not None:
            check_endpoint_url(endpoint)
        net = NetworkSettings.resolve(env) if network is None else network
        return S3Store(
            bucket,
            endpoint_url=endpoint,
            connect_timeout=net.connect_timeout,
            read_timeout=net.read_timeout,
            max_attempts=net.max_attempts,
            retry_deadline=net.retry_deadline,
            retry_mode=net.retry_mode,
            on_retry=on_retry,
        ), root
    raise InvalidInputError(f"unsupported store URL {shown!r}: use s3://bucket[/root], file:///path or memory://")


def check_endpoint_url(endpoint: str) -> None:
    """``InvalidInputError`` unless ``endpoint`` is an ``http://`` or ``https://`` URL with a host
    and no credentials (boto3 never sends them from there; messages never show them)."""
    shown = redact_url(endpoint)
    try:
        parsed = urllib.parse.urlsplit(endpoint)
        credentials = _has_credentials(endpoint, parsed)
        parsed.port  # noqa: B018  (a port that is not a number raises here)
    except ValueError:
        parsed = None
        credentials = "@" in endpoint
    if credentials:
        raise InvalidInputError(
            f"endpoint URL {shown!r} carries credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY instead"
        )
    if parsed is None or parsed.scheme.lower() not in ("http", "https") or not parsed.hostname or not endpoint.isprintable():
        hint = f": use http://{shown} (or https://)" if endpoint.isprintable() and "://" not in endpoint else ""
        raise InvalidInputError(f"endpoint URL {shown!r} is not http(s)://HOST[:PORT]{hint}")


_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def redact_url(url: str, limit: int = 100) -> str:
    """``url`` as messages show it: credentials (``user:secret@``) replaced by ``***@``, cut to
    ``limit`` characters. A secret may hold '/' unescaped (AWS secret keys do), so everything
    between ``://`` and the last '@' goes (in ``file:`` URLs only the authority's)."""
    match = _SCHEME.match(url)
    start = match.end() if match else 0
    if url[:start].lower() == "file://":
        end = len(url)
        for stop in "/?#":
            found = url.find(stop, start)
            end = min(end, found) if found >= 0 else end
        at = url.rfind("@", start, end)
    else:
        at = url.rfind("@", start)
    if at >= 0:
        url = url[:start] + "***" + url[at:]
    return url[:limit]


def _has_credentials(url: str, parsed: urllib.parse.SplitResult) -> bool:
    """A userinfo part (``user[:secret]@``), also when an unescaped '/' in the secret makes the
    URL parser cut the authority short (``s3://AKIA:abc/def@bucket``)."""
    if "@" in parsed.netloc:
        return True
    match = _SCHEME.match(url)
    rest = url[match.end() :] if match else ""
    before, at, _ = rest.partition("@")
    return bool(at) and ":" in before and parsed.scheme.lower() != "file"


def check_credentials(backend: ObjectStore) -> None:
    """No credentials at all is a configuration mistake: say what to set, before any request.

    boto3 resolves its credential chain (environment, profile files, instance roles) when the
    client is made; ``None`` there means every request would fail with ``NoCredentialsError``.
    """
    signer = getattr(getattr(backend, "client", None), "_request_signer", None)
    if signer is not None and getattr(signer, "_credentials", False) is None:
        raise InvalidInputError(
            "no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE"
            " (a profile in ~/.aws/credentials), or run where an instance role provides them"
        )


def open_store(
    url: str | None = None,
    *,
    endpoint_url: str | None = None,
    keyring: Keyring | str | os.PathLike[str] | None = None,
    require_encryption: bool | None = None,
    environ: Mapping[str, str] | None = None,
    connect_timeout: float | None = None,
    read_timeout: float | None = None,
    max_attempts: int | None = None,
    retry_deadline: float | None = None,
    on_retry: RetryNote | None = None,
    create_store: bool = True,
    **options: object,
) -> Store:
    """Open the store a URL names (default: ``EVSTORE_STORE``, else the local data directory).

    Keys come from ``EVSTORE_KEY``/``EVSTORE_KEYRING`` unless ``keyring`` is
    given (a ``Keyring``, or the path of a keyring file); ``EVSTORE_REQUIRE_ENCRYPTION=1`` refuses plaintext sessions.
    ``EVSTORE_AUTO_COMPACT=N`` makes writers pack their runs into segments of N events.
    Network settings (S3): the arguments, else ``EVSTORE_CONNECT_TIMEOUT``, ``EVSTORE_READ_TIMEOUT``,
    ``EVSTORE_MAX_ATTEMPTS`` (else ``AWS_MAX_ATTEMPTS``), ``EVSTORE_RETRY_DEADLINE``; ``on_retry``
    gets a one-line note each time a request is retried. ``create_store=False``: a named ``file:`` store (``url``
    or ``EVSTORE_STORE``) whose directory does not exist, or holds other files and no store, is
    ``StoreUnavailableError`` rather than a new store (for a caller that must not make one where a path may be
    mistyped); the default data directory is made anyway.
    ``options`` go to ``Store`` (``max_event_bytes``, ``concurrency``, ``auto_compact``, ``writer_lease``, ``clock``).
    """
    env = os.environ if environ is None else environ
    network = NetworkSettings.resolve(
        env,
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        max_attempts=max_attempts,
        retry_deadline=retry_deadline,
    )
    chosen, named = chosen_store_url(url, env)
    backend, root = open_backend(
        chosen, endpoint_url=endpoint_url, environ=env, network=network, on_retry=on_retry, create_store=create_store or not named
    )
    check_credentials(backend)
    if keyring is None:
        keyring = Keyring.from_env(env)
    elif isinstance(keyring, str | os.PathLike):
        keyring = Keyring.from_file(keyring)
    elif not isinstance(keyring, Keyring):
        raise InvalidInputError(
            f"keyring must be an evstore.Keyring or the path of a keyring file, not {type(keyring).__name__}"
        )
    if require_encryption is None:
        require_encryption = env.get("EVSTORE_REQUIRE_ENCRYPTION", "").strip().lower() in _TRUE
    if "auto_compact" not in options and env.get("EVSTORE_AUTO_COMPACT"):
        text = env["EVSTORE_AUTO_COMPACT"].strip()
        if not text.isdigit():
            raise InvalidInputError(f"EVSTORE_AUTO_COMPACT must be a segment size, not {text[:20]!r}")
        options["auto_compact"] = int(text)
    return Store(backend, root=root, keyring=keyring, require_encryption=require_encryption, **options)  # type: ignore[arg-type]
