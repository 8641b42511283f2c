"""The example's data directory on the machine (testbed/scenario.py), without a cluster."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from testbed import scenario


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory every ancestor of which the image's user can traverse (pytest's tmp_path is 0700)."""
    path = Path(tempfile.mkdtemp(prefix="headrace-scenario-", dir="/var/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path)


def test_a_second_quick_start_replaces_a_state_link_into_a_bucket_that_is_gone(open_dir: Path) -> None:
    tmp_path = open_dir
    root = tmp_path / "data"
    data = scenario.prepare_data_dir(root, "demo")
    (data / "state").rmdir()
    (data / "state").symlink_to(tmp_path / "bucket" / "demo" / "state", target_is_directory=True)  # make down

    again = scenario.prepare_data_dir(root, "demo")

    assert (again / "state").is_dir() and not (again / "state").is_symlink()


def test_a_state_link_into_a_live_bucket_is_kept(open_dir: Path) -> None:
    tmp_path = open_dir
    bucket_state = tmp_path / "bucket" / "demo" / "state"
    bucket_state.mkdir(parents=True)
    root = tmp_path / "data"
    data = scenario.prepare_data_dir(root, "demo")
    (data / "state").rmdir()
    (data / "state").symlink_to(bucket_state, target_is_directory=True)

    again = scenario.prepare_data_dir(root, "demo")

    assert (again / "state").is_symlink() and (again / "state").resolve() == bucket_state


def test_commit_listings_leave_out_an_entry_spark_purged_after_it_was_listed(tmp_path: Path) -> None:
    # Spark deletes a query's old commit-log entries while it runs (minBatchesToRetain): a listed entry may be gone
    # when its time is read. That raised FileNotFoundError out of the chaos run's recovery waits. A dangling link
    # is an entry that is listed and then not found, every time.
    commits = tmp_path / "state" / "run-1" / "query" / "commits"
    commits.mkdir(parents=True)
    for batch in ("1", "2"):
        (commits / batch).write_text("v1\n")
    (commits / "0").symlink_to(commits / "purged")
    app = scenario.AppHandle(client.ApiClient(), "chaos", tmp_path)

    assert [path.name for path in app.commits()] == ["1", "2"]
    assert [path.name for path in app.commits_after(0)] == ["1", "2"]
    assert app.commit_times_after(0) == sorted(path.stat().st_mtime for path in app.commits())
    assert [
        path.name for _, path in scenario.modified(scenario.query_log(tmp_path / "state" / "run-1", "commits"))
    ] == [
        "1",
        "2",
    ]
