"""The local store against one who may create files in its directory and race it there: a
write's temporary file swapped before it lands, trees planted deep, directories planted where a
sidecar goes, a lock held, a rules file planted or damaged. Each answer is the true history, an
append acknowledged exactly once, or a clean evstore error: never a stranger's bytes landed as
ours, a raw OSError or RecursionError, or a hang."""

from __future__ import annotations

import fcntl
import json
import os
import stat
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

import pytest

from evstore import IntegrityError, LocalStore, Store, StoreUnavailableError
from evstore._backends import _local_files

from .helpers import msg


def texts(store: Store, session: str = "s") -> list[str]:
    return [str(e.messages[0]["content"]) for e in store.replay(session)]


def swap_before_link(tmp_dir: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Each temporary file, once written and fsynced, is replaced under its name by a forged
    copy (as one who may create files in ``tmp`` can rename over it): the names swapped."""
    swapped: list[str] = []
    real_fsync = os.fsync

    def fsync_then_swap(fd: int) -> None:
        real_fsync(fd)
        try:
            path = Path(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            return
        if path.parent == tmp_dir and path.name.startswith("t-"):
            forged = path.read_bytes().replace(b"pay 100", b"pay 999")
            decoy = tmp_dir / "forged"
            decoy.write_bytes(forged)
            os.rename(decoy, path)
            swapped.append(path.name)

    monkeypatch.setattr(os, "fsync", fsync_then_swap)
    return swapped


def test_a_write_has_no_name_in_tmp_before_it_lands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(LocalStore(tmp_path))
    seen: list[list[str]] = []  # what tmp holds while an object's bytes are fsynced, before it lands
    real_fsync = os.fsync

    def fsync_and_look(fd: int) -> None:
        real_fsync(fd)
        path = Path(os.readlink(f"/proc/self/fd/{fd}"))
        if path.parent == tmp_path / "tmp" and path.name.startswith("#"):  # an object's (a sidecar's is named)
            seen.append(os.listdir(tmp_path / "tmp"))

    monkeypatch.setattr(os, "fsync", fsync_and_look)
    writer = store.create("s")
    writer.append(msg("pay 100 to bob"))
    monkeypatch.undo()
    assert len(seen) == 2 and seen == [[], []]  # the manifest's and the event's: nothing to read (a write id) or swap
    assert texts(store) == ["pay 100 to bob"]


def test_without_anonymous_files_a_temp_file_swapped_before_its_link_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_local_files, "_PROC_SELF_FD", str(tmp_path / "no-proc"))  # as where O_TMPFILE cannot be linked
    store = Store(LocalStore(tmp_path / "store"))
    writer = store.create("s")
    writer.append(msg("hello"))
    swapped = swap_before_link(tmp_path / "store/tmp", monkeypatch)
    with pytest.raises(IntegrityError, match="temporary file was replaced"):
        writer.append(msg("pay 100 to bob"))
    monkeypatch.undo()
    assert swapped  # the race was run
    assert texts(store) == ["hello"]  # the stranger's file was linked, then taken back
    assert not (tmp_path / "store/objects/sessions/s" / f"{2:020d}").exists()


def test_named_temp_files_are_readable_by_their_owner_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_local_files, "_PROC_SELF_FD", str(tmp_path / "no-proc"))
    store = Store(LocalStore(tmp_path / "store"))
    modes: list[int] = []
    real_fsync = os.fsync

    def fsync_and_look(fd: int) -> None:
        real_fsync(fd)
        if Path(os.readlink(f"/proc/self/fd/{fd}")).parent == tmp_path / "store/tmp":
            modes.append(stat.S_IMODE(os.fstat(fd).st_mode))

    monkeypatch.setattr(os, "fsync", fsync_and_look)
    store.create("s").append(msg("a"))
    monkeypatch.undo()
    assert modes and set(modes) == {0o600}  # no other user reads a write (its write id) before it lands


@pytest.mark.slow
def test_a_tree_planted_thousands_of_levels_deep_is_listed_and_removed_without_recursion(tmp_path: Path) -> None:
    store = Store(LocalStore(tmp_path))
    writer = store.create("s")
    writer.append(msg("hi"))
    levels = 1500  # Python's recursion limit is 1,000 frames
    fd = os.open(tmp_path / "objects/sessions/s", os.O_RDONLY)
    for _ in range(levels):
        os.mkdir("d", dir_fd=fd)
        deeper = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = deeper
    os.close(fd)
    try:
        assert texts(store) == ["hi"]
        writer.append(msg("again"))
        assert store.verify("s").receipt.seq == 2
        assert [o.key for o in store.backend.list("sessions/")][:2] == [f"sessions/s/{1:020d}", f"sessions/s/{2:020d}"]
        store.delete("s")
        assert store.gc().sessions == 1
    finally:  # the tree, deepest first (a recursive removal would meet the limit itself)
        for depth in range(levels, 0, -1):
            with suppress(FileNotFoundError):
                os.rmdir(tmp_path / "objects/sessions/s" / "/".join(["d"] * depth))


def test_a_directory_planted_at_a_sidecar_path_never_fails_an_append_that_landed(tmp_path: Path) -> None:
    store = Store(LocalStore(tmp_path))
    writer = store.create("s")
    writer.append(msg("hello"))
    (tmp_path / "meta/sessions/s" / f"{2:020d}").mkdir(parents=True)
    assert writer.append(msg("pay 100")) == 2  # acknowledged once: a retry would have made it twice
    assert texts(store) == ["hello", "pay 100"]


def test_a_lock_a_stranger_holds_is_an_error_after_the_wait_not_a_hang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(LocalStore(tmp_path))
    store.create("s").append(msg("a"))
    monkeypatch.setattr(_local_files, "LOCK_WAIT_SECONDS", 0.3)
    held = os.open(tmp_path / "lock", os.O_RDWR)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(StoreUnavailableError, match="lock is held by another process"):
            store.open("s").append(msg("b"))
    finally:
        os.close(held)
    assert store.open("s").append(msg("b")) == 2  # released: writes go on


def test_a_new_store_creates_its_lock_and_rules_files_before_a_stranger_can(tmp_path: Path) -> None:
    LocalStore(tmp_path)
    assert stat.S_IMODE((tmp_path / "lock").stat().st_mode) == 0o600
    assert json.loads((tmp_path / "lifecycle.json").read_bytes()) == []
    for name in ("lock", "lifecycle.json"):
        with pytest.raises(FileExistsError):  # what one who may only create files meets
            os.open(tmp_path / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL)


@pytest.mark.parametrize(
    "rules",
    [
        '{"a": 1}',
        "[1]",
        '[{"ID": "x", "Status": "Enabled", "Filter": {"Prefix": ""}, "Expiration": {"Days": "x"}}]',
        '[{"ID": "x", "Status": "Enabled", "Filter": {"Prefix": ""}, "Expiration": {"Days": 1000000000}}]',
        '[{"ID": "x", "Status": "Enabled", "Filter": {"Prefix": ""}, "Expiration": {"Date": "2000-01-01T00:00:00"}}]',
        '[{"ID": "x", "Status": "Enabled", "Filter": "everything", "Expiration": {"Days": 1}}]',
        '[{"ID": "x", "Status": "Enabled", "Filter": {"Prefix": ""}, "Expiration": 3}]',
        "[" * 100_000,
    ],
)
def test_a_damaged_rules_file_is_a_clean_error(tmp_path: Path, rules: str) -> None:
    store = Store(LocalStore(tmp_path))
    store.create("s").append(msg("a"))
    (tmp_path / "lifecycle.json").write_text(rules)
    for action in (lambda: store.gc(apply_lifecycle=True, dry_run=True), store.lifecycle_rules):
        with pytest.raises(StoreUnavailableError, match="lifecycle"):
            action()
    assert texts(store) == ["a"]



@pytest.mark.parametrize("planted", ["next seq", "tombstone", "manifest"])
def test_a_directory_planted_where_an_object_goes_is_exit_5_not_a_conflict_to_retry(tmp_path: Path, planted: str) -> None:
    store = Store(LocalStore(tmp_path))
    writer = store.create("s")
    writer.append(msg("a"))
    session = tmp_path / "objects/sessions/s"
    if planted == "next seq":
        (session / f"{2:020d}").mkdir()
        action: Callable[[], object] = lambda: writer.append(msg("b"))  # noqa: E731
    elif planted == "tombstone":
        (session / "tombstone").mkdir()
        action = lambda: store.delete("s")  # noqa: E731
    else:
        (tmp_path / "objects/sessions/new/manifest").mkdir(parents=True)
        action = lambda: store.create("new")  # noqa: E731
    with pytest.raises(IntegrityError, match="a directory stands where the object goes"):
        action()  # never WriteConflictError (refresh and retry, forever) nor a raw ObjectExists
    assert texts(store) == ["a"]


def test_an_event_written_to_in_place_no_longer_vouches_for_the_segment_that_holds_it(tmp_path: Path) -> None:
    store = Store(LocalStore(tmp_path))
    writer = store.create("s")
    for i in range(1, 101):
        writer.append(msg(f"m{i}"))
    assert store.info("s").segments  # seq 10 is read from a segment, on the word of its listed ETag
    event = tmp_path / "objects/sessions/s" / f"{10:020d}"
    with event.open("r+b") as damaged:  # in place: the recorded ETag (an extended attribute) is kept
        damaged.seek(40)
        damaged.write(b"X")
    with pytest.raises(IntegrityError) as raised:
        store.verify("s")
    assert raised.value.seq == 10
    with pytest.raises(IntegrityError):
        list(store.replay("s"))
