"""``evstore doctor``: is this store usable as configured? One ``Check`` per question.

Checks, in order (a check that needs an earlier one that failed is skipped):

* ``store URL``: the URL parses and names a backend (and the network settings parse);
* ``credentials``: S3 only: botocore finds credentials, and the server accepts them;
* ``bucket``: the bucket exists and may be listed under the store root (a local
  directory: exists and is writable; one named by the URL or ``EVSTORE_STORE`` that does
  not exist, or holds other files and no store, fails, and nothing is made there);
* ``conditional create``: the server honours ``If-None-Match: *``: a scratch object is
  created, a second create of the same key must be refused and leave the first
  bytes, and the object is removed afterwards. Its key is
  ``<root>/sessions/.evstore-doctor-<random>``: inside the prefix evstore's IAM
  policies grant, and never a session (it has no ``/`` after the id, so session
  listings and gc do not see it);
* ``keys``: ``EVSTORE_KEY``/``EVSTORE_KEYRING`` parse; which key is active;
  ``EVSTORE_REQUIRE_ENCRYPTION`` with no key fails;
* ``lifecycle``: S3: evstore's two rules are installed for this root; local and
  memory stores never run rules (``gc --apply-lifecycle`` does their work).

Requests: one LIST, two PUTs, one GET and one DELETE for the probe, one
lifecycle GET; nothing else is written.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from typing import Literal

import msgspec

from . import _lifecycle
from ._backends import LocalStore, MemoryStore, ObjectExists, ObjectMissing, ObjectStore
from ._backends._retry import NetworkSettings, RetryNote
from ._crypto import Keyring
from ._errors import EvstoreError, InvalidInputError, StoreUnavailableError
from ._ids import Layout

Status = Literal["ok", "fail", "skip"]
CHECKS = ("store URL", "credentials", "bucket", "conditional create", "keys", "lifecycle")
PROBE_PREFIX = ".evstore-doctor-"
_TRUE = frozenset({"1", "true", "yes", "on"})
_REJECTED_CREDENTIALS = frozenset({"InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken"})
_COMPATIBLE = "AWS S3, MinIO (2024 or later), Ceph RGW and moto 5 honour it; see the Compatibility table in docs/compatibility.md"


class Check(msgspec.Struct, frozen=True):
    """One line of the report; ``hint`` says what to do when ``status`` is ``fail``."""

    name: str
    status: Status
    detail: str
    hint: str = ""


class DoctorReport(msgspec.Struct, frozen=True):
    checks: list[Check]

    @property
    def ok(self) -> bool:
        """True only when every check passed."""
        return all(check.status == "ok" for check in self.checks)


def _kind(backend: ObjectStore) -> str:
    if isinstance(backend, LocalStore):
        return "local directory"
    if isinstance(backend, MemoryStore):
        return "memory, this process only"
    return "S3"


def diagnose(
    url: str | None = None,
    *,
    endpoint_url: str | None = None,
    environ: Mapping[str, str] | None = None,
    keyring: Keyring | None = None,
    backend: ObjectStore | None = None,
    root: str = "",
    connect_timeout: float | None = None,
    read_timeout: float | None = None,
    max_attempts: int | None = None,
    retry_deadline: float | None = None,
    on_retry: RetryNote | None = None,
) -> DoctorReport:
    """Run every check against the store ``url`` names (as ``open_store`` would open it), or
    against ``backend`` and ``root`` when given. Never raises for what it finds: each problem
    is a failed check with a hint."""
    from ._url import chosen_store_url, open_backend, redact_url

    env = os.environ if environ is None else environ
    checks: list[Check] = []
    if backend is None:
        shown, named = chosen_store_url(url, env)
        try:
            network = NetworkSettings.resolve(
                env,
                connect_timeout=connect_timeout,
                read_timeout=read_timeout,
                max_attempts=max_attempts,
                retry_deadline=retry_deadline,
            )
            # a named store is checked where it is: never made (the default directory is)
            backend, root = open_backend(
                shown, endpoint_url=endpoint_url, environ=env, network=network, on_retry=on_retry, create_store=not named
            )
        except StoreUnavailableError as error:  # a file: store whose directory is missing or holds other files
            checks += [
                Check("store URL", "ok", f"{redact_url(shown)} (local directory)"),
                Check("credentials", "ok", "not needed (local directory)"),
                Check("bucket", "fail", str(error), "a write (evstore append) makes the store there; check the path"),
                *_past_an_unreachable_bucket(env, keyring),
            ]
            return DoctorReport(checks)
        except EvstoreError as error:
            checks.append(
                Check(
                    "store URL",
                    "fail",
                    str(error),
                    "use s3://bucket[/root], file:///absolute/path or memory:// (--store or EVSTORE_STORE), "
                    "an http(s):// endpoint, and valid EVSTORE_* network settings",
                )
            )
            checks += [Check(name, "skip", "needs a store URL that opens") for name in CHECKS[1:4]]
            checks.append(_keys(env, keyring))
            checks.append(Check("lifecycle", "skip", "needs a store URL that opens"))
            return DoctorReport(checks)
    layout = Layout(root)
    checks.append(Check("store URL", "ok", f"{backend.location}" + (f", root {root!r}" if root else "") + f" ({_kind(backend)})"))
    try:
        if _credentials_and_bucket(backend, layout, checks):
            checks += [_conditional_create(backend, layout), _keys(env, keyring), _lifecycle_rules(backend, layout)]
        else:
            checks += _past_an_unreachable_bucket(env, keyring)
    finally:
        backend.close()
    return DoctorReport(checks)


def _past_an_unreachable_bucket(env: Mapping[str, str], keyring: Keyring | None) -> list[Check]:
    """The checks after the bucket's where it cannot be used: the keys alone are checked."""
    return [
        Check("conditional create", "skip", "needs a reachable bucket"),
        _keys(env, keyring),
        Check("lifecycle", "skip", "needs a reachable bucket"),
    ]


def _credentials_and_bucket(backend: ObjectStore, layout: Layout, checks: list[Check]) -> bool:
    """Append the credentials and bucket checks; True when the bucket can be used."""
    from ._backends._s3 import S3Store

    if isinstance(backend, LocalStore):
        checks.append(Check("credentials", "ok", "not needed (local directory)"))
        base = backend.base
        if base.is_dir() and os.access(base, os.W_OK | os.X_OK):
            checks.append(Check("bucket", "ok", f"directory {str(base)!r} exists and is writable"))
            return True
        checks.append(
            Check("bucket", "fail", f"directory {str(base)!r} is not a writable directory", "check its owner and mode")
        )
        return False
    if not isinstance(backend, S3Store):
        checks.append(Check("credentials", "ok", "not needed (" + _kind(backend) + ")"))
        try:
            backend.list_page(layout.sessions, max_keys=1)
        except EvstoreError as error:
            checks.append(Check("bucket", "fail", str(error), "check the store"))
            return False
        checks.append(Check("bucket", "ok", "reachable (" + _kind(backend) + ")"))
        return True
    method = backend.credentials_method()
    if method is None:
        checks.append(
            Check(
                "credentials",
                "fail",
                "no AWS credentials found",
                "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, or run where a role provides them",
            )
        )
        checks.append(Check("bucket", "skip", "needs credentials"))
        return False
    try:
        code = backend.probe_bucket(layout.sessions)
    except EvstoreError as error:
        checks.append(Check("credentials", "skip", f"found ({method}); the server did not answer to check them"))
        checks.append(
            Check(
                "bucket",
                "fail",
                str(error),
                "check the endpoint (--endpoint-url, AWS_ENDPOINT_URL) and that the server runs; "
                "EVSTORE_CONNECT_TIMEOUT, EVSTORE_READ_TIMEOUT and EVSTORE_MAX_ATTEMPTS set the bounds",
            )
        )
        return False
    if code in _REJECTED_CREDENTIALS:
        checks.append(
            Check(
                "credentials",
                "fail",
                f"found ({method}) but the server rejects them ({code})",
                "check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or the profile) for this endpoint",
            )
        )
        checks.append(Check("bucket", "skip", "needs accepted credentials"))
        return False
    checks.append(Check("credentials", "ok", f"found ({method}) and accepted"))
    if code is None:
        checks.append(Check("bucket", "ok", f"{backend.bucket!r} exists and may be listed under {layout.sessions!r}"))
        return True
    if code == "NoSuchBucket":
        hint = f"create it (aws s3 mb s3://{backend.bucket}, or infra/cloudformation.yaml), or fix the store URL"
        checks.append(Check("bucket", "fail", f"bucket {backend.bucket!r} does not exist", hint))
    elif code in ("AccessDenied", "403", "AllAccessDisabled"):
        hint = f"allow s3:ListBucket on {backend.bucket!r} for the prefix {layout.sessions!r} (see infra/iam/)"
        checks.append(Check("bucket", "fail", f"listing bucket {backend.bucket!r} was refused ({code})", hint))
    else:
        checks.append(Check("bucket", "fail", f"listing bucket {backend.bucket!r} failed ({code})", "check the store URL"))
    return False


def _conditional_create(backend: ObjectStore, layout: Layout) -> Check:
    key = f"{layout.sessions}{PROBE_PREFIX}{secrets.token_hex(8)}"
    name = "conditional create"
    first, second = b"evstore doctor probe: first", b"evstore doctor probe: second"
    created = False
    try:
        try:
            backend.create(key, first)
            created = True
        except ObjectExists:
            return Check(name, "fail", f"the scratch key {key!r} already existed", "run doctor again")
        try:
            backend.create(key, second)
            verdict = "a second create of an existing key succeeded"
        except ObjectExists:
            verdict = ""
        try:
            if not verdict and backend.get(key).data != first:
                verdict = "a refused create changed the object anyway"
        except ObjectMissing:
            verdict = "the object vanished after a refused create"
        if verdict:
            return Check(
                name,
                "fail",
                f"the server does not honour If-None-Match: * ({verdict}): writers could overwrite each other",
                f"use a server that refuses a create over an existing key with 412; {_COMPATIBLE}",
            )
    except EvstoreError as error:
        return Check(
            name,
            "fail",
            f"the probe failed: {error}",
            f"allow s3:PutObject and s3:GetObject under {layout.sessions!r} (see infra/iam/)",
        )
    finally:
        removal = _remove(backend, key) if created else None
    if removal:
        return Check(
            name,
            "fail",
            f"If-None-Match: * is honoured, but the scratch object {key!r} could not be removed: {removal}",
            "remove it with credentials that may delete (the operator policy); nothing reads it",
        )
    return Check(name, "ok", "If-None-Match: * is honoured (probe created, refused a second time, removed)")


def _remove(backend: ObjectStore, key: str) -> str | None:
    """Delete the probe; the reason when it could not be, else None."""
    try:
        backend.delete_many([key])
    except EvstoreError as error:
        return str(error)
    return None


def _keys(env: Mapping[str, str], keyring: Keyring | None) -> Check:
    name = "keys"
    required = env.get("EVSTORE_REQUIRE_ENCRYPTION", "").strip().lower() in _TRUE
    if keyring is None:
        try:
            keyring = Keyring.from_env(env)
        except InvalidInputError as error:
            return Check(
                name,
                "fail",
                str(error),
                "EVSTORE_KEY is base64 of 32 bytes (evstore keygen); EVSTORE_KEYRING names a keyring file "
                "(evstore keygen --keyring FILE)",
            )
    if not keyring.keys:
        if required:
            return Check(
                name,
                "fail",
                "EVSTORE_REQUIRE_ENCRYPTION is set but no key is configured",
                "set EVSTORE_KEY (evstore keygen) or EVSTORE_KEYRING",
            )
        return Check(name, "ok", "none configured: new sessions are stored in plaintext")
    ids = ", ".join(sorted(keyring.keys))
    count = len(keyring.keys)
    return Check(
        name,
        "ok",
        f"{count} key{'s' if count > 1 else ''} ({ids}); active: {keyring.active}"
        + ("; encryption required" if required else ""),
    )


def _lifecycle_rules(backend: ObjectStore, layout: Layout) -> Check:
    from ._backends._s3 import S3Store

    name = "lifecycle"
    if not isinstance(backend, S3Store):
        kind = "local" if isinstance(backend, LocalStore) else "memory"
        return Check(
            name, "ok", f"not run by {kind} stores: ephemeral sessions expire only by `evstore gc --apply-lifecycle`"
        )
    try:
        rules = backend.get_lifecycle()
    except EvstoreError as error:
        return Check(
            name, "fail", f"cannot read the rules: {error}", "allow s3:GetLifecycleConfiguration (the operator policy)"
        )
    wanted = {rule["ID"] for rule in _lifecycle.evstore_rules(layout.sessions, _lifecycle.DEFAULT_EPHEMERAL_DAYS)}
    installed = {str(rule.get("ID")) for rule in rules if rule.get("Status") == "Enabled"}
    missing = sorted(wanted - installed)
    if missing:
        return Check(
            name,
            "fail",
            f"evstore's rules are not installed ({', '.join(missing)} missing): ephemeral sessions never expire",
            "run `evstore lifecycle apply` (with credentials that may set lifecycle rules)",
        )
    days = next(
        (
            rule.get("Expiration", {}).get("Days")
            for rule in rules
            if str(rule.get("ID", "")).startswith(_lifecycle.EPHEMERAL_RULE_ID) and rule.get("ID") in wanted
        ),
        None,
    )
    return Check(name, "ok", "installed" + (f": ephemeral sessions expire after {days} days" if days else ""))
