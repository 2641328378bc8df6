"""Per-session encryption, rotation, rekey, shredding and tamper evidence."""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evstore import (
    IntegrityError,
    InvalidInputError,
    KeyRequiredError,
    Keyring,
    MemoryStore,
    Receipt,
    Session,
    SessionExpiredError,
    SessionNotFoundError,
    Store,
    generate_key,
)
from evstore._codec import Envelope, b64decode, header_aad
from evstore._crypto import add_key_to_file, derive_session_key, open_sealed

from .helpers import msg

SECRETS = ["the launch code is 0000", "meet me at the old mill", "résumé naïve façade ✓"]


def keyring(kid: str = "k1") -> Keyring:
    return Keyring.from_key(generate_key(), kid)


def encrypted_store(backend: MemoryStore | None = None, ring: Keyring | None = None) -> Store:
    return Store(backend or MemoryStore(), root="root", keyring=ring or keyring())


def raw_objects(store: Store) -> dict[str, bytes]:
    return {o.key: store.backend.get(o.key).data for o in store.backend.list("")}


def test_no_object_holds_any_plaintext_of_any_message() -> None:
    store = encrypted_store()
    writer = store.open("s", create=True)
    for secret in SECRETS:
        writer.append(msg(secret, meta={"note": secret}))
    store.fork("s", "f", at=2).append(msg("forked " + SECRETS[0]))
    blobs = b"".join(raw_objects(store).values())
    for secret in [*SECRETS, "launch", "mill"]:
        assert secret.encode() not in blobs
        assert json.dumps(secret).encode()[1:-1] not in blobs
    assert [e.messages[0]["content"] for e in store.replay("s")] == SECRETS


def test_headers_stay_readable_without_a_key() -> None:
    store = encrypted_store()
    store.open("s", create=True).append(msg("x"))
    header = msgspec.json.decode(store.backend.get(store.layout.event_key("s", 1)).data)
    assert (header["sid"], header["seq"], header["kid"]) == ("s", 1, "k1")
    assert "body" not in header and header["sealed"]
    manifest = msgspec.json.decode(store.backend.get(store.layout.manifest_key("s")).data)
    assert manifest["kid"] == "k1" and len(base64.b64decode(manifest["salt"])) == 32


def test_the_same_message_in_two_sessions_gives_unrelated_ciphertexts() -> None:
    store = encrypted_store()
    for sid in ("a", "b"):
        store.open(sid, create=True).append(msg("identical"))
    sealed = [msgspec.json.decode(store.backend.get(store.layout.event_key(s, 1)).data)["sealed"] for s in ("a", "b")]
    assert sealed[0] != sealed[1]
    assert base64.b64decode(sealed[0])[12:] != base64.b64decode(sealed[1])[12:]


def test_reading_an_encrypted_session_without_a_key_says_a_key_is_needed() -> None:
    store = encrypted_store()
    store.open("s", create=True).append(msg("x"))
    keyless = Store(store.backend, root="root")
    with pytest.raises(KeyRequiredError, match="key id 'k1'"):
        list(keyless.replay("s"))


def test_the_wrong_key_is_an_integrity_error_naming_the_seq() -> None:
    store = encrypted_store()
    store.open("s", create=True).append(msg("x"))
    wrong = Store(store.backend, root="root", keyring=keyring("k1"))
    with pytest.raises(IntegrityError) as caught:
        list(wrong.replay("s"))
    assert caught.value.seq == 1


def test_a_writer_with_the_wrong_key_under_the_right_id_is_refused_before_it_seals_anything() -> None:
    store = encrypted_store()
    store.open("s", create=True).append(msg("x"))
    wrong = Store(store.backend, root="root", keyring=keyring("k1"))
    with pytest.raises(IntegrityError):
        wrong.open("s").append(msg("sealed under the wrong key"))
    assert [m["content"] for m in store.context("s")] == ["x"]


def test_plaintext_sessions_stay_readable_with_a_key_configured() -> None:
    backend = MemoryStore()
    Store(backend, root="root").open("plain", create=True).append(msg("open text"))
    store = encrypted_store(backend)
    assert next(store.replay("plain")).messages[0]["content"] == "open text"
    store.open("plain").append(msg("still plaintext until rekeyed"))
    assert b"still plaintext" in raw_objects(store)[store.layout.event_key("plain", 2)]


def test_required_encryption_refuses_plaintext_sessions() -> None:
    backend = MemoryStore()
    Store(backend, root="root").open("plain", create=True).append(msg("x"))
    strict = Store(backend, root="root", require_encryption=True)
    with pytest.raises(InvalidInputError, match="no key is configured"):
        strict.create("new")
    strict_with_key = Store(backend, root="root", keyring=keyring(), require_encryption=True)
    with pytest.raises(InvalidInputError, match="plaintext and encryption is required"):
        strict_with_key.open("plain").append(msg("y"))
    strict_with_key.create("sealed").append(msg("ok"))


def _copy_event(store: Store, src: tuple[str, int], dst: tuple[str, int]) -> None:
    data = store.backend.get(store.layout.event_key(*src)).data
    store.backend.delete_many([store.layout.event_key(*dst)])
    store.backend.create(store.layout.event_key(*dst), data)


def _rewrite_header(store: Store, at: tuple[str, int], **changes: object) -> None:
    key = store.layout.event_key(*at)
    envelope = msgspec.json.decode(store.backend.get(key).data)
    envelope.update(changes)
    store.backend.delete_many([key])
    store.backend.create(key, msgspec.json.encode(envelope))


def _two_sessions() -> Store:
    store = encrypted_store()
    for sid in ("a", "b"):
        writer = store.open(sid, create=True)
        for i in range(3):
            writer.append(msg(f"{sid}{i}"))
    return store


def test_an_event_copied_to_another_session_fails_naming_the_seq() -> None:
    store = _two_sessions()
    _copy_event(store, ("a", 2), ("b", 2))
    with pytest.raises(IntegrityError) as caught:
        list(store.replay("b"))
    assert caught.value.seq == 2


def test_an_event_relabelled_for_another_session_fails_its_tag() -> None:
    store = _two_sessions()
    key = store.layout.event_key("a", 2)
    envelope = msgspec.json.decode(store.backend.get(key).data)
    b_uid = msgspec.json.decode(store.backend.get(store.layout.manifest_key("b")).data)["uid"]
    envelope.update(sid="b", uid=b_uid)
    store.backend.delete_many([store.layout.event_key("b", 2)])
    store.backend.create(store.layout.event_key("b", 2), msgspec.json.encode(envelope))
    with pytest.raises(IntegrityError, match="seq 2") as caught:
        list(store.replay("b"))
    assert caught.value.seq == 2


def test_an_event_moved_to_another_seq_fails() -> None:
    store = _two_sessions()
    _copy_event(store, ("a", 1), ("a", 3))
    with pytest.raises(IntegrityError) as caught:
        list(store.replay("a"))
    assert caught.value.seq == 3
    _rewrite_header(store, ("a", 3), seq=3)  # relabel the moved event's seq: now the tag fails
    with pytest.raises(IntegrityError) as caught:
        list(store.replay("a"))
    assert caught.value.seq == 3


def test_two_swapped_events_fail() -> None:
    store = _two_sessions()
    one = store.backend.get(store.layout.event_key("a", 1)).data
    two = store.backend.get(store.layout.event_key("a", 2)).data
    store.backend.delete_many([store.layout.event_key("a", 1), store.layout.event_key("a", 2)])
    store.backend.create(store.layout.event_key("a", 1), two)
    store.backend.create(store.layout.event_key("a", 2), one)
    with pytest.raises(IntegrityError) as caught:
        list(store.replay("a"))
    assert caught.value.seq == 1


_FLIP_STORE = _two_sessions()
_FLIP_OBJECTS = sorted(raw_objects(_FLIP_STORE).items())


@pytest.mark.slow
@settings(
    max_examples=int(os.environ.get("EVSTORE_FLIP_EXAMPLES", "300")), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(st.data())
def test_flipping_any_bit_of_any_object_is_an_integrity_error_never_different_data(data: st.DataObject) -> None:
    key, original = data.draw(st.sampled_from(_FLIP_OBJECTS))
    bit = data.draw(st.integers(0, len(original) * 8 - 1))
    flipped = bytearray(original)
    flipped[bit // 8] ^= 1 << (bit % 8)
    backend = MemoryStore()
    for k, v in _FLIP_OBJECTS:
        backend.create(k, bytes(flipped) if k == key else v)
    store = Store(backend, root="root", keyring=_FLIP_STORE.keyring)
    session = key.split("/")[2]
    with pytest.raises((IntegrityError, SessionExpiredError, SessionNotFoundError)):
        # a flipped manifest name could make the session look absent or expired: never readable data
        store.verify(session)


def test_rotation_keeps_old_sessions_on_their_key_until_rekeyed(tmp_path: Path) -> None:
    ring_file = tmp_path / "keyring.json"
    add_key_to_file(ring_file, "k1")
    backend = MemoryStore()
    old = Store(backend, root="root", keyring=Keyring.from_file(ring_file))
    old.open("s1", create=True).append(msg("under k1"))
    add_key_to_file(ring_file, "k2")
    store = Store(backend, root="root", keyring=Keyring.from_file(ring_file))
    assert store.keyring.active == "k2"
    store.open("s2", create=True).append(msg("under k2"))
    store.open("s1").append(msg("still k1"))
    assert [e.key_id for e in store.replay("s1")] == ["k1", "k1"]
    assert [e.key_id for e in store.replay("s2")] == ["k2"]
    result = store.rekey("s1")
    assert (result.key_id, result.resealed) == ("k2", 2)
    only_k2 = Store(backend, root="root", keyring=Keyring({"k2": store.keyring.keys["k2"]}, "k2"))
    assert [e.messages[0]["content"] for e in only_k2.replay("s1")] == ["under k1", "still k1"]
    assert [e.key_id for e in only_k2.replay("s1")] == ["k2", "k2"]
    assert only_k2.open("s1").append(msg("after rekey")) == 3
    assert next(only_k2.replay("s1", start=3)).key_id == "k2"


def _session_under_a(events: int) -> tuple[MemoryStore, Store, Session, Store]:
    """A session sealed under key "a", its writer, and a store whose keyring adds "b" as active."""
    backend = MemoryStore()
    ring_a, ring_b = keyring("a"), keyring("b")
    store = Store(backend, root="root", keyring=ring_a)
    writer = store.open("s", create=True)
    for i in range(events):
        writer.append(msg(f"m{i}"))
    return backend, store, writer, Store(backend, root="root", keyring=Keyring({**ring_a.keys, **ring_b.keys}, "b"))


def test_rekey_keeps_seqs_messages_and_write_ids_and_a_prior_receipt_is_superseded_not_invalid() -> None:
    _, store, _, both = _session_under_a(5)
    before = list(store.replay("s"))
    receipt = store.verify("s").receipt
    both.rekey("s")
    after = list(both.replay("s"))
    assert [(e.seq, e.ts, e.write_id, e.messages) for e in after] == [(e.seq, e.ts, e.write_id, e.messages) for e in before]
    assert {e.key_id for e in after} == {"b"}
    result = both.verify("s", expect=receipt)
    assert result.superseded_by_rekey and result.receipt.seq == 5 and result.receipt.hash != receipt.hash
    assert both.verify("s", expect=result.receipt).superseded_by_rekey is False


def test_rekey_migrates_a_plaintext_session_to_encrypted() -> None:
    backend = MemoryStore()
    plain = Store(backend, root="root")
    writer = plain.open("s", create=True)
    for secret in SECRETS:
        writer.append(msg(secret))
    store = encrypted_store(backend)
    assert store.rekey("s").resealed == 3
    blobs = b"".join(v for k, v in raw_objects(store).items() if "/rekeys/" not in k)
    assert not any(secret.encode() in blobs for secret in SECRETS)
    assert [e.messages[0]["content"] for e in store.replay("s")] == SECRETS
    assert store.verify("s").sealed_checked == 3
    store.open("s").append(msg("sealed from now on"))
    assert next(store.replay("s", start=4)).key_id == "k1"


def test_rekey_never_loses_an_append_made_concurrently() -> None:
    backend, _, writer, both = _session_under_a(4)
    real_replace = backend.replace
    appended: list[int] = []

    def replace_while_appending(key: str, data: bytes, **kwargs: object) -> str:
        if len(appended) < 2:
            appended.append(writer.append(msg(f"concurrent{len(appended)}")))  # the stale writer chains to old hashes
        return real_replace(key, data, **kwargs)  # type: ignore[arg-type]

    backend.replace = replace_while_appending  # type: ignore[method-assign]
    both.rekey("s")
    backend.replace = real_replace  # type: ignore[method-assign]
    writer.append(msg("after"))  # still chained to a hash from before the rekey
    contents = [e.messages[0]["content"] for e in both.replay("s")]
    assert contents == ["m0", "m1", "m2", "m3", "concurrent0", "concurrent1", "after"]
    assert both.verify("s").events == 7


def test_shred_destroys_the_salt_so_a_surviving_copy_cannot_be_opened() -> None:
    store = encrypted_store()
    writer = store.open("s", create=True)
    writer.append(msg(SECRETS[0]))
    writer.append(msg(SECRETS[1]))
    copies = {k: v for k, v in raw_objects(store).items() if "/sessions/s/0" in k}
    salt = msgspec.json.decode(store.backend.get(store.layout.manifest_key("s")).data)["salt"]
    result = store.shred("s")
    assert result.salt_destroyed and result.objects_removed == 2 and result.fenced_at == 3
    left = raw_objects(store)  # until gc: the fence in every seq slot, the tombstone, the manifest without its salt
    fence, manifest, tombstone = (f"root/sessions/s/{name}" for name in ("00000000000000000003", "manifest", "tombstone"))
    assert sorted(left) == [*sorted(copies), fence, manifest, tombstone]
    assert {left[key] for key in copies} == {left[tombstone]}
    assert not any(secret.encode() in data for secret in SECRETS for data in left.values())
    for key, data in copies.items():  # a backup restores the event objects, not the salt
        store.backend.replace(key, data, etag=store.backend.head(key).etag)
    assert salt.encode() not in b"".join(raw_objects(store).values())
    with pytest.raises(SessionNotFoundError, match="was deleted"):
        list(store.replay("s"))
    # the salt is what the copy lacks: with it the master key opens the copy, without it nothing does
    first = msgspec.json.decode(copies[min(copies)], type=Envelope)
    sealed = b64decode(first.sealed or "")
    master = store.keyring.get(first.kid or "")
    assert master is not None
    assert open_sealed(derive_session_key(master, b64decode(salt), "s"), sealed, header_aad(first)) is not None
    for guess in (b"", bytes(32), hashlib.sha256(master).digest()):
        assert open_sealed(derive_session_key(master, guess, "s"), sealed, header_aad(first)) is None


def test_shred_refuses_while_forks_read_the_session_unless_told() -> None:
    store = encrypted_store()
    store.open("s", create=True).append(msg("x"))
    store.fork("s", "f")
    with pytest.raises(InvalidInputError, match="live forks"):
        store.shred("s")
    result = store.shred("s", include_forks=True)
    assert result.shredded_forks == ["f"]
    for session_id in ("s", "f"):
        with pytest.raises(SessionNotFoundError, match="was deleted"):
            list(store.replay(session_id))
    assert not any(b'"content":"x"' in data for data in raw_objects(store).values())


def _chain(store: Store, n: int = 5) -> Receipt:
    writer = store.open("s", create=True)
    for i in range(n):
        writer.append(msg(f"m{i}"))
    return store.verify("s").receipt


def test_verify_prints_a_receipt_that_a_longer_log_still_extends() -> None:
    store = encrypted_store()
    receipt = _chain(store)
    store.open("s").append(msg("more"))
    result = store.verify("s", expect=receipt)
    assert result.receipt.seq == 6 and result.sealed_checked == 6


def test_verify_detects_a_deleted_middle_event() -> None:
    store = encrypted_store()
    _chain(store)
    store.backend.delete_many([store.layout.event_key("s", 3)])
    with pytest.raises(IntegrityError, match="seq 3"):
        store.verify("s")


def test_verify_detects_a_tail_truncated_below_a_receipt() -> None:
    store = encrypted_store()
    receipt = _chain(store)
    store.backend.delete_many([store.layout.event_key("s", 5), store.layout.event_key("s", 4)])
    assert store.verify("s").receipt.seq == 3  # the chain alone cannot tell
    with pytest.raises(IntegrityError, match="truncated"):
        store.verify("s", expect=receipt)


def test_verify_detects_a_rewritten_history_against_a_receipt() -> None:
    store = Store(MemoryStore(), root="root")
    receipt = _chain(store)
    for seq in range(1, 6):
        store.backend.delete_many([store.layout.event_key("s", seq)])
    store.backend.delete_many([store.layout.manifest_key("s")])
    _chain(store)  # a new history under the same id
    with pytest.raises(IntegrityError, match="history rewritten"):
        store.verify("s", expect=receipt)


def test_verify_rejects_an_event_forged_by_someone_without_the_key() -> None:
    store = encrypted_store()
    _chain(store)
    forger = Store(store.backend, root="root")  # bucket access, no key
    head = store.open("s")
    manifest = head.manifest
    forged = {
        "v": 1,
        "sid": "s",
        "uid": manifest.uid,
        "seq": 6,
        "ts": "2026-01-01T00:00:00.000000Z",
        "wid": "f",
        "prev": head.head_hash,
        "body": {"type": "messages", "messages": [msg("forged")]},
    }
    forger.backend.create(store.layout.event_key("s", 6), msgspec.json.encode(forged))
    with pytest.raises(IntegrityError, match="plaintext event in an encrypted session") as caught:
        store.verify("s")
    assert caught.value.seq == 6
    forged.update(kid="k1", sealed=base64.b64encode(b"\0" * 60).decode())
    del forged["body"]
    forger.backend.delete_many([store.layout.event_key("s", 6)])
    forger.backend.create(store.layout.event_key("s", 6), msgspec.json.encode(forged))
    with pytest.raises(IntegrityError, match="authentication failed"):
        store.verify("s")


def test_verify_without_a_key_checks_the_chain_and_says_what_it_could_not_open() -> None:
    store = encrypted_store()
    _chain(store)
    result = Store(store.backend, root="root").verify("s")
    assert (result.events, result.sealed_checked, result.sealed_unchecked) == (5, 0, 5)


def test_no_key_material_or_plaintext_in_logs_or_errors(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    ring = keyring()
    secret_key = base64.b64encode(ring.keys["k1"]).decode()
    store = encrypted_store(ring=ring)
    store.open("s", create=True).append(msg(SECRETS[0]))
    errors: list[str] = [repr(ring), repr(store)]
    wrong = Store(store.backend, root="root", keyring=keyring())
    for failing in (
        lambda: list(wrong.replay("s")),
        lambda: list(Store(store.backend, root="root").replay("s")),
        lambda: Keyring.from_key("not-base64!"),
        lambda: store.open("s").append(msg("x" * 6_000_000)),
    ):
        with pytest.raises(Exception) as caught:
            failing()
        errors.append(str(caught.value))
    text = caplog.text + "\n".join(errors)
    assert secret_key not in text and secret_key[:16] not in text
    assert SECRETS[0] not in text and "x" * 100 not in text


def test_a_last_event_relabelled_with_an_unknown_key_id_fails_verify_even_unopened() -> None:
    store = encrypted_store()
    _chain(store, 2)
    _rewrite_header(store, ("s", 2), kid="j1")  # nothing follows it: only the key id check can catch it
    with pytest.raises(IntegrityError, match="never used") as caught:
        store.verify("s")
    assert caught.value.seq == 2


def test_a_sealed_body_altered_in_base64_padding_bits_is_refused() -> None:
    store = encrypted_store()
    _chain(store, 1)
    sealed = msgspec.json.decode(store.backend.get(store.layout.event_key("s", 1)).data)["sealed"]
    body, padding = sealed.rstrip("="), sealed[len(sealed.rstrip("=")) :]
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    twin = body[:-1] + alphabet[alphabet.index(body[-1]) ^ 1] + padding  # same bytes when decoded
    assert padding and base64.b64decode(twin) == base64.b64decode(sealed)
    _rewrite_header(store, ("s", 1), sealed=twin)
    with pytest.raises(IntegrityError, match="canonical base64"):
        store.verify("s")
