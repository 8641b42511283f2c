"""The quick start example's commands (`testbed.example`): its arguments found in the spec, the newest windows."""

from __future__ import annotations

from pathlib import Path

from testbed import example

APP = {"spec": {"application": {"args": ["--source", "kafka", "--topic", "clicks", "--output", "file:///d/output"]}}}


def test_arguments_come_from_the_apps_spec() -> None:
    assert example.argument(APP, "--topic") == "clicks"
    assert example.local_path(example.argument(APP, "--output") or "") == Path("/d/output")
    assert example.argument(APP, "--input") is None
    assert example.argument({"spec": {}}, "--output") is None


def test_the_newest_windows_oldest_first() -> None:
    rows = [
        (("2026-11-27 10:02:00", "/b"), 3),
        (("2026-11-27 10:00:00", "/a"), 1),
        (("2026-11-27 10:02:00", "/a"), 2),
        (("2026-11-27 10:01:00", "/a"), 4),
    ]
    assert example.latest_windows(rows, 2) == [
        (("2026-11-27 10:01:00", "/a"), 4),
        (("2026-11-27 10:02:00", "/a"), 2),
        (("2026-11-27 10:02:00", "/b"), 3),
    ]
    assert example.latest_windows(rows, 0) == []
    assert "views" in example.table(rows).splitlines()[0]
