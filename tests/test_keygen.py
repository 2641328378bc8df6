"""keygen under concurrency and in hostile directories; the Keyring never shows its keys.

Concurrent runs are real ``evstore keygen`` processes started together on one keyring
file: every key a run reports "added" must be in the file afterwards, and the file must
parse. A planted ``<file>.tmp`` (a file or a symlink) must receive nothing.
"""

from __future__ import annotations

import base64
import copy
import os
import pickle
import stat
import subprocess
import sys
import threading
from pathlib import Path

import msgspec
import pytest

from evstore import InvalidInputError, Keyring
from evstore._crypto import KEY_BYTES, add_key_to_file

EVSTORE = [sys.executable, "-m", "evstore_cli"]
RUNS = 6


def keygen_processes(ring: Path, count: int) -> list[subprocess.CompletedProcess[str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVSTORE_")}
    processes = [
        subprocess.Popen(
            [*EVSTORE, "keygen", "--keyring", str(ring)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(count)
    ]
    results = []
    for process in processes:
        out, err = process.communicate(timeout=120)
        results.append(subprocess.CompletedProcess(process.args, process.returncode, out, err))
    return results


def added_ids(results: list[subprocess.CompletedProcess[str]]) -> list[str]:
    ids = []
    for result in results:
        assert result.returncode == 0, result.stderr
        assert result.stderr == ""
        words = result.stdout.split()
        assert words[:2] == ["added", "key"], result.stdout
        ids.append(words[2])
    return ids


@pytest.mark.slow
def test_concurrent_keygen_processes_lose_no_key(tmp_path: Path) -> None:
    ring = tmp_path / "keyring.json"
    reported: list[str] = []
    for _ in range(2):  # the second round also races on an existing file
        reported += added_ids(keygen_processes(ring, RUNS))
    loaded = Keyring.from_file(ring)
    assert len(set(reported)) == 2 * RUNS
    assert set(loaded.keys) == set(reported)
    assert loaded.active in reported
    assert stat.S_IMODE(ring.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keyring.json", "keyring.json.lock"]


def test_concurrent_threads_lose_no_key(tmp_path: Path) -> None:
    ring = tmp_path / "ring.json"
    ids: list[str] = []
    errors: list[BaseException] = []

    def add(n: int) -> None:
        try:
            ids.append(add_key_to_file(ring, f"t{n}"))
        except BaseException as exc:  # collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=add, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == []
    assert set(Keyring.from_file(ring).keys) == {f"t{n}" for n in range(8)}


def test_a_planted_tmp_file_receives_no_key(tmp_path: Path) -> None:
    ring = tmp_path / "ring.json"
    planted = tmp_path / "ring.json.tmp"
    planted.write_bytes(b"planted by someone else")
    planted.chmod(0o666)
    kid = add_key_to_file(ring)
    assert planted.read_bytes() == b"planted by someone else"
    assert list(Keyring.from_file(ring).keys) == [kid]


def test_a_planted_tmp_symlink_receives_no_key(tmp_path: Path) -> None:
    ring = tmp_path / "ring.json"
    stolen = tmp_path / "elsewhere" / "stolen"
    stolen.parent.mkdir()
    (tmp_path / "ring.json.tmp").symlink_to(stolen)
    add_key_to_file(ring)
    assert not stolen.exists()
    assert os.listdir(stolen.parent) == []


def test_a_planted_lock_symlink_is_refused(tmp_path: Path) -> None:
    ring = tmp_path / "ring.json"
    target = tmp_path / "target"
    (tmp_path / "ring.json.lock").symlink_to(target)
    with pytest.raises(InvalidInputError, match="cannot lock keyring"):
        add_key_to_file(ring)
    assert not target.exists() and not ring.exists()


def test_a_failed_add_leaves_the_keyring_and_no_temp_file(tmp_path: Path) -> None:
    ring = tmp_path / "ring.json"
    add_key_to_file(ring, "k1")
    before = ring.read_bytes()
    with pytest.raises(InvalidInputError, match="already in the keyring"):
        add_key_to_file(ring, "k1")
    assert ring.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ring.json", "ring.json.lock"]


def test_a_keyring_that_is_a_fifo_or_device_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    outcome: list[BaseException] = []

    def read() -> None:
        try:
            Keyring.from_file(fifo)
        except BaseException as exc:  # handed to the test
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(60)
    assert not reader.is_alive(), "reading a FIFO keyring hung"
    assert isinstance(outcome[0], InvalidInputError) and "not a regular file" in str(outcome[0])
    with pytest.raises(InvalidInputError, match="not a regular file"):
        Keyring.from_file("/dev/zero")


def test_an_oversized_keyring_is_refused(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    with open(big, "wb") as handle:
        handle.truncate(1 << 30)
    with pytest.raises(InvalidInputError, match="larger than"):
        Keyring.from_file(big)


# ---- the Keyring never shows key bytes ---------------------------------------------------


@pytest.fixture
def ring() -> Keyring:
    return Keyring({"k1": bytes(range(KEY_BYTES)), "k2": b"\xfe" * KEY_BYTES}, "k2")


def forms_of_keys(ring: Keyring) -> list[str]:
    """Every way a key's bytes could show up in text."""
    forms = []
    for key in ring.keys.values():
        forms += [repr(key), key.hex(), base64.b64encode(key).decode(), base64.urlsafe_b64encode(key).decode(), str(list(key))]
        forms.append(base64.b64encode(key).decode().rstrip("="))
    return forms


def assert_no_key_in(text: str, ring: Keyring) -> None:
    for form in forms_of_keys(ring):
        assert form not in text


def test_repr_and_str_name_key_ids_only(ring: Keyring) -> None:
    for text in (repr(ring), str(ring), f"{ring}", f"{ring!r}", repr([ring]), repr({"ring": ring})):
        assert_no_key_in(text, ring)
        assert "k1" in text and "k2" in text


def test_msgspec_cannot_encode_a_keyring(ring: Keyring) -> None:
    with pytest.raises(TypeError):
        msgspec.to_builtins(ring)
    with pytest.raises(TypeError):
        msgspec.json.encode(ring)
    with pytest.raises(TypeError):
        msgspec.to_builtins({"nested": [ring]})


def test_rich_repr_names_key_ids_only(ring: Keyring) -> None:
    from rich.console import Console
    from rich.pretty import pretty_repr

    assert_no_key_in(pretty_repr(ring), ring)
    assert_no_key_in(pretty_repr({"ring": ring}, max_width=20), ring)
    console = Console(record=True, width=200, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(ring)
    console.print({"ring": ring, "keys": "elsewhere"})
    shown = console.export_text()
    assert_no_key_in(shown, ring)
    assert "k1" in shown and "key_ids" in shown
    assert dict(ring.__rich_repr__()) == {"active": "k2", "key_ids": ["k1", "k2"]}


def test_a_keyring_is_immutable_comparable_and_copyable(ring: Keyring) -> None:
    with pytest.raises(AttributeError):
        ring.active = "k1"  # type: ignore[misc]
    with pytest.raises(TypeError):
        ring.keys["k3"] = b"\0" * KEY_BYTES  # type: ignore[index]
    assert copy.deepcopy(ring) == ring
    assert pickle.loads(pickle.dumps(ring)) == ring
    assert ring != Keyring(dict(ring.keys), "k1")
    assert ring.get("k1") == bytes(range(KEY_BYTES)) and ring.get("nope") is None
    assert not Keyring().keys and Keyring().active is None
    with pytest.raises(InvalidInputError):
        Keyring({"k1": b"short"}, "k1")
    with pytest.raises(InvalidInputError):
        Keyring({"k1": bytes(KEY_BYTES)}, "missing")
