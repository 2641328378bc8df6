"""The local store stays inside its directory: symlinks are never followed, only regular
files are read (a FIFO or /dev/zero is refused at once), reads are bounded, and a create
racing deletes leaks no raw OS error and leaves no temporary file.

Blocking operations (a FIFO) run in a daemon thread joined with a generous timeout: the
guard turns a hang into a failure instead of a stuck test run; it asserts no speed.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from evstore import EvstoreError, IntegrityError, LocalStore, Store, StoreUnavailableError
from evstore._backends import ObjectExists, ObjectMissing, ObjectRefused

GUARD_SECONDS = 60
EVENT = "root/sessions/victim/00000000000000000001"


def user(text: str) -> dict[str, object]:
    return {"role": "user", "content": text}


def guarded(action: Callable[[], Any]) -> BaseException | None:
    """Run ``action`` in a daemon thread; return what it raised (None if nothing). Fails if it
    is still running after the guard (it hung)."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            action()
            outcome.append(None)
        except BaseException as exc:  # handed to the test
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(GUARD_SECONDS)
    assert not thread.is_alive(), "the operation hung"
    return outcome[0]


def snapshot(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory outside the store with a file in it: nothing may read, change or delete it."""
    directory = tmp_path / "outside"
    directory.mkdir()
    (directory / "secret").write_bytes(b"outside the store")
    (directory / "00000000000000000001").write_bytes(b"not an event of the store")
    return directory


@pytest.fixture
def local(tmp_path: Path) -> LocalStore:
    return LocalStore(tmp_path / "store")


def objects_dir(local: LocalStore, key: str) -> Path:
    return local.base / "objects" / key


def replace_with_link(path: Path, target: Path) -> None:
    """Swap the directory ``path`` for a symlink to ``target`` (what an attacker with write
    access to the store's directory, or a careless script, can do)."""
    for child in sorted(path.rglob("*"), reverse=True):
        child.unlink() if not child.is_dir() or child.is_symlink() else child.rmdir()
    path.rmdir()
    path.symlink_to(target, target_is_directory=True)


# ---- a session directory replaced by a symlink ---------------------------------------------


def test_append_into_a_symlinked_session_directory_is_refused(local: LocalStore, outside: Path) -> None:
    store = Store(local, root="root")
    writer = store.create("victim")
    writer.append(user("one"))
    before = snapshot(outside)
    replace_with_link(objects_dir(local, "root/sessions/victim"), outside)
    with pytest.raises(EvstoreError) as refused:
        writer.append(user("two"))
    assert isinstance(refused.value, IntegrityError), refused.value  # exit 5, one line
    assert "symlink" in str(refused.value)
    assert snapshot(outside) == before
    assert sorted(os.listdir(outside)) == ["00000000000000000001", "secret"]


def test_backend_create_through_a_symlinked_directory_writes_nothing_outside(local: LocalStore, outside: Path) -> None:
    local.create(EVENT, b"event")
    before = snapshot(outside)
    replace_with_link(objects_dir(local, "root/sessions/victim"), outside)
    with pytest.raises(ObjectRefused, match="symlink"):
        local.create("root/sessions/victim/00000000000000000002", b"planted")
    with pytest.raises(ObjectRefused):
        local.create("root/sessions/victim/deeper/x", b"planted")
    assert snapshot(outside) == before
    assert os.listdir(local.base / "tmp") == []


def test_reads_through_a_symlinked_directory_are_refused(local: LocalStore, outside: Path) -> None:
    local.create(EVENT, b"event")
    replace_with_link(objects_dir(local, "root/sessions/victim"), outside)
    for read in (local.get, local.head, local.get_tags):
        with pytest.raises(ObjectRefused):
            read(EVENT)
    with pytest.raises(ObjectRefused):
        list(local.list("root/sessions/victim/"))


def test_listing_never_enters_a_symlinked_directory(local: LocalStore, outside: Path) -> None:
    local.create("root/sessions/kept/00000000000000000001", b"event")
    local.create(EVENT, b"event")
    replace_with_link(objects_dir(local, "root/sessions/victim"), outside)
    listed = {info.key: info.size for info in local.list("root/")}
    # the link is an entry of the store (its own lstat size), its target's files are not listed
    assert set(listed) == {"root/sessions/kept/00000000000000000001", "root/sessions/victim"}
    assert listed["root/sessions/victim"] == len(str(outside))
    page = local.list_page("root/sessions/", delimiter="/")
    assert page.prefixes == ["root/sessions/kept/"]
    assert [o.key for o in page.objects] == ["root/sessions/victim"]


def test_delete_and_gc_never_touch_files_outside(local: LocalStore, outside: Path) -> None:
    store = Store(local, root="root")
    store.create("victim").append(user("one"))
    store.create("kept").append(user("kept"))
    before = snapshot(outside)
    replace_with_link(objects_dir(local, "root/sessions/victim"), outside)
    with pytest.raises(ObjectRefused):
        local.delete_many([EVENT, "root/sessions/victim/secret"])
    outcome = guarded(lambda: store.delete("victim"))
    assert outcome is None or isinstance(outcome, EvstoreError), repr(outcome)
    outcome = guarded(lambda: store.gc(grace=timedelta(0)))
    assert outcome is None or isinstance(outcome, EvstoreError), repr(outcome)
    assert snapshot(outside) == before
    assert [m["content"] for m in store.context("kept")] == ["kept"]


def test_deleting_a_symlink_object_removes_the_link_not_its_target(local: LocalStore, outside: Path) -> None:
    local.create("root/sessions/s/00000000000000000001", b"event")
    link = objects_dir(local, "root/sessions/s/00000000000000000002")
    link.symlink_to(outside / "secret")
    local.delete_many(["root/sessions/s/00000000000000000002"])
    assert not link.is_symlink()
    assert (outside / "secret").read_bytes() == b"outside the store"


# ---- only regular files are read ----------------------------------------------------------


def test_a_symlink_to_dev_zero_is_refused_at_once(local: LocalStore) -> None:
    local.create(EVENT, b"event")
    link = objects_dir(local, "root/sessions/victim/00000000000000000002")
    link.symlink_to("/dev/zero")
    for read in (
        lambda: local.get("root/sessions/victim/00000000000000000002"),
        lambda: local.get("root/sessions/victim/00000000000000000002", max_bytes=1000),
        lambda: local.head("root/sessions/victim/00000000000000000002"),
    ):
        outcome = guarded(read)
        assert isinstance(outcome, ObjectRefused), repr(outcome)
        assert "symlink" in str(outcome)


def test_a_symlink_to_a_file_outside_is_not_read(local: LocalStore, outside: Path) -> None:
    objects_dir(local, "root/sessions/s").mkdir(parents=True)
    objects_dir(local, "root/sessions/s/00000000000000000001").symlink_to(outside / "secret")
    with pytest.raises(ObjectRefused) as refused:
        local.get("root/sessions/s/00000000000000000001")
    assert "outside the store" not in str(refused.value)


def test_a_fifo_is_refused_without_hanging(local: LocalStore) -> None:
    local.create(EVENT, b"event")
    fifo = objects_dir(local, "root/sessions/victim/00000000000000000002")
    os.mkfifo(fifo)
    for read in (
        lambda: local.get("root/sessions/victim/00000000000000000002"),
        lambda: local.head("root/sessions/victim/00000000000000000002"),
    ):
        outcome = guarded(read)
        assert isinstance(outcome, ObjectRefused), repr(outcome)
        assert "not a regular file" in str(outcome)


def test_a_fifo_or_link_sidecar_is_ignored(local: LocalStore) -> None:
    local.create(EVENT, b"event", metadata={"evstore-write-id": "w1"})
    sidecar = local.base / "meta" / EVENT
    sidecar.unlink()
    os.mkfifo(sidecar)
    outcome = guarded(lambda: local.get(EVENT))
    assert outcome is None
    assert local.get(EVENT).metadata == {}
    sidecar.unlink()
    sidecar.symlink_to("/dev/zero")
    assert guarded(lambda: local.get(EVENT)) is None


def test_a_huge_file_is_refused_by_its_size_before_reading(local: LocalStore) -> None:
    local.create(EVENT, b"event")
    path = objects_dir(local, EVENT)
    os.truncate(path, 1 << 32)  # a sparse 4 GiB file: reading it whole would take 4 GiB of memory
    with pytest.raises(ObjectRefused) as refused:
        local.get(EVENT, max_bytes=1 << 20)
    assert refused.value.size == 1 << 32 and refused.value.limit == 1 << 20
    assert local.list_page("root/sessions/victim/").objects[0].size == 1 << 32


def test_a_directory_at_an_object_key_is_missing(local: LocalStore) -> None:
    local.create("root/sessions/s/forks/child@1", b"marker")
    with pytest.raises(ObjectMissing):
        local.get("root/sessions/s/forks")


def test_a_planted_lock_link_is_refused_and_its_target_untouched(local: LocalStore, outside: Path) -> None:
    (local.base / "lock").unlink(missing_ok=True)
    (local.base / "lock").symlink_to(outside / "created-by-the-store")
    with pytest.raises(EvstoreError):
        local.create("k", b"x")
    assert not (outside / "created-by-the-store").exists()


def test_a_symlinked_tmp_directory_receives_nothing(local: LocalStore, outside: Path) -> None:
    before = snapshot(outside)
    (local.base / "tmp").rmdir()
    (local.base / "tmp").symlink_to(outside, target_is_directory=True)
    with pytest.raises(EvstoreError):
        local.create("k", b"would be written to the temp directory first")
    assert snapshot(outside) == before


def test_a_store_whose_objects_directory_is_a_link_is_refused(tmp_path: Path, outside: Path) -> None:
    base = tmp_path / "linked"
    base.mkdir()
    (base / "objects").symlink_to(outside, target_is_directory=True)
    with pytest.raises(EvstoreError, match="links"):
        LocalStore(base)


# ---- create racing delete and gc ----------------------------------------------------------


def test_creates_racing_deletes_raise_no_os_error_and_leave_no_temp_file(local: LocalStore) -> None:
    """Creators make keys in fresh directories while a deleter removes everything it lists
    (pruning the directories it empties): before the shared lock, a create could meet its
    directory removed between mkdir and link and raise a raw FileNotFoundError."""
    errors: list[BaseException] = []
    created: list[str] = []
    stop = threading.Event()

    def creator(worker: int) -> None:
        try:
            for i in range(150):
                key = f"root/sessions/s{worker}-{i % 7}/{i:020d}"
                try:
                    local.create(key, b"x" * 64)
                    created.append(key)
                except ObjectExists:
                    pass
        except BaseException as exc:  # collected for the assertion
            errors.append(exc)

    def deleter() -> None:
        try:
            while not stop.is_set():
                local.delete_many([info.key for info in local.list("root/")])
        except BaseException as exc:  # collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=creator, args=(n,)) for n in range(3)]
    cleaner = threading.Thread(target=deleter)
    cleaner.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(GUARD_SECONDS)
    stop.set()
    cleaner.join(GUARD_SECONDS)
    assert errors == []
    assert len(created) == 450
    assert os.listdir(local.base / "tmp") == []
    # what the deleter did not get to is whole: every object there has its bytes
    for info in local.list("root/"):
        assert local.get(info.key).data == b"x" * 64


def test_sessions_created_while_gc_and_delete_run_fail_only_with_evstore_errors(local: LocalStore) -> None:
    store = Store(local, root="root")
    errors: list[BaseException] = []
    stop = threading.Event()

    def writer(worker: int) -> None:
        for i in range(25):
            try:
                session = store.create(f"w{worker}-{i % 3}")
                session.append(user("hello"))
            except EvstoreError:
                pass  # taken, deleted meanwhile: a documented error is fine
            except BaseException as exc:  # collected for the assertion
                errors.append(exc)

    def remover() -> None:
        while not stop.is_set():
            try:
                for session_id in list(store.list_sessions()):
                    store.delete(session_id)
                store.gc(grace=timedelta(0))
            except EvstoreError:
                pass
            except BaseException as exc:  # collected for the assertion
                errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(2)]
    cleaner = threading.Thread(target=remover)
    cleaner.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(GUARD_SECONDS)
    stop.set()
    cleaner.join(GUARD_SECONDS)
    assert errors == [], [repr(e) for e in errors]
    assert os.listdir(local.base / "tmp") == []


def test_the_command_reports_a_planted_fifo_as_one_line_with_exit_5(tmp_path: Path) -> None:
    from click.testing import CliRunner
    from evstore_cli import cli

    env = {"EVSTORE_STORE": (tmp_path / "store").as_uri()}
    runner = CliRunner()
    assert runner.invoke(cli, ["append", "chat", "hello"], env=env).exit_code == 0
    os.mkfifo(tmp_path / "store" / "objects" / "sessions" / "chat" / f"{2:020d}")
    outcome: list[Any] = []
    thread = threading.Thread(target=lambda: outcome.append(runner.invoke(cli, ["replay", "chat"], env=env)), daemon=True)
    thread.start()
    thread.join(GUARD_SECONDS)
    assert not thread.is_alive(), "replay hung on a FIFO"
    (result,) = outcome
    assert result.exit_code == 5, result.output
    (line,) = result.output.strip().splitlines()[-1:]
    assert line.startswith("evstore: ") and "not a regular file" in line


def test_opening_the_store_sweeps_temp_files_a_killed_process_left(tmp_path: Path) -> None:
    LocalStore(tmp_path / "store")
    tmp = tmp_path / "store" / "tmp"
    stale, fresh, other = tmp / "t-stale", tmp / "t-fresh", tmp / "not-ours"
    for path in (stale, fresh, other):
        path.write_bytes(b"half an object")
    two_hours_ago = time.time() - 7200
    os.utime(stale, (two_hours_ago, two_hours_ago))
    os.utime(other, (two_hours_ago, two_hours_ago))
    LocalStore(tmp_path / "store")
    assert sorted(os.listdir(tmp)) == ["not-ours", "t-fresh"]


def test_a_store_opened_to_read_only_is_never_made_where_none_is(tmp_path: Path) -> None:
    """``LocalStore(path, create=False)``: a path that does not exist, names a file, or names a
    directory of other files is ``StoreUnavailableError`` and stays as it was; an empty directory
    and an existing store open."""
    missing, file, other, empty, store = (tmp_path / name for name in ("missing", "file", "other", "empty", "store"))
    file.write_text("x")
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    empty.mkdir()
    Store(LocalStore(store)).open("s", create=True).append(user("kept"))
    for path, why in ((missing, "it does not exist"), (file, "Not a directory"), (other, "it holds other files")):
        with pytest.raises(StoreUnavailableError, match=why):
            LocalStore(path, create=False)
    assert not missing.exists() and file.read_text() == "x" and [p.name for p in other.iterdir()] == ["notes.txt"]
    assert list(LocalStore(empty, create=False).list("")) == []
    assert [m["content"] for m in Store(LocalStore(store, create=False)).context("s")] == ["kept"]
