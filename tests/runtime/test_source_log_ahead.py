"""A savepoint of a file-source query whose source log runs ahead of its batch ids restores and resumes.

A FileStreamSource numbers its log (``sources/0/<n>``) by its own log offsets, not by batch ids. A driver that
dies after the source logged the files of its next batch and before the offsets log recorded that batch leaves
an entry no batch refers to; the next driver keeps it and logs the newly arrived files after it, so from then on
batch ``B`` ends at log offset ``B + 1`` (seen on the e2e cluster after a driver was deleted or frozen and killed:
the restored run failed on every start with ``batch 32 doesn't exist``). Here that crash state is made exactly:
a batch's offsets and commit entries are removed after it ran, leaving its source log entry behind.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from headrace.runtime.hadoop_fs import HadoopFileSystem
from headrace.runtime.restore import copy_savepoint_query
from headrace.runtime.savepoint import SavepointContext, SavepointSource, take_savepoint

pytestmark = pytest.mark.spark


def _add_file(inputs: Path, index: int) -> None:
    lines = [json.dumps({"id": index * 10 + row}) for row in range(10)]
    (inputs / f"part-{index:03d}.json").write_text("\n".join(lines) + "\n")


def _run(spark: Any, inputs: Path, checkpoint: Path, output: Path) -> None:
    """Start the query on `checkpoint`, let it take every file present, stop it (between batches)."""
    frame = spark.readStream.schema("id INT").option("maxFilesPerTrigger", 1).json(str(inputs))
    query = (
        frame.writeStream.format("json")
        .option("path", str(output))
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        query.processAllAvailable()
        assert query.exception() is None, query.exception()
    finally:
        query.stop()


def _log_offset(checkpoint: Path, batch: int) -> int:
    return int(json.loads((checkpoint / "offsets" / str(batch)).read_text().splitlines()[2])["logOffset"])


def _remove_batch(checkpoint: Path, output: Path, batch: int) -> None:
    """The state a driver killed after its source logged batch `batch`'s files, before the offsets log had it
    (its output files stay, unlisted in the sink's log: readers of the sink never see them)."""
    for directory in (checkpoint / "offsets", checkpoint / "commits", output / "_spark_metadata"):
        for name in (str(batch), f".{batch}.crc"):
            (directory / name).unlink(missing_ok=True)


def test_a_source_log_ahead_of_the_batch_ids_is_savepointed_whole(tmp_path: Path, reader_spark: Any) -> None:
    inputs, checkpoint, output = tmp_path / "in", tmp_path / "r1", tmp_path / "out"
    inputs.mkdir()
    for index in range(3):
        _add_file(inputs, index)
    _run(reader_spark, inputs, checkpoint, output)  # batches 0..2, log offsets 0..2
    _remove_batch(checkpoint, output, 2)  # sources/0/2 is left: no batch refers to it
    _add_file(inputs, 3)
    _run(reader_spark, inputs, checkpoint, output)  # batch 2 takes log offsets 2 and 3
    for index in range(4, 6):
        _add_file(inputs, index)
    _run(reader_spark, inputs, checkpoint, output)  # batches 3, 4 end at log offsets 4, 5
    last = max(int(name.name) for name in (checkpoint / "commits").iterdir() if name.name.isdigit())
    assert _log_offset(checkpoint, last) == last + 1, "the source log is not ahead of the batch ids"

    fs = HadoopFileSystem.of_session(reader_spark)
    source = SavepointSource("q0", str(checkpoint), "id", "q0", str(output))
    context = SavepointContext("app", "ns", "r1", reader_spark.version, "hdfs", "upgrade", stopped=True)
    savepoint = tmp_path / "savepoint"
    record = take_savepoint(fs, [source], str(savepoint), context, lambda: datetime.now(UTC))
    assert record["queries"][0]["batchId"] == last
    assert (savepoint / "q0" / "sources" / "0" / str(last + 1)).exists(), "the savepoint lost the source log's end"

    restored = tmp_path / "r2"
    assert copy_savepoint_query(fs, str(savepoint / "q0"), str(restored), {"savepoint": str(savepoint)})
    _add_file(inputs, 6)
    _run(reader_spark, inputs, restored, output)  # fails on main: "batch <last + 1> doesn't exist"
    ids = [row.id for row in reader_spark.read.json(str(output)).collect()]
    assert sorted(ids) == list(range(70)), "the sink does not hold every input row exactly once"
