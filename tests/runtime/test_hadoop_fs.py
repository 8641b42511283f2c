"""The Hadoop FileSystem adapter through a real SparkContext's JVM (local file system)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from headrace.runtime.hadoop_fs import HadoopFileSystem, MissingFileError
from headrace.runtime.savepoint import (
    SavepointContext,
    SavepointError,
    SavepointSource,
    dispose_savepoint,
    take_savepoint,
)

pytestmark = pytest.mark.spark


def test_copy_files_lists_reads_and_reports_missing(tmp_path: Path, reader_spark: Any) -> None:
    fs = HadoopFileSystem.of_session(reader_spark)
    source, target = tmp_path / "source", tmp_path / "target"
    for relative in ("metadata", "offsets/0", "offsets/1", "state/0/0/1.changelog"):
        (source / relative).parent.mkdir(parents=True, exist_ok=True)
        (source / relative).write_text(f"content of {relative}")
    assert sorted(fs.list_files(str(source))) == ["metadata", "offsets/0", "offsets/1", "state/0/0/1.changelog"]
    missing = fs.copy_files(
        str(source), str(target), ["metadata", "offsets/0", "offsets/1", "offsets/7", "state/0/0/1.changelog"]
    )
    assert missing == ["offsets/7"]
    for relative in ("metadata", "offsets/0", "offsets/1", "state/0/0/1.changelog"):
        assert (target / relative).read_text() == f"content of {relative}"
    fs.write_text(str(target / "note"), "héllo")
    assert fs.read_text(str(target / "note")) == "héllo"
    with pytest.raises(MissingFileError):
        fs.read_text(str(target / "absent"))
    assert {"0", "1"} <= set(fs.list_names(str(target / "offsets")))
    assert fs.list_files(str(tmp_path / "absent")) == {}


@pytest.mark.parametrize(
    ("offsets", "commits", "sink", "message"),
    [
        (3, 2, 2, "the offsets log ends at batch 3 but the commits log at 2"),
        (2, 2, 3, "the file sink's log has batch 3 after the last committed batch 2"),
    ],
)
def test_stopped_savepoint_refuses_logs_off_a_batch_boundary(  # noqa: PLR0917 - one parameter per column
    tmp_path: Path, reader_spark: Any, offsets: int, commits: int, sink: int, message: str
) -> None:
    """No savepoint (and no partial copy) unless offsets == commits and the sink log is not ahead."""
    fs = HadoopFileSystem.of_session(reader_spark)
    checkpoint, output = tmp_path / "checkpoint", tmp_path / "out"
    for directory, last in ((checkpoint / "offsets", offsets), (checkpoint / "commits", commits)):
        directory.mkdir(parents=True)
        for batch in range(last + 1):
            (directory / str(batch)).write_text("v1")
    (output / "_spark_metadata").mkdir(parents=True)
    for batch in range(sink + 1):
        (output / "_spark_metadata" / str(batch)).write_text("v1")
    source = SavepointSource("q0", str(checkpoint), "id", "q0", str(output))
    context = SavepointContext("app", "ns", "r1", "4.3.0", "rocksdb", "upgrade", stopped=True)
    target = tmp_path / "savepoint"
    with pytest.raises(SavepointError, match=message):
        take_savepoint(fs, [source], str(target), context, lambda: datetime.now(UTC))
    assert not target.exists()


def test_dispose_deletes_only_a_direct_child_of_the_apps_savepoint_root(tmp_path: Path, reader_spark: Any) -> None:
    """disposeOnDelete in the driver: the savepoint's own directory goes; traversal, the root itself, a sibling
    app's directory and other schemes are refused before anything is deleted; deleting twice is fine."""
    fs = HadoopFileSystem.of_session(reader_spark)
    root = tmp_path / "savepoints" / "analytics" / "clicks"
    for directory in ("sp-1", "sp-2"):
        (root / directory / "counts" / "offsets").mkdir(parents=True)
        (root / directory / "_headrace_savepoint.json").write_text("{}")
    other_app = tmp_path / "savepoints" / "analytics" / "other" / "sp-1"
    other_app.mkdir(parents=True)
    root_uri = f"file://{root}/"
    refused = [
        f"file://{root}/sp-1/../sp-2",
        f"file://{root}/..",
        f"file://{root}/../other/sp-1",
        f"file://{root}",
        f"file://{root}/sp-2/counts",
        f"file://{other_app}",
        "s3a://bucket/savepoints/analytics/clicks/sp-1",
        f"file://{root}/sp-1\\..",
    ]
    for path in refused:
        with pytest.raises(SavepointError):
            dispose_savepoint(fs, root_uri, path)
    with pytest.raises(SavepointError, match="HEADRACE_SAVEPOINT_DIR"):
        dispose_savepoint(fs, None, f"file://{root}/sp-1")
    assert (root / "sp-1").is_dir() and (root / "sp-2" / "counts").is_dir() and other_app.is_dir()
    answer = dispose_savepoint(fs, root_uri, f"file://{root}/sp-1/")
    assert answer == {"path": f"file:{root}/sp-1", "deleted": True}
    assert not (root / "sp-1").exists() and (root / "sp-2").is_dir() and other_app.is_dir()
    assert dispose_savepoint(fs, root_uri, str(root / "sp-1"))["deleted"] is False  # idempotent
