"""Fuzzing with hypothesis: decoders, session ids, messages, the command and
store URLs. Only ``EvstoreError`` subclasses may come out of the library, and
only one-line errors with the documented exit codes out of the command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
from click.testing import CliRunner
from evstore_cli import cli
from evstore_cli._write import Batch, parse_jsonl_entries
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import evstore
from evstore import EvstoreError, IntegrityError, InvalidInputError, MemoryStore, Receipt, Store
from evstore._codec import decode_body, decode_envelope, decode_manifest, decode_message_json
from evstore._ids import _SESSION_ID, validate_session_id
from evstore._url import open_backend, open_store

from .conftest import FIGURES, ROOT, SCALE, helper_env

pytestmark = pytest.mark.stress

EXIT_CODES = frozenset(range(7))


def fuzz(examples: int) -> settings:
    return settings(
        max_examples=examples * SCALE,
        deadline=None,  # no timed assertions: machines are shared
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
    )


json_scalars = (
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False, allow_infinity=False) | st.text()
)
json_values = st.recursive(
    json_scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4), max_leaves=12
)
near_messages = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "system", "tool", "robot", ""]) | json_scalars},
    optional={
        "content": json_values,
        "tool_calls": json_values,
        "tool_call_id": json_values,
        "name": json_values,
        "meta": json_values,
        "extra": json_values,
    },
)


def sample_objects() -> tuple[bytes, bytes, bytes]:
    """A real manifest, event and body, plaintext."""
    store = Store(MemoryStore(), root="r")
    store.open("s", create=True).append({"role": "user", "content": "hello", "meta": {"k": [1, 2.5, None]}})
    manifest = store.backend.get("r/sessions/s/manifest").data
    event = store.backend.get("r/sessions/s/00000000000000000001").data
    body = msgspec.json.encode(msgspec.json.decode(event)["body"])
    return manifest, event, body


MANIFEST, EVENT, BODY = sample_objects()


def mutations(sample: bytes) -> st.SearchStrategy[bytes]:
    truncated = st.integers(0, len(sample) - 1).map(lambda n: sample[:n])
    flipped = st.tuples(st.integers(0, len(sample) - 1), st.integers(0, 7)).map(
        lambda p: sample[: p[0]] + bytes([sample[p[0]] ^ (1 << p[1])]) + sample[p[0] + 1 :]
    )
    return truncated | flipped | st.binary(max_size=300)


@fuzz(300)
@given(data=mutations(EVENT))
def test_envelope_decoder_raises_only_integrity_errors(data: bytes) -> None:
    FIGURES.add_fuzzed("envelope")
    try:
        decode_envelope(data, "s", 1)
    except IntegrityError as error:
        assert "\n" not in str(error)


@fuzz(300)
@given(data=mutations(MANIFEST))
def test_manifest_decoder_raises_only_integrity_errors(data: bytes) -> None:
    FIGURES.add_fuzzed("manifest")
    try:
        decode_manifest(data, "s")
    except IntegrityError as error:
        assert "\n" not in str(error)


@fuzz(300)
@given(data=mutations(BODY))
def test_body_decoder_raises_only_integrity_errors(data: bytes) -> None:
    FIGURES.add_fuzzed("body")
    try:
        decode_body(data, "s", 1)
    except IntegrityError as error:
        assert "\n" not in str(error)


@fuzz(150)
@given(encrypted=st.booleans(), target=st.sampled_from(["manifest", 1, 2, 3]), position=st.floats(0, 1), bit=st.integers(0, 7))
def test_any_bit_flip_in_a_stored_session_fails_verify_with_an_integrity_error(
    encrypted: bool, target: str | int, position: float, bit: int
) -> None:
    FIGURES.add_fuzzed("stored objects")
    keyring = evstore.Keyring.from_key(evstore.generate_key()) if encrypted else None
    store = Store(MemoryStore(), root="r", keyring=keyring)
    writer = store.open("s", create=True)
    for i in range(3):
        writer.append({"role": "user", "content": f"m{i}"})
    receipt = store.verify("s").receipt
    key = "r/sessions/s/" + (target if isinstance(target, str) else f"{target:020d}")
    stored = store.backend.get(key)
    at = min(int(position * len(stored.data)), len(stored.data) - 1)
    flipped = stored.data[:at] + bytes([stored.data[at] ^ (1 << bit)]) + stored.data[at + 1 :]
    store.backend.replace(key, flipped, etag=stored.etag)
    with pytest.raises(IntegrityError):
        store.verify("s", expect=Receipt(receipt.seq, receipt.hash))


@fuzz(200)
@given(
    candidate=st.text(max_size=140)
    | st.from_regex(_SESSION_ID, fullmatch=True)
    | st.integers()
    | st.none()
    | st.binary(max_size=20)
)
def test_session_ids_are_accepted_exactly_when_documented(candidate: object) -> None:
    FIGURES.add_fuzzed("session ids")
    valid = isinstance(candidate, str) and _SESSION_ID.fullmatch(candidate) is not None and ".." not in candidate
    try:
        assert validate_session_id(candidate) == candidate and valid
    except InvalidInputError as error:
        assert not valid and "\n" not in str(error)


@fuzz(100)
@given(sid=st.from_regex(_SESSION_ID, fullmatch=True).filter(lambda s: ".." not in s))
def test_every_accepted_session_id_works_in_a_directory_store(sid: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    FIGURES.add_fuzzed("session ids")
    store = Store(evstore.LocalStore(tmp_path_factory.mktemp("ids")), root="r")
    store.open(sid, create=True).append({"role": "user", "content": sid})
    assert [e.messages[0]["content"] for e in store.replay(sid)] == [sid]


@fuzz(300)
@given(text=st.text(max_size=200) | st.builds(lambda v: msgspec.json.encode(v).decode(), json_values))
def test_message_json_is_a_message_or_an_invalid_input_error(text: str) -> None:
    FIGURES.add_fuzzed("message json")
    try:
        decode_message_json(text)
    except InvalidInputError as error:
        assert "\n" not in str(error)


@fuzz(300)
@given(message=near_messages)
def test_a_message_is_refused_with_invalid_input_or_replays_as_given(message: dict[str, Any]) -> None:
    FIGURES.add_fuzzed("messages")
    store = Store(MemoryStore())
    writer = store.open("m", create=True)
    try:
        writer.append(message)
    except InvalidInputError:
        return
    assert next(store.replay("m")).messages == [message]


@fuzz(100)
@given(
    text=st.tuples(st.text(max_size=4), st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), st.text(max_size=4)).map(
        "".join
    )
)
def test_text_that_is_not_unicode_scalars_is_refused_as_invalid_input(text: str) -> None:
    """Lone surrogates (what a non-UTF-8 argv byte becomes) cannot be encoded: refuse them, as any bad input."""
    FIGURES.add_fuzzed("messages")
    writer = Store(MemoryStore()).open("m", create=True)
    with pytest.raises(InvalidInputError):
        writer.append({"role": "user", "content": text})


@pytest.mark.parametrize("role", [[], {}, [["user"]]], ids=["list", "object", "nested-list"])
def test_a_role_of_any_json_type_is_refused_as_invalid_input(role: object) -> None:
    FIGURES.add_fuzzed("messages")
    writer = Store(MemoryStore()).open("m", create=True)
    with pytest.raises(InvalidInputError):
        writer.append({"role": role, "content": "x"})


# ---- the command -------------------------------------------------------------

runner = CliRunner()


def check_command(result: Any) -> None:
    """Exit code documented; no traceback; a failure is one ``evstore: ...`` line on stderr."""
    assert result.exit_code in EXIT_CODES, (result.exit_code, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    if result.exit_code:
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("evstore: "), result.stderr


def expected_append(sid: str, mode: str, payload: bytes, role: str) -> list[evstore.Message] | None:
    """What ``append`` must store for this input: its messages, or None where it must refuse
    (exit 2). The library's own decoders are the oracle for what is a message."""
    try:
        validate_session_id(sid)
        if mode == "text":
            return [{"role": role, "content": payload.decode("utf-8", "replace")}]
        text = payload.decode("utf-8")
        if mode == "stdin":  # no input at all is no message (docs/commands.md); an empty line is one
            return [{"role": role, "content": text.removesuffix("\n")}] if payload else None
        if mode == "json":
            return [decode_message_json(text)]
        batches = [entry for entry in parse_jsonl_entries(text.splitlines()) if isinstance(entry, Batch)]
        rewinds = len(list(parse_jsonl_entries(text.splitlines()))) - len(batches)
        assume(not rewinds)  # a rewind line's effect is checked in tests/test_formats.py
        return [m for batch in batches for m in batch.messages] or None
    except (InvalidInputError, UnicodeDecodeError):
        return None


def head_of(store: Store, sid: str) -> int | None:
    try:
        return store.info(sid).head
    except (evstore.SessionNotFoundError, InvalidInputError):
        return None


@fuzz(120)
@given(
    sid=st.text(max_size=20) | st.from_regex(_SESSION_ID, fullmatch=True),
    mode=st.sampled_from(["text", "stdin", "json", "jsonl"]),
    payload=st.binary(max_size=200) | st.text(max_size=200).map(str.encode) | st.builds(msgspec.json.encode, near_messages),
    role=st.sampled_from(["user", "assistant", "tool", "system"]),
)
def test_append_through_the_command_stores_exactly_the_input_or_refuses_it_with_exit_2(
    sid: str, mode: str, payload: bytes, role: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Exit 0 with the messages stored as given, or exit 2 with nothing stored: never another code."""
    FIGURES.add_fuzzed("command")
    assume(not sid.startswith("-") and "\x00" not in sid)
    store = tmp_path_factory.getbasetemp() / "cli-store"
    args = ["--store", store.as_uri(), "append", sid, "--role", role]
    stdin: bytes | None = payload
    if mode == "text":
        text = payload.decode("utf-8", "replace")
        assume(not text.startswith("-") and "\x00" not in text)
        args.append(text)
        stdin = None
    elif mode in ("json", "jsonl"):
        args.append(f"--{mode}")
    want = expected_append(sid, mode, payload, role)
    reader = Store(evstore.LocalStore(store))
    before = head_of(reader, sid)
    result = runner.invoke(cli, args, input=stdin)
    check_command(result)
    if want is None:
        assert result.exit_code == 2, (result.exit_code, result.output)
        assert head_of(reader, sid) == before  # nothing written, no session created
        return
    assert result.exit_code == 0, (result.exit_code, result.output)
    last = int(result.stdout.split()[-1])
    first = last - len(want) + 1 if mode == "jsonl" else last
    stored = [m for e in reader.replay(sid, start=first) for m in e.messages]
    assert stored == want


@pytest.mark.parametrize("size", [5 * 1024 * 1024 - 64, 5 * 1024 * 1024 + 1])
def test_append_of_a_message_at_and_over_the_size_limit(size: int, tmp_path: Path) -> None:
    FIGURES.add_fuzzed("command")
    result = runner.invoke(cli, ["--store", tmp_path.as_uri(), "append", "big"], input=b"x" * size)
    check_command(result)
    assert result.exit_code == (0 if size < 5 * 1024 * 1024 else 2)


@pytest.mark.parametrize(
    "args",
    [["append"], ["append", "s", "--role", "robot", "x"], ["no-such-command"], ["replay", "s", "--from", "zero"]],
    ids=["missing-argument", "bad-choice", "unknown-command", "bad-integer"],
)
def test_usage_errors_are_one_line_with_exit_2(args: list[str], tmp_path: Path) -> None:
    FIGURES.add_fuzzed("command")
    result = runner.invoke(cli, ["--store", tmp_path.as_uri(), *args])
    assert result.exit_code == 2
    check_command(result)


REAL_RUNS = [  # (argv, stdin, the exit code, what the one line says)
    (["append", "s", b"\xff\xfe-not-utf8"], b"", 2, b"cannot encode as JSON"),
    (["append", "s"], b"\xff\xfe\x00 not utf-8 on stdin", 2, b"not valid UTF-8"),
    (["append", "s", "--json"], b'{"role": "user", "content": "x"', 2, b"invalid JSON"),
    (["append", "../etc", "x"], b"", 2, b"invalid session id"),
    (["replay", "never-made"], b"", 3, b"not found"),
]


@pytest.mark.parametrize(
    ("args", "stdin", "code", "says"), REAL_RUNS, ids=["argv-bytes", "stdin-bytes", "broken-json", "bad-id", "not-found"]
)
def test_the_installed_command_fails_with_its_one_line_error_and_exit_code(
    args: list[Any], stdin: bytes, code: int, says: bytes, tmp_path: Path
) -> None:
    FIGURES.add_fuzzed("command (subprocess)")
    argv = [sys.executable.encode(), b"-m", b"evstore_cli", b"--store", tmp_path.as_uri().encode()]
    argv += [a if isinstance(a, bytes) else a.encode() for a in args]
    run = subprocess.run(argv, input=stdin, capture_output=True, cwd=ROOT, env=helper_env(), timeout=60)
    assert run.returncode == code, run.stderr
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(b"evstore: ") and says in lines[0], run.stderr
    assert not (tmp_path / "objects").exists() or not any((tmp_path / "objects").rglob("0*"))  # nothing was appended


# ---- store URLs: never contact a host, never touch a directory outside tmp ----------

LOOPBACK_DEAD = "http://127.0.0.1:9"  # s3 URLs are only parsed; nothing is sent


def check_url(url: str, **kwargs: Any) -> None:
    try:
        store = open_store(url, endpoint_url=LOOPBACK_DEAD, environ={}, **kwargs)
    except EvstoreError as error:
        assert "\n" not in str(error)
        return
    store.close()


@fuzz(300)
@given(url=st.text(max_size=60))
def test_arbitrary_text_as_a_store_url_opens_or_raises_an_evstore_error(url: str) -> None:
    assume("file" not in url.lower())  # a file URL would create directories: those are fuzzed under tmp below
    FIGURES.add_fuzzed("store urls")
    check_url(url)


URL_PART = st.lists(
    st.sampled_from([*"abz09-_", "[", "]", ":", "@", "?", "#", " ", "\x00", "\ud800", "%00", "%ff", "%41", "é"]), max_size=8
).map("".join)  # no "/", "." or "%2e"/"%2f": a fuzzed file URL stays one directory level under its base


@fuzz(300)
@given(scheme=st.sampled_from(["s3", "S3", "memory", "http", "", "s3a"]), netloc=URL_PART, path=st.lists(URL_PART, max_size=3))
def test_structured_store_urls_open_or_raise_an_evstore_error(scheme: str, netloc: str, path: list[str]) -> None:
    FIGURES.add_fuzzed("store urls")
    check_url(f"{scheme}://{netloc}/{'/'.join(path)}")


@fuzz(150)
@given(name=URL_PART)
def test_file_urls_under_a_directory_open_or_raise_an_evstore_error(name: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    FIGURES.add_fuzzed("store urls")
    base = tmp_path_factory.getbasetemp() / "file-urls"
    try:
        backend, _ = open_backend(f"{base.as_uri()}/{name}")
    except EvstoreError as error:
        assert "\n" not in str(error)
        return
    opened = Path(backend.location.removeprefix("file://"))
    assert base in (opened, opened.parent)  # stayed under base


def test_an_s3_url_against_the_moto_server_round_trips(stress_moto: str) -> None:
    from .conftest import create_bucket

    FIGURES.add_fuzzed("store urls")
    store = open_store(f"s3://{create_bucket(stress_moto)}/some/root", endpoint_url=stress_moto, environ={})
    store.open("u", create=True).append({"role": "user", "content": "via url"})
    assert [e.messages[0]["content"] for e in store.replay("u")] == ["via url"]
