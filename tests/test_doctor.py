"""``evstore doctor``: every check passes against memory, a local directory and moto's
server with evstore's rules installed, and each check fails, with a hint, when what
it checks is wrong. The If-None-Match probe leaves nothing behind."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber

import evstore
from evstore import MemoryStore, StoreUnavailableError
from evstore._backends._s3 import S3Store
from evstore._doctor import CHECKS, PROBE_PREFIX, DoctorReport, diagnose

from .test_network import SilentServer

ROOT = Path(__file__).resolve().parents[1]
NO_KEYS: dict[str, str] = {}


def statuses(report: DoctorReport) -> dict[str, str]:
    return {check.name: check.status for check in report.checks}


def check(report: DoctorReport, name: str) -> evstore._doctor.Check:
    return next(c for c in report.checks if c.name == name)


def assert_fails_with_hint(report: DoctorReport, name: str, *words: str) -> None:
    failed = check(report, name)
    assert failed.status == "fail", report.checks
    assert failed.hint, failed
    text = f"{failed.detail} {failed.hint}"
    for word in words:
        assert word in text, failed
    assert not report.ok


def new_bucket(endpoint: str) -> str:
    name = f"evs-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=name)
    return name


# ---- everything passes ---------------------------------------------------------


def test_a_memory_store_passes_every_check_and_keeps_nothing() -> None:
    backend = MemoryStore()
    report = diagnose(backend=backend, root="r", environ=NO_KEYS)
    assert [c.name for c in report.checks] == list(CHECKS)
    assert report.ok, report.checks
    assert list(backend.list("")) == []
    assert "not run by memory stores" in check(report, "lifecycle").detail


def test_a_local_directory_passes_every_check_and_keeps_nothing(tmp_path: Path) -> None:
    (tmp_path / "store").mkdir()  # empty: an empty store, as an empty bucket is
    report = diagnose((tmp_path / "store").as_uri(), environ=NO_KEYS)
    assert report.ok, report.checks
    assert "not run by local stores" in check(report, "lifecycle").detail
    objects = tmp_path / "store" / "objects"
    assert [p for p in objects.rglob("*") if p.is_file()] == []


def test_an_s3_bucket_with_evstores_rules_passes_every_check_and_keeps_nothing(moto_endpoint: str) -> None:
    bucket = new_bucket(moto_endpoint)
    evstore.open_store(f"s3://{bucket}/agents", endpoint_url=moto_endpoint, environ=NO_KEYS).apply_lifecycle(30)
    report = diagnose(f"s3://{bucket}/agents", endpoint_url=moto_endpoint, environ=NO_KEYS)
    assert report.ok, report.checks
    assert check(report, "lifecycle").detail == "installed: ephemeral sessions expire after 30 days"
    assert "found (env) and accepted" in check(report, "credentials").detail
    assert boto3.client("s3", endpoint_url=moto_endpoint).list_objects_v2(Bucket=bucket).get("KeyCount") == 0


def test_the_keys_configured_are_named_with_the_active_one(tmp_path: Path) -> None:
    ring = tmp_path / "ring.json"
    for kid in ("k1", "k2"):
        evstore._crypto.add_key_to_file(ring, kid)
    report = diagnose(backend=MemoryStore(), environ={"EVSTORE_KEYRING": str(ring), "EVSTORE_REQUIRE_ENCRYPTION": "1"})
    assert check(report, "keys").detail == "2 keys (k1, k2); active: k2; encryption required"
    assert report.ok


# ---- each check fails, with a hint ----------------------------------------------------


def test_a_bad_store_url_fails_and_skips_what_needs_a_store() -> None:
    report = diagnose("ftp://example/x", environ=NO_KEYS)
    assert_fails_with_hint(report, "store URL", "unsupported store URL", "s3://bucket")
    assert statuses(report) == {
        "store URL": "fail",
        "credentials": "skip",
        "bucket": "skip",
        "conditional create": "skip",
        "keys": "ok",  # still checked: it needs no store
        "lifecycle": "skip",
    }


def test_a_bad_network_setting_fails_the_store_url_check() -> None:
    report = diagnose("memory://", environ={"EVSTORE_READ_TIMEOUT": "never"})
    assert_fails_with_hint(report, "store URL", "EVSTORE_READ_TIMEOUT")


def test_missing_credentials_fail_with_what_to_set(tmp_path: Path) -> None:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "PYTHONPATH": str(ROOT),
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        "AWS_EC2_METADATA_DISABLED": "true",  # no instance-role lookup off this machine
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    run = subprocess.run(
        [sys.executable, "-m", "evstore_cli", "--store", "s3://some-bucket/r", "--endpoint-url", "http://127.0.0.1:9", "doctor"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 1, run.stderr
    lines = run.stdout.splitlines()
    assert lines[1].startswith("FAIL  credentials: no AWS credentials found (hint: set AWS_ACCESS_KEY_ID"), lines
    assert lines[2] == "skip  bucket: needs credentials"


def stubbed_backend(code: str, status: int) -> S3Store:
    backend = S3Store("some-bucket", endpoint_url="http://127.0.0.1:9")
    stubber = Stubber(backend.client)
    stubber.add_client_error("list_objects_v2", service_error_code=code, http_status_code=status)
    stubber.activate()
    return backend


@pytest.mark.parametrize(
    ("code", "failed", "words"),
    [
        ("InvalidAccessKeyId", "credentials", ("rejects them", "AWS_ACCESS_KEY_ID")),
        ("SignatureDoesNotMatch", "credentials", ("rejects them", "AWS_SECRET_ACCESS_KEY")),
        ("AccessDenied", "bucket", ("refused", "s3:ListBucket")),
    ],
)
def test_credentials_the_server_rejects_or_a_refused_listing_fail(code: str, failed: str, words: tuple[str, ...]) -> None:
    report = diagnose(backend=stubbed_backend(code, 403), root="r", environ=NO_KEYS)
    assert_fails_with_hint(report, failed, code, *words)
    assert check(report, "conditional create").status == "skip"


def test_a_missing_bucket_fails_with_how_to_create_it(moto_endpoint: str) -> None:
    report = diagnose("s3://no-such-bucket-here/r", endpoint_url=moto_endpoint, environ=NO_KEYS)
    assert check(report, "credentials").status == "ok"
    assert_fails_with_hint(report, "bucket", "does not exist", "aws s3 mb s3://no-such-bucket-here")
    assert check(report, "conditional create").status == "skip"


def test_a_server_that_never_answers_fails_the_bucket_check() -> None:
    silent = SilentServer()
    try:
        report = diagnose("s3://some-bucket/r", endpoint_url=silent.url, environ=NO_KEYS, read_timeout=0.3, max_attempts=1)
    finally:
        silent.close()
    assert_fails_with_hint(report, "bucket", "no answer within the 0.3 s read timeout", "--endpoint-url")
    assert silent.connections == 1


@pytest.mark.parametrize("named_by", ["url", "EVSTORE_STORE"])
def test_a_named_local_store_that_is_not_there_fails_and_nothing_is_made(tmp_path: Path, named_by: str) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    for path, why in ((tmp_path / "typo" / "store", "it does not exist"), (other, "it holds other files")):
        if named_by == "url":
            report = diagnose(path.as_uri(), environ=NO_KEYS)
        else:
            report = diagnose(environ={**NO_KEYS, "EVSTORE_STORE": path.as_uri()})
        assert statuses(report) == {
            "store URL": "ok",
            "credentials": "ok",
            "bucket": "fail",
            "conditional create": "skip",
            "keys": "ok",
            "lifecycle": "skip",
        }
        assert_fails_with_hint(report, "bucket", f"no store in directory {str(path)!r}: {why}", "a write (evstore append) makes")
    assert not (tmp_path / "typo").exists()
    assert [p.name for p in other.iterdir()] == ["notes.txt"]


def test_the_default_local_store_is_made_by_doctor_as_by_any_command(tmp_path: Path) -> None:
    report = diagnose(environ={**NO_KEYS, "XDG_DATA_HOME": str(tmp_path / "data"), "HOME": str(tmp_path)})
    assert report.ok, report.checks
    assert (tmp_path / "data" / "evstore" / "objects").is_dir()


def test_a_missing_local_directory_fails(tmp_path: Path) -> None:
    backend = evstore.LocalStore(tmp_path / "store")
    shutil.rmtree(tmp_path / "store")
    report = diagnose(backend=backend, environ=NO_KEYS)
    assert_fails_with_hint(report, "bucket", "not a writable directory")


class Overwriting(MemoryStore):
    """A server that ignores If-None-Match: a create over an existing key replaces it."""

    def create(
        self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None, tags: Mapping[str, str] | None = None
    ) -> str:
        self.delete_many([key])
        return super().create(key, data, metadata=metadata, tags=tags)


class Undeletable(MemoryStore):
    def delete_many(self, keys: Iterable[str]) -> int:
        raise StoreUnavailableError("delete refused: access denied (AccessDenied)")


def test_a_server_that_ignores_if_none_match_fails_the_probe() -> None:
    backend = Overwriting()
    report = diagnose(backend=backend, root="r", environ=NO_KEYS)
    assert_fails_with_hint(report, "conditional create", "does not honour If-None-Match", "Compatibility")
    assert list(backend.list("")) == []  # the probe is removed all the same


def test_a_probe_that_cannot_be_removed_fails_naming_its_key() -> None:
    backend = Undeletable()
    report = diagnose(backend=backend, root="r", environ=NO_KEYS)
    left = [info.key for info in backend.list("")]
    assert len(left) == 1 and left[0].startswith("r/sessions/" + PROBE_PREFIX)
    assert "/" not in left[0].removeprefix("r/sessions/")  # never a session: listings and gc do not see it
    assert_fails_with_hint(report, "conditional create", left[0], "could not be removed", "operator")


def test_the_probe_is_invisible_to_session_listings() -> None:
    store = evstore.Store(Undeletable(), root="r")
    diagnose(backend=store.backend, root="r", environ=NO_KEYS)
    assert list(store.list_sessions()) == []


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"EVSTORE_KEY": "not base64!"}, ("EVSTORE_KEY", "evstore keygen")),
        ({"EVSTORE_KEY": base64.b64encode(b"short").decode()}, ("EVSTORE_KEY", "32 bytes")),
        ({"EVSTORE_KEYRING": "/nonexistent/ring.json"}, ("ring.json", "EVSTORE_KEYRING")),
        ({"EVSTORE_REQUIRE_ENCRYPTION": "1"}, ("EVSTORE_REQUIRE_ENCRYPTION", "EVSTORE_KEY")),
    ],
    ids=["not-base64", "short-key", "missing-keyring", "required-without-key"],
)
def test_keys_that_do_not_parse_fail(env: dict[str, str], words: tuple[str, ...]) -> None:
    report = diagnose(backend=MemoryStore(), environ=env)
    assert_fails_with_hint(report, "keys", *words)


def test_an_s3_bucket_without_evstores_rules_fails_the_lifecycle_check(moto_endpoint: str) -> None:
    bucket = new_bucket(moto_endpoint)
    report = diagnose(f"s3://{bucket}/agents", endpoint_url=moto_endpoint, environ=NO_KEYS)
    assert_fails_with_hint(report, "lifecycle", "not installed", "evstore lifecycle apply")
    assert [c.name for c in report.checks if c.status != "ok"] == ["lifecycle"]


# ---- the command -------------------------------------------------------------------------


def run_doctor(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVSTORE_")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-m", "evstore_cli", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )


def test_the_command_prints_one_line_per_check_and_exits_0_when_all_pass(tmp_path: Path) -> None:
    (tmp_path / "s").mkdir()
    run = run_doctor("--store", (tmp_path / "s").as_uri(), "doctor")
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert [line.split(":")[0].split()[-1] for line in lines] == ["URL", "credentials", "bucket", "create", "keys", "lifecycle"]
    assert all(line.startswith("ok    ") for line in lines)
    assert run.stderr == ""


def test_the_command_exits_1_with_a_hint_when_a_check_fails(moto_endpoint: str) -> None:
    bucket = new_bucket(moto_endpoint)
    run = run_doctor("--store", f"s3://{bucket}/agents", "--endpoint-url", moto_endpoint, "doctor", "--json")
    assert run.returncode == 1, run.stderr
    result = json.loads(run.stdout)
    assert result["ok"] is False
    failed = [c for c in result["checks"] if c["status"] == "fail"]
    assert [c["name"] for c in failed] == ["lifecycle"]
    assert "evstore lifecycle apply" in failed[0]["hint"]
