"""Merkle trees, inclusion and consistency proofs (RFC 9162) over a session's event hashes:
the hashes checked against RFC 6962's published test vectors and against the definitions as
written in the RFC (recursive, here), every proof of small trees checked, and every single-hash
forgery refused."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

from click.testing import CliRunner, Result
from evstore_cli import cli

from evstore import InclusionProof, Keyring, LocalStore, MemoryStore, Store, check_proof
from evstore._merkle import check_consistency, check_inclusion, consistency_proof, inclusion_proof, root
from evstore._proofs import from_json, to_json

from .helpers import msg

# RFC 6962's test leaves and the roots of their first n, as Certificate Transparency publishes them
VECTOR_LEAVES = [
    bytes.fromhex(h)
    for h in ("", "00", "10", "2021", "3031", "40414243", "5051525354555657", "606162636465666768696a6b6c6d6e6f")
]
VECTOR_ROOTS = {
    0: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    1: "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    2: "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    3: "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    4: "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    5: "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    6: "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    7: "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    8: "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
}


# ---- RFC 9162 2.1, as written -----------------------------------------------------------------


def _k(n: int) -> int:
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def mth(d: list[bytes]) -> bytes:
    if not d:
        return hashlib.sha256(b"").digest()
    if len(d) == 1:
        return hashlib.sha256(b"\x00" + d[0]).digest()
    k = _k(len(d))
    return hashlib.sha256(b"\x01" + mth(d[:k]) + mth(d[k:])).digest()


def path(m: int, d: list[bytes]) -> list[bytes]:
    if len(d) == 1:
        return []
    k = _k(len(d))
    return [*path(m, d[:k]), mth(d[k:])] if m < k else [*path(m - k, d[k:]), mth(d[:k])]


def subproof(m: int, d: list[bytes], b: bool) -> list[bytes]:
    if m == len(d):
        return [] if b else [mth(d)]
    k = _k(len(d))
    return [*subproof(m, d[:k], b), mth(d[k:])] if m <= k else [*subproof(m - k, d[k:], False), mth(d[:k])]


def leaves(n: int, seed: int = 1) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(32) for _ in range(n)]


# ---- the tree and its proofs --------------------------------------------------------------------


def test_roots_are_rfc_6962s_published_vectors() -> None:
    for n, expected in VECTOR_ROOTS.items():
        assert root(VECTOR_LEAVES[:n]).hex() == expected
        assert mth(VECTOR_LEAVES[:n]).hex() == expected  # and the definition written here agrees


def test_roots_and_proofs_are_the_rfcs_definitions() -> None:
    data = leaves(70)
    for n in range(1, 71):
        assert root(data[:n]) == mth(data[:n])
        for m in range(n):
            assert inclusion_proof(m, data[:n]) == path(m, data[:n])
        for m in range(1, n + 1):
            assert consistency_proof(m, data[:n]) == subproof(m, data[:n], True)


def _forgeries(proof: list[bytes]) -> list[list[bytes]]:
    """Each hash with one bit flipped, one dropped, one added, two swapped."""
    out = []
    for i, h in enumerate(proof):
        out.append([*proof[:i], bytes([h[0] ^ 1]) + h[1:], *proof[i + 1 :]])
        out.append(proof[:i] + proof[i + 1 :])
    out.append([*proof, proof[-1] if proof else b"\x00" * 32])
    if len(proof) >= 2:
        out.append([proof[1], proof[0], *proof[2:]])
    return [f for f in out if f != proof]


def test_every_inclusion_proof_holds_and_every_forgery_is_refused() -> None:
    data = leaves(33)
    for n in range(1, 34):
        head = root(data[:n])
        for m in range(n):
            proof = inclusion_proof(m, data[:n])
            assert check_inclusion(m, n, data[m], proof, head)
            for forged in _forgeries(proof):
                assert not check_inclusion(m, n, data[m], forged, head)
            assert not check_inclusion(m, n, data[m][::-1], proof, head)  # another leaf
            assert not check_inclusion(m, n, data[m], proof, bytes(32))  # another root
            assert not check_inclusion(n, n, data[m], proof, head)  # out of range
            for other in range(n):
                if other != m and path(other, data[:n]) != proof:
                    assert not check_inclusion(other, n, data[m], proof, head)


def test_every_consistency_proof_holds_and_every_forgery_is_refused() -> None:
    data = leaves(33)
    other = leaves(33, seed=2)
    for n in range(1, 34):
        new = root(data[:n])
        for m in range(1, n + 1):
            old = root(data[:m])
            proof = consistency_proof(m, data[:n])
            assert check_consistency(m, n, old, new, proof)
            for forged in _forgeries(proof):
                assert not check_consistency(m, n, old, new, forged)
            assert not check_consistency(m, n, root(other[:m]), new, proof)  # another history's head
            if m < n:
                assert not check_consistency(m, n, old, root([*data[: n - 1], other[0]]), proof)  # a rewritten last leaf
                assert not check_consistency(n, m, new, old, proof)  # sizes the wrong way round
    assert not check_consistency(0, 5, root([]), root(data[:5]), [])  # no tree of 0 is vouched for


def test_hashes_of_the_wrong_length_are_refused_not_used() -> None:
    data = leaves(5)
    proof = inclusion_proof(2, data)
    assert not check_inclusion(2, 5, data[2], [*proof[:-1], proof[-1] + b"\x00"], root(data))
    assert not check_consistency(2, 5, root(data[:2])[:31], root(data), consistency_proof(2, data))


# ---- proofs of a session --------------------------------------------------------------------------


def _session(store: Store, sid: str, n: int) -> None:
    writer = store.open(sid, create=True)
    for i in range(n):
        writer.append(msg(f"m{i}"))


def test_a_sessions_tree_is_over_its_event_hashes() -> None:
    store = Store(MemoryStore())
    _session(store, "s", 40)
    hashes = [bytes.fromhex(e.hash) for e in store.replay("s")]
    head = store.tree_head("s")
    assert (head.size, head.root) == (40, root(hashes).hex())
    assert store.tree_head("s", size=7).root == root(hashes[:7]).hex()
    assert head.checkpoint().splitlines()[:2] == ["evstore/s", "40"]
    for seq in (1, 17, 40):
        proof = store.prove("s", seq)
        assert proof.leaf == hashes[seq - 1].hex() and check_proof(proof)
        assert check_proof(from_json(to_json(proof)))


def test_an_earlier_tree_head_is_proved_a_prefix_and_a_rewritten_history_is_not() -> None:
    store = Store(MemoryStore())
    _session(store, "s", 10)
    earlier = store.tree_head("s")
    writer = store.open("s")
    for i in range(25):
        writer.append(msg(f"later {i}"))
    proof = store.prove_consistency("s", earlier.size)
    assert proof.old_root == earlier.root and check_proof(proof)
    # a history that differs anywhere in the first 10 events has another root for them
    forged = Store(MemoryStore())
    _session(forged, "s", 35)
    theirs = forged.prove_consistency("s", 10)
    assert check_proof(theirs) and theirs.old_root != earlier.root


def test_proofs_need_no_key_and_cover_a_forks_inherited_events() -> None:
    memory = MemoryStore()
    keyed = Store(memory, keyring=Keyring({"k1": bytes(range(32))}, "k1"))
    _session(keyed, "parent", 5)
    keyed.fork("parent", "child")
    keyed.open("child").append(msg("own"))
    keyless = Store(memory)  # an auditor's: no key to open the sealed bodies
    hashes = [bytes.fromhex(e.hash) for e in keyed.replay("child")]
    assert keyless.tree_head("child").root == root(hashes).hex()
    assert check_proof(keyless.prove("child", 3)) and keyless.prove("child", 6).leaf == hashes[5].hex()


def test_check_proof_refuses_a_proof_edited_anywhere() -> None:
    store = Store(MemoryStore())
    _session(store, "s", 12)
    good = json.loads(to_json(store.prove("s", 5)))
    trusted = store.tree_head("s")
    assert check_proof(from_json(json.dumps(good).encode()), trusted)
    edits = [("seq", 6), ("size", 13), ("size", 11), ("leaf", "00" * 32), ("root", "11" * 32), ("leaf", good["leaf"].upper())]
    for field, value in edits:
        # the tree size is bound to the root by the tree head: some sizes give the path the same shape
        assert not check_proof(from_json(json.dumps({**good, field: value}).encode()), trusted), field
    assert not check_proof(store.prove("s", 5, size=11), trusted)  # a proof for another tree of the session
    assert check_proof(store.prove_consistency("s", 12), trusted)
    assert not check_proof(store.prove_consistency("s", 11), trusted)
    assert not check_proof(InclusionProof("s", 5, 12, good["leaf"], good["path"] * 50, good["root"]))  # too long to read


# ---- the command --------------------------------------------------------------------------------


def _evstore(*args: str, store: Path, stdin: bytes = b"") -> Result:
    env = {"EVSTORE_STORE": f"file://{store}"}
    return CliRunner().invoke(cli, list(args), input=stdin, env=env, catch_exceptions=False)


def test_the_command_proves_and_checks_without_a_store(tmp_path: Path) -> None:
    store = tmp_path / "store"
    _session(Store(LocalStore(store)), "s", 9)
    made = _evstore("prove", "s", "4", store=store)
    assert made.exit_code == 0, made.output
    checked = _evstore("check-proof", store=tmp_path / "elsewhere", stdin=made.stdout_bytes)
    assert checked.exit_code == 0 and checked.stdout.startswith("ok: event 4 ")
    forged = made.stdout_bytes.replace(b'"seq":4', b'"seq":5')
    refused = _evstore("check-proof", store=store, stdin=forged)
    assert refused.exit_code == 5 and refused.stderr.startswith("evstore: proof refused")
    assert _evstore("check-proof", store=store, stdin=b"not json").exit_code == 2
    assert _evstore("check-proof", "/dev/zero", store=store).exit_code == 2
    since = _evstore("prove", "s", "--since-size", "3", store=store)
    assert _evstore("check-proof", store=store, stdin=since.stdout_bytes).exit_code == 0
    head = _evstore("tree-head", "s", store=store)
    assert head.exit_code == 0 and head.stdout.splitlines()[:2] == ["evstore/s", "9"]
    (tmp_path / "head").write_text(head.stdout)
    assert _evstore("check-proof", "--tree-head", str(tmp_path / "head"), store=store, stdin=made.stdout_bytes).exit_code == 0
    older = _evstore("prove", "s", "4", "--size", "8", store=store)
    assert _evstore("check-proof", "--tree-head", str(tmp_path / "head"), store=store, stdin=older.stdout_bytes).exit_code == 5
    (tmp_path / "junk").write_text("evstore/s\n9\nnot base64\n")
    assert _evstore("check-proof", "--tree-head", str(tmp_path / "junk"), store=store, stdin=made.stdout_bytes).exit_code == 2
    assert _evstore("prove", "s", store=store).exit_code == 2  # neither SEQ nor --since-size
    assert _evstore("prove", "s", "10", store=store).exit_code == 2  # past the head
