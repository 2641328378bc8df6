"""Every stored format that evstore ever wrote stays readable: the fixtures under
``tests/fixtures/formats/<version>/`` were written once by the evstore of that version
(``tests/fixtures/formats/generate.py``) and are never rewritten. Today's code must read each
session in them to exactly what that version read: every event with its hash, the context view,
the receipt; deleted sessions stay deleted, and receipts issued before a rekey are reported as
superseded, not invalid. A change to key derivation, sealing, the envelope, the manifest, the
segment layout, rekey records, fork markers or tombstones that would strand sealed sessions
after an upgrade fails here."""

from __future__ import annotations

import base64
import itertools
import shutil
from pathlib import Path
from typing import Any

import msgspec
import pytest

from evstore import (
    IntegrityError,
    KeyRequiredError,
    Keyring,
    LocalStore,
    MemoryStore,
    ObjectStore,
    Receipt,
    SessionNotFoundError,
    Store,
    check_proof,
)

FIXTURES = Path(__file__).parent / "fixtures" / "formats"
VERSIONS = sorted(p.name for p in FIXTURES.iterdir() if (p / "expected.json").is_file())
KINDS = {  # every kind of stored object each version must hold, by the session that shows it
    "plaintext": "plaintext",
    "sealed": "sealed",
    "rekeyed from plaintext": "rekeyed-plaintext",
    "rekeyed to another key": "rekeyed-sealed",
    "forked": "grandchild",
    "compacted by hand": "compacted",
    "compacted as it was written": "auto-compacted",
    "tombstoned": "deleted",
    "a fork outliving its deleted parent": "orphan-fork",
}


def _expected(version: str) -> dict[str, Any]:
    result: dict[str, Any] = msgspec.json.decode((FIXTURES / version / "expected.json").read_bytes())
    return result


def _copy_of(version: str, tmp_path: Path) -> LocalStore:
    """The fixture's store, copied: reading may create the store's tmp/ beside it, never in the repository."""
    shutil.copytree(FIXTURES / version / "store", tmp_path / "store")
    return LocalStore(tmp_path / "store")


def _in_memory(local: LocalStore) -> MemoryStore:
    """The same objects, byte for byte with their metadata, in a memory store."""
    memory = MemoryStore()
    for info in local.list(""):
        stored = local.get(info.key)
        memory.create(info.key, stored.data, metadata=stored.metadata)
    return memory


def _store(version: str, backend: ObjectStore) -> Store:
    spec = _expected(version)
    keys = {kid: base64.b64decode(text) for kid, text in spec["keyring"]["keys"].items()}
    return Store(backend, root=spec["root"], keyring=Keyring(keys, spec["keyring"]["active"]))


@pytest.fixture(params=VERSIONS)
def version(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=["local", "memory"])
def fixture_store(request: pytest.FixtureRequest, version: str, tmp_path: Path) -> Store:
    local = _copy_of(version, tmp_path)
    return _store(version, local if request.param == "local" else _in_memory(local))


def test_there_is_a_fixture_of_the_current_format_version() -> None:
    from evstore._codec import FORMAT_VERSION

    assert f"v{FORMAT_VERSION}" in VERSIONS


def test_each_fixture_holds_every_kind_of_stored_object(version: str) -> None:
    sessions = _expected(version)["sessions"]
    assert set(KINDS.values()) <= set(sessions)
    objects = FIXTURES / version / "store" / "objects" / _expected(version)["root"] / "sessions"
    names = {str(p.relative_to(objects)) for p in objects.rglob("*") if p.is_file()}
    for sid, kind in [
        ("rekeyed-plaintext", "salt"),
        ("rekeyed-plaintext", "rekeys/"),
        ("compacted", "segments/"),
        ("auto-compacted", "young/"),
        ("auto-compacted", "segments/"),
        ("parent", "forks/"),
        ("deleted", "tombstone"),
    ]:
        assert any(name.startswith(f"{sid}/{kind}") for name in names), (sid, kind)


@pytest.mark.parametrize("session_id", sorted(set(KINDS.values()) | {"parent", "child", "sealed-fork", "deleted-parent"}))
def test_every_fixture_session_reads_as_it_was_written(fixture_store: Store, version: str, session_id: str) -> None:
    want = _expected(version)["sessions"][session_id]
    if want.get("not_found"):
        with pytest.raises(SessionNotFoundError, match="was deleted"):
            list(fixture_store.replay(session_id))
        return
    got = [msgspec.to_builtins(event) for event in fixture_store.replay(session_id)]
    # each event as the fixture recorded it (fields an Event gained since are checked apart)
    assert len(got) == len(want["events"])
    recorded = [{field: event.get(field) for field in expected} for event, expected in zip(got, want["events"], strict=True)]
    assert recorded == want["events"]
    assert all(after["prev"] == before["hash"] for before, after in itertools.pairwise(got))  # Event.prev: the chain
    assert fixture_store.context(session_id) == want["context"]
    result = fixture_store.verify(session_id, expect=Receipt.parse(want["receipt"]))
    assert str(result.receipt) == want["receipt"] and not result.superseded_by_rekey
    assert fixture_store.info(session_id).head == want["head"]


def test_sealed_fixture_sessions_are_sealed_and_open_only_with_their_keys(version: str, tmp_path: Path) -> None:
    """The sealed events hold no plaintext, need their key, and fail their tag under other bytes
    with the same key ids: the fixture's answers come from decryption, not from a plaintext copy."""
    local = _copy_of(version, tmp_path)
    root = _expected(version)["root"]
    assert b"what is 6 x 7?" not in (tmp_path / "store" / "objects" / root / "sessions" / "sealed" / f"{2:020d}").read_bytes()
    keyless = Store(local, root=root)
    impostor = Store(local, root=root, keyring=Keyring({"k1": bytes(32), "k2": bytes(32)}, "k2"))
    for session_id in ("sealed", "rekeyed-plaintext", "rekeyed-sealed", "sealed-fork"):
        with pytest.raises(KeyRequiredError):
            list(keyless.replay(session_id))
        with pytest.raises(IntegrityError):
            list(impostor.replay(session_id))


def test_receipts_issued_before_a_rekey_are_reported_superseded(fixture_store: Store, version: str) -> None:
    for session_id, receipt in _expected(version)["receipts_before_rekey"].items():
        result = fixture_store.verify(session_id, expect=Receipt.parse(receipt))
        assert result.superseded_by_rekey, session_id
        assert str(result.receipt) == _expected(version)["sessions"][session_id]["receipt"]


def test_sessions_written_before_checkpoint_objects_prove_from_their_events(fixture_store: Store, version: str) -> None:
    """No ``ztree/`` object in a fixture: Merkle checks and proofs read the events."""
    for session_id in ("auto-compacted", "grandchild"):
        events = len(list(fixture_store.replay(session_id)))
        head = fixture_store.tree_head(session_id, size=events // 2)
        check = fixture_store.verify_tree(session_id, head)
        assert not check.stored and check.tree_head == fixture_store.tree_head(session_id)
        assert check_proof(fixture_store.prove(session_id, 1, checkpoint=True), check.tree_head)
