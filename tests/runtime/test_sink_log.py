"""The file-sink log entry a repartition adds for its batch, read back by real Spark.

A repartition writes batch N+1 into the checkpoint, which Spark's file sink never logs; the runtime adds that
entry (`restore.repartition_checkpoint`). When N+1 is a compaction batch, the entry must be `<N+1>.compact` listing
every earlier file: a plain `<N+1>` failed the next compaction (BATCH_METADATA_NOT_FOUND, seen in the partition
bench), and an empty compaction would hide the earlier output from every reader of the sink.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from headrace.runtime.checkpoint_files import sink_log_filler
from headrace.runtime.restore import COMPACT_INTERVAL_CONF

pytestmark = pytest.mark.spark

FILES, ROWS_PER_FILE, INTERVAL = 14, 3, 5


def test_a_compaction_batch_filled_in_keeps_every_earlier_file_visible(tmp_path: Path, reader_spark: Any) -> None:
    inputs, sink, checkpoint = tmp_path / "in", tmp_path / "sink", tmp_path / "checkpoint"
    inputs.mkdir()
    for number in range(FILES):
        rows = [json.dumps({"file": number, "row": row}) for row in range(ROWS_PER_FILE)]
        (inputs / f"{number:03d}.json").write_text("\n".join(rows) + "\n")
    previous = reader_spark.conf.get(COMPACT_INTERVAL_CONF, None)
    reader_spark.conf.set(COMPACT_INTERVAL_CONF, str(INTERVAL))
    try:
        stream = reader_spark.readStream.schema("file INT, row INT").option("maxFilesPerTrigger", 1).json(str(inputs))
        writer = stream.writeStream.format("parquet").option("checkpointLocation", str(checkpoint))
        writer.trigger(availableNow=True).start(str(sink)).awaitTermination(300)
        log = sink / "_spark_metadata"
        names = sorted(path.name for path in log.iterdir() if not path.name.startswith("."))
        assert "4.compact" in names and "9.compact" in names and "13" in names  # batches 0..13, compacting by 5
        name, content = sink_log_filler(FILES, INTERVAL, names, lambda entry: (log / entry).read_text())
        assert name == f"{FILES}.compact"  # batch 14: (14 + 1) % 5 == 0
        (log / name).write_text(content)
        assert reader_spark.read.parquet(str(sink)).count() == FILES * ROWS_PER_FILE  # read through the log
        plain, empty = sink_log_filler(FILES + 1, INTERVAL, [*names, name], lambda entry: (log / entry).read_text())
        assert (plain, empty) == (str(FILES + 1), "v1")
    finally:
        if previous is None:
            reader_spark.conf.unset(COMPACT_INTERVAL_CONF)
        else:
            reader_spark.conf.set(COMPACT_INTERVAL_CONF, previous)
