"""The Hadoop FileSystem adapter through a real SparkContext's JVM (local file system)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from headrace.runtime.hadoop_fs import HadoopFileSystem, MissingFileError

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
