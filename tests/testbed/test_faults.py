"""The chaos suite's pure parts: the fault schedule, finding a container's processes, the sink comparison."""

from __future__ import annotations

import signal
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest

from testbed import faults, sink


def test_a_round_holds_every_kind_once_and_a_seed_replays_the_schedule() -> None:
    schedule = faults.schedule(3, seed=7, pauses=(2.0, 8.0))
    rounds = [schedule[i : i + len(faults.KINDS)] for i in range(0, len(schedule), len(faults.KINDS))]
    assert len(rounds) == 3
    assert all(sorted(fault.kind for fault in part) == sorted(faults.KINDS) for part in rounds)
    assert all(2.0 <= fault.pause <= 8.0 for fault in schedule)
    assert faults.schedule(3, seed=7, pauses=(2.0, 8.0)) == schedule
    orders = {tuple(fault.kind for fault in faults.schedule(1, seed)) for seed in range(20)}
    assert len(orders) > 1, "the order must depend on the seed"


def test_container_processes_are_found_by_the_id_in_their_cgroup(tmp_path: Path) -> None:
    for pid, cgroup in ((10, "0::/kubepods/pod1/abc123\n"), (11, "0::/kubepods/pod1/def456\n"), (12, "")):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cgroup").write_text(cgroup)
    (tmp_path / "self").mkdir()
    (tmp_path / "13").mkdir()  # gone: no cgroup file
    assert faults.container_pids("abc123", tmp_path) == [10]


def test_signalling_a_container_without_processes_is_an_error_not_a_silent_no_op() -> None:
    with pytest.raises(RuntimeError, match="no process"):
        faults.signal_container("no-such-container-id-0123456789", signal.SIGSTOP)


def _rows(counts: dict[sink.Window, int]) -> list[tuple[sink.Window, int]]:
    return list(counts.items())


def test_the_sink_comparison_names_duplicated_wrong_and_missing_windows() -> None:
    expected = Counter(
        {("2026-11-21 12:00:00", "/"): 24, ("2026-11-21 12:01:00", "/"): 24, ("2026-11-21 12:02:00", "/"): 24}
    )
    good = sink.compare(_rows({("2026-11-21 12:00:00", "/"): 24}), expected, [("2026-11-21 12:00:00", "/")])
    assert good.ok and (good.windows, good.records) == (1, 24)
    rows = [(("2026-11-21 12:00:00", "/"), 24), (("2026-11-21 12:00:00", "/"), 24), (("2026-11-21 12:01:00", "/"), 23)]
    bad = sink.compare(rows, expected, list(expected))
    assert bad.duplicated == [("2026-11-21 12:00:00", "/")]
    assert bad.wrong == [(("2026-11-21 12:01:00", "/"), 23, 24)]
    assert bad.missing == [("2026-11-21 12:02:00", "/")]
    assert not bad.ok
    assert not sink.compare(_rows({("2026-11-21 13:00:00", "/"): 1}), expected, []).ok, "a window the input lacks"


def test_closed_windows_are_those_ending_a_watermark_before_the_last_event() -> None:
    expected = {("2026-11-21 12:00:00", "/"): 1, ("2026-11-21 12:01:00", "/"): 1, ("2026-11-21 12:02:00", "/"): 1}
    assert sink.closed_windows(expected, datetime(2026, 11, 21, 12, 2, 29)) == {("2026-11-21 12:00:00", "/")}
    assert sink.closed_windows(expected, datetime(2026, 11, 21, 12, 2, 30)) == {
        ("2026-11-21 12:00:00", "/"),
        ("2026-11-21 12:01:00", "/"),
    }


def test_after_a_fault_a_window_missing_behind_the_newest_is_lost_and_one_after_it_only_late() -> None:
    expected = {(f"2026-11-21 12:0{minute}:00", page): 24 for minute in range(4) for page in ("/", "/signup")}
    emitted = [((f"2026-11-21 12:0{minute}:00", page), 24) for minute in (0, 1) for page in ("/", "/signup")]

    lagging = sink.compare(emitted, expected, sink.emitted_by_now(expected, emitted))
    assert lagging.ok, "the app lags: 12:02 and 12:03 are late, not lost"
    lost = [row for row in emitted if row[0] != ("2026-11-21 12:00:00", "/signup")]
    check = sink.compare(lost, expected, sink.emitted_by_now(expected, lost))
    assert check.missing == [("2026-11-21 12:00:00", "/signup")], "missing behind the newest window: lost"
    assert sink.emitted_by_now(expected, []) == set()


def test_the_short_run_injects_every_kind_once_in_groups_and_a_seed_replays_their_order() -> None:
    groups = faults.grouped(seed=3, pauses=(0.5, 2.0))
    kinds = [kind for group in groups for kind in group.kinds]
    assert sorted(kinds) == sorted(faults.KINDS), "every kind exactly once"
    assert len(groups) < len(faults.KINDS), "some faults overlap"
    assert all(0.5 <= group.pause <= 2.0 for group in groups)
    assert faults.grouped(seed=3, pauses=(0.5, 2.0)) == groups
    assert len({tuple(group.kinds for group in faults.grouped(seed)) for seed in range(20)}) > 1
    drivers = {faults.DRIVER_POD_DELETED, faults.DRIVER_SIGKILL, faults.DRIVER_SIGSTOP}
    assert all(len(drivers & set(group.kinds)) <= 1 for group in groups), "one driver to act on per group"


def test_the_long_run_is_one_fault_per_group() -> None:
    schedule = faults.schedule(1, seed=5)
    assert [(group.kinds, group.pause) for group in faults.one_by_one(schedule)] == [
        ((fault.kind,), fault.pause) for fault in schedule
    ]
