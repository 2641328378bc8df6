"""Retention: lifecycle rules (merge, evaluation, preview), gc, keep-count, stale writers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from evstore import MemoryStore, SessionExpiredError, SessionNotFoundError, Store
from evstore import _lifecycle as lc
from evstore._context import FENCE_HOLD
from evstore._retention import parse_duration, parse_time

from .helpers import T0, Clock, CountingStore, msg


def listing(store: Store) -> dict[str, str]:
    return {o.key: o.etag for o in store.backend.list("")}


def filled(store: Store, sid: str, n: int = 3, retention: str = "permanent") -> None:
    writer = store.open(sid, create=True, retention=retention)  # type: ignore[arg-type]
    for i in range(n):
        writer.append(msg(f"{sid}-{i}"))


FOREIGN = {"ID": "logs-30d", "Status": "Enabled", "Filter": {"Prefix": "logs/"}, "Expiration": {"Days": 30}}


def test_every_object_of_an_ephemeral_session_is_tagged_at_put(timed: Store) -> None:
    filled(timed, "e", retention="ephemeral")
    timed.fork("e", "ef", retention="ephemeral").append(msg("x"))
    filled(timed, "p")
    for obj in timed.backend.list(""):
        expected = {lc.RETENTION_TAG: "ephemeral" if obj.key.split("/")[2] in ("e", "ef") else "permanent"}
        assert timed.backend.get_tags(obj.key) == expected, obj.key


def test_apply_merges_with_foreign_rules_and_never_changes_them(timed: Store) -> None:
    timed.backend.put_lifecycle([FOREIGN])
    changed, rules = timed.apply_lifecycle(7)
    assert changed and rules[0] == FOREIGN and len(rules) == 3
    ours = {r["ID"]: r for r in timed.lifecycle_rules()}
    assert ours["evstore-ephemeral-expiry:root"]["Expiration"] == {"Days": 7}
    assert ours["evstore-ephemeral-expiry:root"]["Filter"]["And"]["Tags"] == [{"Key": lc.RETENTION_TAG, "Value": "ephemeral"}]
    assert "Tags" not in str(ours["evstore-abort-incomplete-uploads:root"]["Filter"])


def test_apply_twice_changes_nothing_and_makes_no_write() -> None:
    counting = CountingStore(MemoryStore())
    store = Store(counting, root="root")
    store.apply_lifecycle(90)
    counting.reset()
    changed, _ = store.apply_lifecycle(90)
    assert not changed and counting.counts == {"GET": 1}


def test_apply_with_new_days_replaces_only_our_rule(timed: Store) -> None:
    timed.backend.put_lifecycle([FOREIGN])
    timed.apply_lifecycle(7)
    timed.apply_lifecycle(30)
    rules = timed.lifecycle_rules()
    assert len(rules) == 3 and rules[0] == FOREIGN
    assert [r["Expiration"]["Days"] for r in rules if r["ID"].startswith("evstore-ephemeral")] == [30]


def test_a_rule_with_our_effect_under_another_id_counts_as_ours() -> None:
    rgw_style = {
        "ID": "from-cloudformation",
        "Status": "Enabled",
        "Expiration": {"Days": 90},
        "Filter": {"Prefix": "root/sessions/", "Tag": {"Key": lc.RETENTION_TAG, "Value": "ephemeral"}},
    }
    merged = lc.merge_rules([rgw_style], lc.evstore_rules("root/sessions/", 90))
    assert [r["ID"] for r in merged] == ["from-cloudformation", "evstore-abort-incomplete-uploads:root"]


def test_the_tag_filter_matches_ephemeral_objects_only() -> None:
    rules = lc.evstore_rules("root/sessions/", 1)
    created = datetime(2026, 1, 1, 12, tzinfo=UTC)
    late = datetime(2026, 6, 1, tzinfo=UTC)
    ephemeral = {lc.RETENTION_TAG: "ephemeral"}
    assert lc.expiry(rules, "root/sessions/a/1", created, ephemeral, 10) == datetime(2026, 1, 3, tzinfo=UTC)
    assert lc.expiry(rules, "root/sessions/a/1", created, {}, 10) is None
    assert lc.expiry(rules, "other/sessions/a/1", created, ephemeral, 10) is None
    assert lc.upload_abort(rules, "root/sessions/a/x", created) == datetime(2026, 1, 9, tzinfo=UTC) < late


def test_s3_rounds_expiry_up_to_midnight_utc() -> None:
    rule = {"ID": "r", "Status": "Enabled", "Filter": {}, "Expiration": {"Days": 1}}
    assert lc.expiry([rule], "k", datetime(2026, 1, 1, 0, 0, tzinfo=UTC), {}, 1) == datetime(2026, 1, 2, tzinfo=UTC)
    assert lc.expiry([rule], "k", datetime(2026, 1, 1, 0, 0, 1, tzinfo=UTC), {}, 1) == datetime(2026, 1, 3, tzinfo=UTC)
    disabled = {**rule, "Status": "Disabled"}
    assert lc.expiry([disabled], "k", T0, {}, 1) is None


def test_ephemeral_sessions_expire_after_n_days_permanent_never(timed: Store, clock: Clock) -> None:
    timed.apply_lifecycle(3)
    filled(timed, "scratch", retention="ephemeral")
    filled(timed, "named")
    clock.advance(days=2)
    assert timed.gc(apply_lifecycle=True).objects_removed == 0
    clock.advance(days=2)
    report = timed.gc(apply_lifecycle=True)
    assert report.reasons == {"lifecycle expiry": 4}
    with pytest.raises(SessionNotFoundError):
        list(timed.replay("scratch"))
    clock.advance(days=3650)
    timed.gc(apply_lifecycle=True)
    assert len(list(timed.replay("named"))) == 3


def test_a_session_expired_piecewise_replays_as_expired_then_gc_removes_the_rest(timed: Store, clock: Clock) -> None:
    filled(timed, "s", n=2, retention="ephemeral")
    clock.advance(hours=20)
    timed.open("s").append(msg("a day later"))  # made on a later day: outlives the rest by a day
    timed.apply_lifecycle(1)
    clock.now = datetime(2026, 3, 3, 1, tzinfo=UTC)  # the first objects are due, the last one not yet
    timed.gc(apply_lifecycle=True, grace=timedelta(0))
    assert [o.key.rsplit("/", 1)[1] for o in timed.backend.list("root/")] == ["00000000000000000003"]
    with pytest.raises(SessionExpiredError):
        list(timed.replay("s"))
    with pytest.raises(SessionExpiredError):
        timed.open("s")
    report = timed.gc(grace=timedelta(0))
    assert report.reasons == {"expired remnant or orphan": 1}
    assert listing(timed) == {}


def test_missing_first_events_under_a_live_manifest_are_reported_not_removed(timed: Store, clock: Clock) -> None:
    """Only the manifest, a tombstone, the rules and the grace decide: events gone from the front
    look exactly like a junk object planted there, so gc leaves the session and says why."""
    filled(timed, "s", n=4)
    timed.backend.delete_many([timed.layout.event_key("s", 1), timed.layout.event_key("s", 2)])
    clock.advance(days=2)
    report = timed.gc()
    assert report.reasons == {} and "first events are missing" in report.left_alone["s"]
    timed.backend.delete_many([timed.layout.manifest_key("s")])  # the manifest expires too
    assert timed.gc().reasons == {"expired remnant or orphan": 2}


def test_gc_never_touches_a_live_session(timed: Store, clock: Clock) -> None:
    filled(timed, "live", n=5)
    timed.compact("live", segment_size=2)
    clock.advance(days=400)
    before = listing(timed)
    report = timed.gc(grace=timedelta(0))
    assert report.objects_removed == 0 and listing(timed) == before


def test_gc_keeps_a_deleted_parent_while_a_fork_needs_it_then_reclaims_it(timed: Store, clock: Clock) -> None:
    filled(timed, "p")
    timed.fork("p", "f", at=2).append(msg("own"))
    timed.delete("p")
    clock.advance(days=5)
    assert timed.gc().objects_removed == 0
    assert [m["content"] for e in timed.replay("f") for m in e.messages] == ["p-0", "p-1", "own"]
    timed.delete("f")  # no forks of its own: removed once the fence hold has passed
    assert timed.gc().objects_removed == 0
    clock.advance(days=2)
    assert timed.gc().reasons == {"deleted": 4}  # f: its event, manifest, fence, tombstone
    # p's last fork went in that run's batch, after p was judged: the next run removes p
    # (3 events, manifest, fork marker, fence, tombstone)
    assert timed.gc().reasons == {"deleted": 7} and listing(timed) == {}
    timed.create("p")  # the id is free again


def test_gc_spares_objects_younger_than_the_grace_period(timed: Store, clock: Clock) -> None:
    filled(timed, "gone")
    timed.backend.delete_many([timed.layout.manifest_key("gone")])
    clock.advance(hours=2)
    report = timed.gc(grace=parse_duration("1d"))
    assert report.objects_removed == 0 and report.kept_young == 3
    clock.advance(days=1)
    assert timed.gc().objects_removed == 3


def test_dry_run_changes_nothing_and_reports_the_plan(timed: Store, clock: Clock) -> None:
    filled(timed, "p")
    filled(timed, "d")
    timed.delete("d")
    filled(timed, "orphan")
    timed.backend.delete_many([timed.layout.manifest_key("orphan")])
    clock.advance(days=2)
    before = listing(timed)
    planned: list[tuple[str, str]] = []
    report = timed.gc(dry_run=True, on_remove=lambda key, size, reason: planned.append((key, reason)))
    assert listing(timed) == before
    assert report.objects_removed == len(planned) == 3 + 6  # d: 3 events, manifest, fence, tombstone
    assert {key.split("/")[2] for key, _ in planned} == {"orphan", "d"}
    assert timed.gc().objects_removed == 9


def test_dead_fork_markers_are_removed_live_ones_kept(timed: Store, clock: Clock) -> None:
    filled(timed, "p")
    timed.fork("p", "alive")
    timed.fork("p", "dead")
    timed.purge("dead")
    clock.advance(days=2)
    report = timed.gc()
    assert report.reasons == {"dead fork marker": 1}
    assert timed.info("p").forks == ["alive"]


def test_keep_count_keeps_the_newest_ephemeral_sessions_under_a_prefix(timed: Store, clock: Clock) -> None:
    for i in range(5):
        filled(timed, f"autosave-{i}", n=1, retention="ephemeral")
        clock.advance(minutes=1)
    filled(timed, "autosave-named", n=1)  # permanent: never counted
    filled(timed, "other-0", n=1, retention="ephemeral")
    report = timed.gc(keep=2, prefix="autosave-", grace=timedelta(0))
    assert report.sessions_deleted == 3 and report.sessions_removed == 0
    for i in range(3):
        with pytest.raises(SessionNotFoundError, match="was deleted"):
            timed.open(f"autosave-{i}")
    clock.advance(days=2)
    assert timed.gc(keep=2, prefix="autosave-").sessions_removed == 3  # past the fence hold
    assert sorted(timed.list_sessions()) == ["autosave-3", "autosave-4", "autosave-named", "other-0"]


def test_keep_ranks_and_deletes_only_sessions_older_than_the_grace(timed: Store, clock: Clock) -> None:
    """The grace holds for ``keep`` too: a session younger than it is neither deleted nor counted
    among the newest kept, so a burst of new sessions never pushes out the older ones it keeps."""
    for i in range(3):
        filled(timed, f"auto-old-{i}", n=1, retention="ephemeral")
        clock.advance(minutes=1)
    clock.advance(hours=2)
    for i in range(3):
        filled(timed, f"auto-new-{i}", n=1, retention="ephemeral")
        clock.advance(minutes=1)
    report = timed.gc(keep=1, prefix="auto-", grace=timedelta(hours=1))
    assert (report.sessions_deleted, report.kept_by_grace) == (2, 3)
    for name in ("auto-old-2", "auto-new-0", "auto-new-1", "auto-new-2"):
        assert len(list(timed.replay(name))) == 1
    for name in ("auto-old-0", "auto-old-1"):
        with pytest.raises(SessionNotFoundError, match="was deleted"):
            timed.open(name)
    nothing = timed.gc(keep=0, prefix="auto-new-")  # the default grace, a day: all of them are younger
    assert (nothing.sessions_deleted, nothing.kept_by_grace) == (0, 3)
    clock.advance(days=1)
    assert timed.gc(keep=0, prefix="auto-new-").sessions_deleted == 3  # older than the grace now


def test_preview_lists_what_the_rules_will_expire_by_a_date(timed: Store) -> None:
    filled(timed, "e", n=2, retention="ephemeral")
    filled(timed, "p", n=2)
    timed.apply_lifecycle(10)
    assert list(timed.preview_lifecycle(T0 + timedelta(days=5))) == []
    due = list(timed.preview_lifecycle(T0 + timedelta(days=11)))
    assert {d.session_id for d in due} == {"e"} and len(due) == 3
    assert all(d.expires == datetime(2026, 3, 12, tzinfo=UTC) for d in due)


def test_gc_streams_with_requests_about_list_pages_plus_batch_deletes() -> None:
    counting = CountingStore(MemoryStore())
    store = Store(counting, root="root", auto_compact=None)  # 40 objects per session: events and a manifest
    for i in range(30):
        filled(store, f"s{i:02d}", n=40)
    for i in range(0, 30, 2):
        store.delete(f"s{i:02d}") if i % 4 else store.backend.delete_many([store.layout.manifest_key(f"s{i:02d}")])
    counting.reset()
    report = store.gc(grace=timedelta(0), now=datetime.now(UTC) + FENCE_HOLD + timedelta(seconds=1))
    # 8 remnants of 40 events; 7 deleted sessions of 40 events, manifest, fence and tombstone
    assert report.objects_removed == 8 * 40 + 7 * 43
    assert counting.counts["DELETE"] == 2  # 614 keys fit one batch; the 7 tombstones go after it
    # the 1,245 objects in two pages of one flat listing (a range is split only per 2,000 listed), incomplete uploads
    assert counting.counts["LIST"] == 2 + 1
    assert counting.counts["GET"] == 2 * 7  # the deleted ones' manifests and tombstones (whose uid must match)
    assert report.requests == counting.total  # every request counted, the tombstones' GETs too


@pytest.mark.parametrize(
    ("text", "seconds"), [("90s", 90), ("15m", 900), ("12h", 43200), ("1d", 86400), ("2w", 1209600), ("30", 30)]
)
def test_durations(text: str, seconds: int) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("bad", ["", "x", "-1d", "1y", "1e9d"])
def test_bad_durations_and_dates_are_invalid_input(bad: str) -> None:
    from evstore import InvalidInputError

    with pytest.raises(InvalidInputError):
        parse_duration(bad)
    with pytest.raises(InvalidInputError):
        parse_time(bad or "not a date")
