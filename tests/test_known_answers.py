"""Known answers: the bytes evstore's stored format is made of, pinned by fixed vectors.

Key derivation, sealing and its associated data, the envelope and manifest encodings, the hash
chain and receipts are the stored format: a change to any of them that no test notices makes
every session written before it unreadable after an upgrade, or every receipt an auditor holds
invalid. Each vector here was computed once and is written out in full; where an independent
computation exists (HKDF by RFC 5869 with the standard library's HMAC) the test makes it too.
"""

from __future__ import annotations

import hashlib
import hmac

import msgspec
import pytest

from evstore import IntegrityError, Keyring, MemoryStore, Receipt, Store
from evstore._codec import Envelope, Manifest, MessagesBody, b64encode, encode_json, encode_manifest, header_aad, sha256_hex
from evstore._crypto import SESSION_KEY_INFO, derive_session_key, open_sealed, session_key_bytes

MASTER = bytes(range(32))
SALT = bytes(range(32, 64))
SID = "kat-session"
UID = "0123456789abcdef0123456789abcdef"

SESSION_KEY = "61b9cfaf14e1ecb920d33659717e2d3c7bfbf10897c970af4cdd53f911ec8e06"

SEALED_MANIFEST = (
    b'{"v":1,"sid":"kat-session","uid":"0123456789abcdef0123456789abcdef","created":"2026-01-02T03:04:05.000000Z",'
    b'"kid":"k1","salt":"ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8="}'
)
SEALED_GENESIS = "619691a7569cb1517a7cb7dc2c93333a429bb817b303f83cec07d75566499fc4"
FIRST_AAD = (
    b'[1,"kat-session","0123456789abcdef0123456789abcdef",1,"2026-01-02T03:04:06.000000Z",'
    b'"abababababababababababababababab","619691a7569cb1517a7cb7dc2c93333a429bb817b303f83cec07d75566499fc4","k1"]'
)
FIRST_PLAINTEXT = b'{"type":"messages","messages":[{"role":"user","content":"what is 6 x 7?"}]}'
FIRST_SEALED = bytes.fromhex(
    "000102030405060708090a0b6c012c3716a4a485c0b5018b58e946941e056fe4a7e993a0649755bb9fb11b77715d7a53"
    "a07cb1cc5c5137310167f26a50f93e3eb91c6c85dacb1add3034c99b9de1c64add7638767ad3fbe93ea113fa9a024b0b"
    "cc72b5064dcee5"
)
FIRST_EVENT = (
    b'{"v":1,"sid":"kat-session","uid":"0123456789abcdef0123456789abcdef","seq":1,"ts":"2026-01-02T03:04:06.000000Z",'
    b'"wid":"abababababababababababababababab","prev":"619691a7569cb1517a7cb7dc2c93333a429bb817b303f83cec07d75566499fc4",'
    b'"kid":"k1","sealed":"AAECAwQFBgcICQoLbAEsNxakpIXAtQGLWOlGlB4Fb+Sn6ZOgZJdVu5+xG3dxXXpToHyxzFxRNzEBZ/JqUPk+PrkcbIXayxrdMDTJm5'
    b'3hxkrddjh2etP76T6hE/qaAksLzHK1Bk3O5Q=="}'
)
FIRST_HASH = "6a540da50c7d61d0a1204a603cbfc98ee7edcf9bad4ccbea83959839f83ac275"
SEALED_HEAD = "2:0b546668a7b202d5e727734f0d4c7f066f0b8d5721464444159b79a820cd7b68"

PLAIN_MANIFEST = b'{"v":1,"sid":"kat-plain","uid":"fedcba9876543210fedcba9876543210","created":"2026-01-02T03:04:05.000000Z"}'
PLAIN_EVENTS = [  # (bytes, their SHA-256): each names the hash of the one before; the first, the manifest's
    (
        b'{"v":1,"sid":"kat-plain","uid":"fedcba9876543210fedcba9876543210","seq":1,"ts":"2026-01-02T03:04:06.000000Z",'
        b'"wid":"cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd","prev":"cad1d1762a623b24fa782f6dd397dba3f1c3a47b0b3f20033a302129ab41e094",'
        b'"body":{"type":"messages","messages":[{"role":"user","content":"one"}]}}',
        "0737963f6d17555396a7529949d1e7474a6ec97805e57c680131367e63ce35a2",
    ),
    (
        b'{"v":1,"sid":"kat-plain","uid":"fedcba9876543210fedcba9876543210","seq":2,"ts":"2026-01-02T03:04:07.000000Z",'
        b'"wid":"cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd","prev":"0737963f6d17555396a7529949d1e7474a6ec97805e57c680131367e63ce35a2",'
        b'"body":{"type":"messages","messages":[{"role":"user","content":"two"}]}}',
        "302fe43d03e04a2fc016307df2de92adf37f870f89f72f4219f96409a8d2d006",
    ),
    (
        b'{"v":1,"sid":"kat-plain","uid":"fedcba9876543210fedcba9876543210","seq":3,"ts":"2026-01-02T03:04:08.000000Z",'
        b'"wid":"cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd","prev":"302fe43d03e04a2fc016307df2de92adf37f870f89f72f4219f96409a8d2d006",'
        b'"body":{"type":"messages","messages":[{"role":"user","content":"three"}]}}',
        "39224468530a9558ca4b7106106808a1a0893648ee491de2df9f92950142202f",
    ),
]
PLAIN_GENESIS = "cad1d1762a623b24fa782f6dd397dba3f1c3a47b0b3f20033a302129ab41e094"


def rfc5869_hkdf_sha256(ikm: bytes, salt: bytes, info: bytes, length: int) -> bytes:
    """HKDF-SHA256 by RFC 5869's definition, with the standard library's HMAC only."""
    prk = hmac.new(salt, ikm, hashlib.sha256).digest()
    okm, block = b"", b""
    for counter in range(1, -(-length // 32) + 1):
        block = hmac.new(prk, block + info + bytes([counter]), hashlib.sha256).digest()
        okm += block
    return okm[:length]


def test_the_reference_hkdf_meets_rfc_5869_test_case_1() -> None:
    okm = rfc5869_hkdf_sha256(b"\x0b" * 22, bytes(range(13)), bytes(range(0xF0, 0xFA)), 42)
    assert okm.hex() == "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865"


def test_session_key_derivation_is_hkdf_sha256_of_the_master_key_salt_and_session_id() -> None:
    """Protects every sealed session: the same master key, salt and id give the same key forever."""
    assert SESSION_KEY_INFO == b"evstore/v1/session/"
    assert session_key_bytes(MASTER, SALT, SID).hex() == SESSION_KEY
    assert rfc5869_hkdf_sha256(MASTER, SALT, b"evstore/v1/session/kat-session", 32).hex() == SESSION_KEY


@pytest.mark.parametrize(
    ("master", "salt", "sid"),
    [(bytes(32), SALT, SID), (MASTER, bytes(32), SID), (MASTER, SALT, "kat-sessioN")],
    ids=["master", "salt", "session id"],
)
def test_each_input_of_the_derivation_changes_the_key(master: bytes, salt: bytes, sid: str) -> None:
    """Protects crypto-shredding (the salt) and per-session keys (the id): none is ignored."""
    assert session_key_bytes(master, salt, sid) != session_key_bytes(MASTER, SALT, SID)


def test_the_manifest_encodes_to_its_known_bytes_and_genesis_hash() -> None:
    manifest = Manifest(1, SID, UID, "2026-01-02T03:04:05.000000Z", kid="k1", salt=b64encode(SALT))
    assert encode_manifest(manifest) == SEALED_MANIFEST
    assert sha256_hex(SEALED_MANIFEST) == SEALED_GENESIS


def _first_envelope() -> Envelope:
    return Envelope(1, SID, UID, 1, "2026-01-02T03:04:06.000000Z", "ab" * 16, SEALED_GENESIS, "k1")


def test_the_associated_data_binds_the_header_fields_in_their_known_order() -> None:
    assert header_aad(_first_envelope()) == FIRST_AAD


def test_a_known_sealed_body_opens_under_the_derived_key_with_its_header() -> None:
    """Protects sealed sessions: AES-256-GCM, the 12-byte nonce before ciphertext and tag, the header as AAD."""
    key = derive_session_key(MASTER, SALT, SID)
    assert open_sealed(key, FIRST_SEALED, FIRST_AAD) == FIRST_PLAINTEXT
    assert encode_json(MessagesBody([{"role": "user", "content": "what is 6 x 7?"}])) == FIRST_PLAINTEXT


@pytest.mark.parametrize("field", ["v", "sid", "uid", "seq", "ts", "wid", "prev", "kid"])
def test_a_sealed_body_moved_under_another_header_does_not_open(field: str) -> None:
    """Protects the log's order: an object moved to another session, seq or chain place fails its tag."""
    changed = {"v": 2, "sid": "other", "uid": "f" * 32, "seq": 2, "ts": "2026-01-02T03:04:07.000000Z", "wid": "cd" * 16}
    changed |= {"prev": "0" * 64, "kid": "k2"}
    moved = msgspec.structs.replace(_first_envelope(), **{field: changed[field]})
    assert open_sealed(derive_session_key(MASTER, SALT, SID), FIRST_SEALED, header_aad(moved)) is None


def test_the_sealed_event_encodes_to_its_known_bytes_and_hash() -> None:
    event = msgspec.structs.replace(_first_envelope(), sealed=b64encode(FIRST_SEALED))
    assert encode_json(event) == FIRST_EVENT
    assert sha256_hex(FIRST_EVENT) == FIRST_HASH


def _sealed_store() -> Store:
    """The known sealed session: its manifest, the known first event and a second sealed the same way."""
    backend = MemoryStore()
    backend.create("sessions/kat-session/manifest", SEALED_MANIFEST)
    backend.create(f"sessions/kat-session/{1:020d}", FIRST_EVENT)
    envelope = Envelope(1, SID, UID, 2, "2026-01-02T03:04:07.000000Z", "ab" * 16, FIRST_HASH, "k1")
    nonce = bytes(range(12, 24))
    plaintext = encode_json(MessagesBody([{"role": "assistant", "content": "42"}]))
    sealed = nonce + derive_session_key(MASTER, SALT, SID).encrypt(nonce, plaintext, header_aad(envelope))
    backend.create(f"sessions/kat-session/{2:020d}", encode_json(msgspec.structs.replace(envelope, sealed=b64encode(sealed))))
    return Store(backend, keyring=Keyring({"k1": MASTER}, "k1"))


def test_a_known_sealed_session_reads_and_verifies_to_its_known_receipt() -> None:
    store = _sealed_store()
    assert [m["content"] for m in store.context(SID)] == ["what is 6 x 7?", "42"]
    assert next(e.hash for e in store.replay(SID)) == FIRST_HASH
    assert str(store.verify(SID).receipt) == SEALED_HEAD


def _plain_store() -> MemoryStore:
    backend = MemoryStore()
    backend.create("sessions/kat-plain/manifest", PLAIN_MANIFEST)
    for seq, (data, _) in enumerate(PLAIN_EVENTS, 1):
        backend.create(f"sessions/kat-plain/{seq:020d}", data)
    return backend


def test_the_hash_chain_links_each_event_to_the_one_before_and_the_first_to_the_manifest() -> None:
    assert sha256_hex(PLAIN_MANIFEST) == PLAIN_GENESIS
    prev = PLAIN_GENESIS
    for data, digest in PLAIN_EVENTS:
        assert msgspec.json.decode(data)["prev"] == prev
        assert sha256_hex(data) == digest
        prev = digest
    store = Store(_plain_store())
    assert [(e.seq, e.hash) for e in store.replay("kat-plain")] == [(i, d) for i, (_, d) in enumerate(PLAIN_EVENTS, 1)]
    receipt = store.verify("kat-plain").receipt
    assert str(receipt) == f"3:{PLAIN_EVENTS[-1][1]}"
    assert Receipt.parse(str(receipt)) == receipt


def test_a_middle_event_replaced_by_a_well_formed_one_breaks_the_chain_on_replay() -> None:
    """Protects the audit view: a plaintext event rewritten in place (a valid envelope, the right
    ``prev``, other words) is caught at the next event, whose ``prev`` names the old bytes."""
    backend = _plain_store()
    key = f"sessions/kat-plain/{2:020d}"
    forged = msgspec.json.decode(PLAIN_EVENTS[1][0])
    forged["body"]["messages"][0]["content"] = "forged"
    backend.replace(key, msgspec.json.encode(forged), etag=backend.head(key).etag)
    store = Store(backend)
    with pytest.raises(IntegrityError, match="chain broken") as caught:
        list(store.replay("kat-plain"))
    assert caught.value.seq == 3
    with pytest.raises(IntegrityError, match="chain broken"):
        store.context("kat-plain")
    with pytest.raises(IntegrityError, match="chain broken"):
        store.verify("kat-plain")
