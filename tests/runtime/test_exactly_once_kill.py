"""SIGKILL the driver (and its JVM) at random points; the file sink must stay exactly-once."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import pytest

from headrace.api import runtime_contract as contract

from .harness import RuntimeProcess, commits, expected_counts, finish_bounded, write_events, write_sentinel

pytestmark = pytest.mark.spark

FILES, EVENTS_PER_FILE, KILLS = 16, 40, 2


def sink_rows(spark: Any, output: Path) -> list[tuple[float, str, int]]:
    """The sink's committed rows, read through Spark (which follows ``_spark_metadata``)."""
    return sorted((row.window_start, row.key, row["count"]) for row in spark.read.parquet(str(output)).collect())


def expected_rows(files: int, events_per_file: int) -> list[tuple[float, str, int]]:
    return sorted((window, key, count) for (window, key), count in expected_counts(files, events_per_file).items())


def test_sigkill_at_random_points_keeps_the_sink_exact(tmp_path: Path, reader_spark: Any) -> None:
    seed = random.randrange(1_000_000)  # noqa: S311 - test randomness, printed on failure
    chooser = random.Random(seed)  # noqa: S311
    inputs, output, checkpoint = tmp_path / "in", tmp_path / "out", tmp_path / "checkpoints"
    write_events(inputs, FILES, EVENTS_PER_FILE)
    write_sentinel(inputs, FILES)
    args = ["--input", str(inputs), "--output", str(output), "--files-per-batch", "1"]
    env = {contract.ENV_CHECKPOINT_DIR: str(checkpoint), contract.ENV_STATE_PARTITIONS: "2"}
    killed_after = []
    for attempt in range(1, KILLS + 1):
        process = RuntimeProcess(tmp_path, args, {**env, contract.ENV_ATTEMPT: str(attempt)}, name=f"attempt{attempt}")
        try:
            process.start()
            target = len(commits(checkpoint / "q0")) + chooser.randint(1, 3)
            process.wait_until(lambda target=target: len(commits(checkpoint / "q0")) >= target, 300, "commits")
            time.sleep(chooser.uniform(0.0, 1.5))  # land anywhere in the next batch
        finally:
            process.kill()
        killed_after.append(commits(checkpoint / "q0")[-1])
    final = finish_bounded(tmp_path, args, env)
    assert final.termination()["reason"] == "Completed"
    assert sink_rows(reader_spark, output) == expected_rows(FILES, EVENTS_PER_FILE), (
        f"seed {seed}, killed after batches {killed_after}"
    )
