"""Network behaviour a user controls: timeouts, attempts and the retry deadline (keyword
arguments, environment variables, command options), and evstore's own retry policy,
which keeps retrying safe requests where botocore's shared retry quota would run dry.

Servers here are on 127.0.0.1 only: a socket that accepts and never answers, and
moto's HTTP server. No assertion is about elapsed time: bounds are shown by the
attempts the server saw.
"""

from __future__ import annotations

import os
import pty
import random
import re
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import botocore.exceptions
import pytest
import urllib3
from botocore.awsrequest import AWSPreparedRequest
from botocore.httpsession import URLLib3Session

import evstore
from evstore import InvalidInputError, Store, StoreUnavailableError
from evstore._backends._retry import (
    BACKOFF_CAP,
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_READ_TIMEOUT,
    DEFAULT_RETRY_DEADLINE,
    NetworkSettings,
    backoff_delay,
)
from evstore._backends._s3 import S3Store
from evstore._backends._s3_errors import transient_kind

ROOT = Path(__file__).resolve().parents[1]
EXIT_STORE_UNAVAILABLE = 1  # README "Exit codes": the store did not answer


class SilentServer:
    """Accepts TCP connections on 127.0.0.1 and never answers; counts the connections."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.1)
        self.connections = 0
        self._held: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            self._held.append(conn)  # held open, never read from nor written to

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for conn in self._held:
            conn.close()
        self.sock.close()


@pytest.fixture
def silent() -> Iterator[SilentServer]:
    server = SilentServer()
    yield server
    server.close()


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVSTORE_", "AWS_"))}
    env.update(
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION="us-east-1",
        PYTHONPATH=str(ROOT),
        **extra,
    )
    return env


def run_cli(args: list[str], env: dict[str, str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "evstore_cli", *args], cwd=ROOT, env=env, text=True, timeout=60, **kwargs
    )


# ---- settings ------------------------------------------------------------------------


@pytest.mark.slow
def test_defaults_bound_a_silent_server_to_about_twenty_seconds() -> None:
    settings = NetworkSettings.resolve({})
    assert (settings.connect_timeout, settings.read_timeout) == (DEFAULT_CONNECT_TIMEOUT, DEFAULT_READ_TIMEOUT)
    assert (settings.max_attempts, settings.retry_deadline) == (DEFAULT_MAX_ATTEMPTS, DEFAULT_RETRY_DEADLINE)
    # each attempt waits one read timeout, plus the backoffs between attempts (each at most its ceiling)
    worst = settings.max_attempts * settings.read_timeout + sum(
        min(BACKOFF_CAP, 0.1 * 2.0 ** (n - 1)) for n in range(1, settings.max_attempts)
    )
    assert worst <= 20


def test_arguments_win_over_evstore_variables_which_win_over_botocores() -> None:
    env = {
        "EVSTORE_CONNECT_TIMEOUT": "2",
        "EVSTORE_READ_TIMEOUT": "4.5s",
        "EVSTORE_RETRY_DEADLINE": "9",
        "AWS_MAX_ATTEMPTS": "7",
        "AWS_RETRY_MODE": "adaptive",
    }
    from_env = NetworkSettings.resolve(env)
    assert from_env == NetworkSettings(2.0, 4.5, 7, 9.0, "adaptive")
    assert NetworkSettings.resolve(env | {"EVSTORE_MAX_ATTEMPTS": "2"}).max_attempts == 2
    given = NetworkSettings.resolve(env, connect_timeout=1, read_timeout=1.5, max_attempts=4, retry_deadline=3)
    assert given == NetworkSettings(1.0, 1.5, 4, 3.0, "adaptive")


BAD_SETTINGS = [
    ({"EVSTORE_READ_TIMEOUT": "soon"}, {}, "EVSTORE_READ_TIMEOUT"),
    ({"EVSTORE_CONNECT_TIMEOUT": "0"}, {}, "EVSTORE_CONNECT_TIMEOUT"),
    ({"EVSTORE_RETRY_DEADLINE": "nan"}, {}, "EVSTORE_RETRY_DEADLINE"),
    ({"EVSTORE_MAX_ATTEMPTS": "0"}, {}, "EVSTORE_MAX_ATTEMPTS"),
    ({"EVSTORE_MAX_ATTEMPTS": "2.5"}, {}, "EVSTORE_MAX_ATTEMPTS"),
    ({"AWS_MAX_ATTEMPTS": "many"}, {}, "AWS_MAX_ATTEMPTS"),
    ({"AWS_RETRY_MODE": "eager"}, {}, "AWS_RETRY_MODE"),
    ({}, {"read_timeout": -1}, "read_timeout"),
    ({}, {"max_attempts": 101}, "max_attempts"),
    ({}, {"max_attempts": True}, "max_attempts"),
]


@pytest.mark.parametrize(("env", "given", "named"), BAD_SETTINGS)
def test_a_bad_setting_is_invalid_input_naming_it(env: dict[str, str], given: dict[str, Any], named: str) -> None:
    with pytest.raises(InvalidInputError, match=named) as failure:
        NetworkSettings.resolve(env, **given)
    assert "\n" not in str(failure.value)


def test_open_store_hands_the_settings_to_the_s3_backend() -> None:
    env = {"EVSTORE_READ_TIMEOUT": "4", "AWS_MAX_ATTEMPTS": "5", "AWS_RETRY_MODE": "adaptive"}
    store = evstore.open_store("s3://some-bucket/root", endpoint_url="http://127.0.0.1:9", environ=env, connect_timeout=1.5)
    backend = store.backend
    assert isinstance(backend, S3Store)
    assert (backend.connect_timeout, backend.read_timeout, backend.max_attempts) == (1.5, 4.0, 5)
    config = backend.client.meta.config
    assert (config.connect_timeout, config.read_timeout) == (1.5, 4.0)
    # botocore makes a single attempt in the mode the user chose; the retries are evstore's
    assert config.retries == {"mode": "adaptive", "total_max_attempts": 1}
    store.close()


def test_local_stores_refuse_a_bad_network_setting_too(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="EVSTORE_MAX_ATTEMPTS"):
        evstore.open_store(tmp_path.as_uri(), environ={"EVSTORE_MAX_ATTEMPTS": "-1"})


def test_backoff_is_jittered_exponential_and_capped() -> None:
    rng = random.Random(1)
    for attempt in range(1, 12):
        ceiling = min(BACKOFF_CAP, 0.1 * 2.0 ** (attempt - 1))
        delays = {backoff_delay(attempt, base=0.1, rng=rng) for _ in range(20)}
        assert all(ceiling / 2 <= d <= ceiling for d in delays)
        assert len(delays) > 1  # jittered
    assert backoff_delay(1, base=0.1, throttled=True, rng=rng) >= 0.25  # slowed down when throttled


def client_error(status: int, code: str) -> botocore.exceptions.ClientError:
    return botocore.exceptions.ClientError(
        {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "PutObject"
    )


def test_what_is_retried_and_what_is_not() -> None:
    assert transient_kind(client_error(503, "SlowDown"), conditional=False) == "throttled"
    assert transient_kind(client_error(500, "InternalError"), conditional=True) == "error"
    assert transient_kind(client_error(409, "ConditionalRequestConflict"), conditional=True) == "conflict"
    assert transient_kind(client_error(409, "BucketNotEmpty"), conditional=False) is None
    for status, code in [(412, "PreconditionFailed"), (404, "NoSuchKey"), (403, "AccessDenied"), (400, "InvalidArgument")]:
        assert transient_kind(client_error(status, code), conditional=True) is None
    assert transient_kind(botocore.exceptions.ReadTimeoutError(endpoint_url="x"), conditional=True) == "error"
    assert transient_kind(botocore.exceptions.ConnectionClosedError(endpoint_url="x"), conditional=True) == "error"
    assert transient_kind(botocore.exceptions.EndpointConnectionError(endpoint_url="x"), conditional=False) == "error"
    assert transient_kind(botocore.exceptions.NoCredentialsError(), conditional=False) is None
    assert transient_kind(botocore.exceptions.SSLError(endpoint_url="x", error="bad cert"), conditional=False) is None


# ---- a server that accepts and never answers ------------------------------------------------


def test_a_silent_server_fails_the_library_after_the_attempts_given(silent: SilentServer) -> None:
    store = evstore.open_store(
        "s3://silent-bucket/root", endpoint_url=silent.url, environ={}, read_timeout=0.3, connect_timeout=0.3, max_attempts=2
    )
    with pytest.raises(StoreUnavailableError) as failure:
        store.open("chat", create=True)
    message = str(failure.value)
    assert "no answer within the 0.3 s read timeout after 2 attempts" in message
    assert "EVSTORE_READ_TIMEOUT" in message and "\n" not in message
    assert silent.connections == 4  # the manifest GET and the listing sent with it: 2 attempts each
    store.close()


def test_botocores_max_attempts_variable_is_honoured(silent: SilentServer) -> None:
    env = {"AWS_MAX_ATTEMPTS": "3", "EVSTORE_READ_TIMEOUT": "0.2", "EVSTORE_RETRY_DEADLINE": "60"}
    store = evstore.open_store("s3://silent-bucket/root", endpoint_url=silent.url, environ=env)
    with pytest.raises(StoreUnavailableError, match="after 3 attempts"):
        list(store.list_sessions())  # one request at a time (info sends two together)
    assert silent.connections == 3
    store.close()


def test_the_deadline_stops_retries_before_the_attempts_run_out(silent: SilentServer) -> None:
    # every attempt waits at least its 0.4 s read timeout, so a third would start after 0.8 s: past the deadline
    store = evstore.open_store(
        "s3://silent-bucket/root", endpoint_url=silent.url, environ={}, read_timeout=0.4, max_attempts=10, retry_deadline=0.7
    )
    with pytest.raises(StoreUnavailableError):
        list(store.list_sessions())  # one request at a time (info sends two together)
    assert 1 <= silent.connections <= 2
    store.close()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("options", "env"),
    [
        (["--connect-timeout", "1", "--read-timeout", "1", "--max-attempts", "2"], {}),
        ([], {"EVSTORE_CONNECT_TIMEOUT": "1", "EVSTORE_READ_TIMEOUT": "1", "EVSTORE_MAX_ATTEMPTS": "2"}),
    ],
    ids=["options", "environment"],
)
def test_the_command_fails_one_line_within_the_configured_bound(
    silent: SilentServer, options: list[str], env: dict[str, str]
) -> None:
    run = run_cli(
        [*options, "--store", "s3://silent-bucket/root", "--endpoint-url", silent.url, "append", "chat", "hello"],
        cli_env(**env),
        capture_output=True,
    )
    assert run.returncode == EXIT_STORE_UNAVAILABLE, run.stderr
    assert run.stdout == ""
    lines = run.stderr.splitlines()
    assert len(lines) == 1, run.stderr  # stderr is not a terminal: no retry notes
    assert lines[0].startswith("evstore: ")
    assert "no answer within the 1 s read timeout after 2 attempts" in lines[0]
    assert silent.connections == 4  # append opens the session: its manifest GET and listing, 2 attempts each


@pytest.mark.slow
def test_the_command_notes_each_retry_when_stderr_is_a_terminal(silent: SilentServer) -> None:
    leader, follower = pty.openpty()
    try:
        run = run_cli(
            [
                *("--read-timeout", "0.5", "--max-attempts", "3"),
                *("--store", "s3://silent-bucket/root", "--endpoint-url", silent.url, "list"),  # one request
            ],
            cli_env(),
            stdout=subprocess.PIPE,
            stderr=follower,
        )
        os.close(follower)
        follower = -1
        output = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # EIO: the terminal's other end is closed and drained
                break
            if not chunk:
                break
            output += chunk
    finally:
        if follower != -1:
            os.close(follower)
        os.close(leader)
    lines = output.decode().splitlines()
    assert run.returncode == EXIT_STORE_UNAVAILABLE
    notes = [line for line in lines if "retrying" in line]
    assert len(notes) == 2, lines  # before attempts 2 and 3
    assert re.search(r"no answer within the 0\.5 s read timeout; retrying in [0-9.]+ s \(attempt 2 of 3\)", notes[0])
    assert "after 3 attempts" in lines[-1]
    assert silent.connections == 3


# ---- evstore's retries against botocore's quota ---------------------------------------------------------


class LoseFirstAnswers:
    """A botocore hook: the first attempt of every event PUT reaches the server (the object is
    stored) and its answer is lost, as after a connection reset; every retry goes through."""

    def __init__(self) -> None:
        self.http = URLLib3Session()
        self.lost: set[str] = set()

    def __call__(self, request: AWSPreparedRequest, **kwargs: Any) -> None:
        if request.method != "PUT" or not re.search(r"/sessions/[^/]+/\d{20}$", request.url.split("?")[0]):
            return None
        if request.url in self.lost:
            return None
        self.lost.add(request.url)
        self.http.send(request)  # the server stores it ...
        raise botocore.exceptions.ConnectionClosedError(endpoint_url=request.url)  # ... and the answer is lost


@pytest.mark.slow
def test_appends_stay_exactly_once_when_sustained_faults_would_drain_botocores_retry_quota(moto_endpoint: str) -> None:
    bucket = f"evs-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=moto_endpoint).create_bucket(Bucket=bucket)
    backend = S3Store(bucket, endpoint_url=moto_endpoint, retry_backoff=0.001, read_timeout=10, direct_requests=False)
    hook = LoseFirstAnswers()
    backend.client.meta.events.register_first("before-send.s3.PutObject", hook)
    store = Store(backend, root="root")
    writer = store.open("busy", create=True)
    # botocore's standard mode spends 14 of its 500 quota units per retry and gets them back only when the
    # retry succeeds; each retry here is answered 412 (the object is there), so it would stop near the 39th append
    appends = 45
    seqs = [writer.append({"role": "user", "content": f"m{i}"}) for i in range(appends)]
    assert seqs == list(range(1, appends + 1))
    assert len(hook.lost) == appends
    assert backend.retries["error"] == appends
    clean = Store(S3Store(bucket, endpoint_url=moto_endpoint), root="root")
    contents = [m["content"] for event in clean.replay("busy") for m in event.messages]
    assert contents == [f"m{i}" for i in range(appends)]
    clean.verify("busy")


def test_a_refusal_is_not_retried(moto_endpoint: str) -> None:
    backend = S3Store(f"missing-{uuid.uuid4().hex[:12]}", endpoint_url=moto_endpoint)
    with pytest.raises(StoreUnavailableError, match="does not exist"):
        backend.get("root/sessions/x/manifest")
    assert sum(backend.requests.values()) == 1
    assert not backend.retries


@pytest.mark.parametrize(
    "raw",
    [
        urllib3.exceptions.ReadTimeoutError(None, "/", "Read timed out."),  # type: ignore[arg-type]
        urllib3.exceptions.ProtocolError("Connection broken: IncompleteRead"),
    ],
)
def test_urllib3s_own_errors_out_of_botocore_are_retried_and_reported_as_botocores(
    moto_endpoint: str, monkeypatch: pytest.MonkeyPatch, raw: Exception
) -> None:
    """botocore reads an error answer's body outside its mapping of urllib3's errors, so a slow or
    cut-off body there comes out raw (seen in the stress suite): retried as any transport failure,
    and when it lasts, the store's one-line StoreUnavailableError, never urllib3's exception."""
    bucket = f"evs-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=moto_endpoint).create_bucket(Bucket=bucket)
    backend = S3Store(bucket, endpoint_url=moto_endpoint, retry_backoff=0.001, max_attempts=3, direct_requests=False)
    backend.create("k", b"v")
    real = backend.client.get_object
    failures = [raw]

    def flaky(**kwargs: Any) -> Any:
        if failures:
            raise failures.pop()
        return real(**kwargs)

    monkeypatch.setattr(backend.client, "get_object", flaky)
    assert backend.get("k").data == b"v"
    assert backend.retries["error"] == 1

    def failing(**kwargs: Any) -> Any:
        raise raw

    monkeypatch.setattr(backend.client, "get_object", failing)
    with pytest.raises(StoreUnavailableError, match="after 3 attempts") as caught:
        backend.get("k")
    assert "\n" not in str(caught.value)
