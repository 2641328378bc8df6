"""Secrets stay out of messages and out of world-readable files.

* Credentials written into a store URL (``s3://AKIA...:secret@bucket``) or an endpoint URL
  (``http://user:secret@host``) are refused, and no error message (library, command, doctor)
  shows them, even when an unescaped '/' in the secret confuses the URL parser.
* ``export -o FILE`` writes with mode 0600 (an export may hold decrypted messages), also
  over an existing file that was readable by others.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner
from evstore_cli import cli

from evstore import InvalidInputError, open_store
from evstore._url import open_backend, redact_url

ACCESS = "AKIAEXAMPLE7QWERTY"
SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYzEXAMPLEKEY"
SECRET_PARTS = [ACCESS, SECRET, "wJalrXUtnFEMI", "K7MDENG+bPxRfiCYzEXAMPLEKEY"]

STORE_URLS = [
    f"s3://{ACCESS}:{SECRET}@my-bucket/root",  # '/' in the secret: the parser cuts the netloc at it
    f"s3://{ACCESS}:{SECRET.replace('/', '%2F')}@my-bucket/root",
    f"s3://{ACCESS}:{SECRET.replace('/', '')}@my-bucket",
    f"s3://{ACCESS}@my-bucket/root",
    f"s3://{ACCESS}:{SECRET}@Not_A_Bucket!/root",
    f"file://{ACCESS}:{SECRET.replace('/', '')}@host/tmp/store",
    f"gs://{ACCESS}:{SECRET}@bucket/root",
    f"s3://{ACCESS}:{SECRET}@my-bucket/root?x=1",
]


def assert_secret_free(text: str) -> None:
    for part in SECRET_PARTS:
        assert part not in text, text


@pytest.mark.parametrize("url", STORE_URLS)
def test_a_store_url_with_credentials_is_refused_without_echoing_them(url: str) -> None:
    with pytest.raises(InvalidInputError) as refused:
        open_store(url, environ={})
    assert_secret_free(str(refused.value))
    assert "***@" in str(refused.value) or "credentials" in str(refused.value)


@pytest.mark.parametrize(
    "endpoint",
    [
        f"http://{ACCESS}:{SECRET}@127.0.0.1:9000",
        f"https://{ACCESS}:{SECRET.replace('/', '')}@s3.example.test",
        f"http://{ACCESS}@127.0.0.1:9000",
        f"{ACCESS}:{SECRET}@127.0.0.1:9000",  # no scheme either
    ],
)
def test_an_endpoint_url_with_credentials_is_refused_without_echoing_them(endpoint: str) -> None:
    for attempt in (
        lambda: open_store("s3://my-bucket/root", endpoint_url=endpoint, environ={}),
        lambda: open_store("s3://my-bucket/root", environ={"AWS_ENDPOINT_URL": endpoint}),
    ):
        with pytest.raises(InvalidInputError) as refused:
            attempt()
        assert_secret_free(str(refused.value))


def test_credentials_are_named_as_the_problem() -> None:
    with pytest.raises(InvalidInputError, match="carries credentials"):
        open_store(f"s3://{ACCESS}:{SECRET}@my-bucket/root", environ={})
    with pytest.raises(InvalidInputError, match="carries credentials"):
        open_store("s3://my-bucket", endpoint_url=f"http://{ACCESS}:{SECRET}@127.0.0.1:9000", environ={})


def test_a_root_with_an_at_sign_still_opens() -> None:
    store = open_store("memory:///team@x/root", environ={})
    store.create("s").append({"role": "user", "content": "hi"})
    assert [m["content"] for m in store.context("s")] == ["hi"]
    backend, root = open_backend("s3://my-bucket/team@x/evstore", environ={})
    assert root == "team@x/evstore"
    backend.close()


def test_redact_url_keeps_what_is_not_secret() -> None:
    assert redact_url(f"s3://{ACCESS}:{SECRET}@my-bucket/root") == "s3://***@my-bucket/root"
    assert redact_url("s3://my-bucket/root") == "s3://my-bucket/root"
    assert redact_url(f"http://{ACCESS}:x@host:9000/") == "http://***@host:9000/"
    assert redact_url("file:///tmp/a@b/store") == "file:///tmp/a@b/store"
    assert redact_url(f"file://{ACCESS}:x@host/tmp/a@b") == "file://***@host/tmp/a@b"
    assert len(redact_url("s3://" + "b" * 500)) == 100


@pytest.mark.parametrize("url", STORE_URLS[:3])
def test_the_command_and_doctor_never_print_url_credentials(url: str) -> None:
    runner = CliRunner()
    env = {"EVSTORE_STORE": url, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    result = runner.invoke(cli, ["info", "chat"], env=env)
    assert result.exit_code == 2
    assert_secret_free(result.output)
    doctor = runner.invoke(cli, ["doctor"], env=env)
    assert_secret_free(doctor.output)
    endpoint = runner.invoke(
        cli, ["--store", "s3://my-bucket", "--endpoint-url", f"http://{ACCESS}:{SECRET}@127.0.0.1:1", "info", "chat"], env=env
    )
    assert endpoint.exit_code == 2
    assert_secret_free(endpoint.output)


# ---- export -o writes a private file ------------------------------------------------------


@pytest.fixture
def local_env(tmp_path: Path) -> dict[str, str]:
    env = {"EVSTORE_STORE": (tmp_path / "store").as_uri()}
    result = CliRunner().invoke(cli, ["append", "chat", "a secret plan"], env=env)
    assert result.exit_code == 0, result.output
    return env


@pytest.mark.parametrize("fmt", ["jsonl", "chatcli", "html"])
def test_export_to_a_new_file_is_private(local_env: dict[str, str], tmp_path: Path, fmt: str) -> None:
    out = tmp_path / f"export.{fmt}"
    old = os.umask(0o022)
    try:
        result = CliRunner().invoke(cli, ["export", "chat", "--format", fmt, "-o", str(out)], env=local_env)
    finally:
        os.umask(old)
    assert result.exit_code == 0, result.output
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert b"a secret plan" in out.read_bytes()


def test_export_over_a_readable_file_makes_it_private(local_env: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "export.jsonl"
    out.write_bytes(b"old content that is longer than the export will be" * 10)
    out.chmod(0o644)
    result = CliRunner().invoke(cli, ["export", "chat", "--format", "jsonl", "-o", str(out)], env=local_env)
    assert result.exit_code == 0, result.output
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert out.read_bytes().count(b"\n") == 1 and b"old content" not in out.read_bytes()


def test_export_to_stdout_still_works(local_env: dict[str, str]) -> None:
    result = CliRunner().invoke(cli, ["export", "chat", "--format", "jsonl"], env=local_env)
    assert result.exit_code == 0 and "a secret plan" in result.output
