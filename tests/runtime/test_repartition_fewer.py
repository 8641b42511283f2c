"""A savepoint after a repartition to fewer state partitions, with real Spark files.

Spark's offline repartition (12 -> 8 in the partition bench) writes the new partitions' state in a new batch and
leaves the dropped partitions' directories behind, with versions up to the repartition only. The savepoint's
selection must leave them out rather than refuse the checkpoint as incomplete (seen in the partition bench: the
change back to more partitions failed its savepoint three times).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from headrace.runtime.checkpoint_files import (
    IncompleteCheckpointError,
    last_committed_batch,
    partitions_from_offsets,
    select_committed_prefix,
)
from headrace.runtime.hadoop_fs import HadoopFileSystem
from headrace.runtime.restore import repartition_checkpoint
from headrace.runtime.sparkconf import ROCKSDB_PROVIDER

pytestmark = pytest.mark.spark

PROVIDER = "spark.sql.streaming.stateStore.providerClass"
SHUFFLE = "spark.sql.shuffle.partitions"


def test_a_savepoint_after_a_repartition_to_fewer_partitions_leaves_the_dropped_ones_out(
    tmp_path: Path, reader_spark: Any
) -> None:
    inputs, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    inputs.mkdir()
    for number in range(3):
        rows = [json.dumps({"key": f"k{key}"}) for key in range(8)]
        (inputs / f"{number:03d}.json").write_text("\n".join(rows) + "\n")
    saved = {name: reader_spark.conf.get(name, None) for name in (PROVIDER, SHUFFLE)}
    reader_spark.conf.set(PROVIDER, ROCKSDB_PROVIDER)
    reader_spark.conf.set(SHUFFLE, "4")
    try:
        stream = reader_spark.readStream.schema("key STRING").option("maxFilesPerTrigger", 1).json(str(inputs))
        counts = stream.groupBy("key").count().writeStream.format("memory").queryName("fewer").outputMode("complete")
        counts.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start().awaitTermination(300)
        assert (checkpoint / "state" / "0" / "3").is_dir()
        batch = repartition_checkpoint(reader_spark, str(checkpoint), 2)
    finally:
        for name, value in saved.items():
            reader_spark.conf.unset(name) if value is None else reader_spark.conf.set(name, value)
    fs = HadoopFileSystem.of_session(reader_spark)
    files = fs.list_files(str(checkpoint))
    assert last_committed_batch(files) == batch
    partitions = partitions_from_offsets((checkpoint / "offsets" / str(batch)).read_text())
    assert partitions == 2  # the repartition batch's offset log carries the new count
    assert any(path.startswith("state/0/3/") for path in files)  # left behind by Spark
    with pytest.raises(IncompleteCheckpointError, match=r"state/0/[23] has no state file"):
        select_committed_prefix(files, batch)  # what the savepoint did before it knew the partitions
    selected = [item.path for item in select_committed_prefix(files, batch, partitions)]
    assert not any(path.startswith(("state/0/2/", "state/0/3/")) for path in selected)
    assert any(path.startswith("state/0/1/") for path in selected)
