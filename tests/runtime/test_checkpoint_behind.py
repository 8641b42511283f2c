"""A later attempt of a run that finds fewer commits than earlier attempts made refuses to start (issue 13, finding 2).

The operator passes what it saw committed (HEADRACE_EXPECTED_COMMITS); a driver that lands where the checkpoint is
not (another volume, a wiped or moved directory) exits with EXIT_CHECKPOINT_BEHIND instead of starting the stream
over from empty state and offsets.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from headrace.api import runtime_contract as contract

from .harness import RuntimeProcess, commits, write_events, write_sentinel

pytestmark = pytest.mark.spark


def _committed(process: RuntimeProcess) -> dict[str, int]:
    """What the operator records from the driver's status document: the last committed batch per query key."""
    code, status = process.request("GET", contract.PATH_STATUS, timeout=10)
    assert code == 200, status
    queries: list[dict[str, Any]] = status["queries"]
    return {
        query["key"]: query["lastCommittedBatchId"] for query in queries if query["lastCommittedBatchId"] is not None
    }


def test_an_attempt_that_finds_fewer_commits_refuses_to_start(tmp_path: Path) -> None:
    inputs, output, checkpoint = tmp_path / "in", tmp_path / "out", tmp_path / "checkpoints"
    write_events(inputs, 12, 20)
    write_sentinel(inputs, 12)
    args = ["--input", str(inputs), "--output", str(output), "--files-per-batch", "1"]
    env = {contract.ENV_CHECKPOINT_DIR: str(checkpoint), contract.ENV_STATE_PARTITIONS: "2"}

    first = RuntimeProcess(tmp_path, args, {**env, contract.ENV_ATTEMPT: "1"}, name="attempt1")
    try:
        first.start().wait_until(lambda: len(commits(checkpoint / "q0")) >= 2, 300, "two commits")
        first.wait_until(lambda: _committed(first).get("q0", -1) >= 1, 60, "the status reports two commits")
        seen = _committed(first)
    finally:
        first.kill()
    assert seen["q0"] >= 1

    # the same checkpoint: the attempt starts and goes on committing (no false refusal)
    expected = {contract.ENV_EXPECTED_COMMITS: json.dumps(seen)}
    second = RuntimeProcess(tmp_path, args, {**env, **expected, contract.ENV_ATTEMPT: "2"}, name="attempt2")
    try:
        second.start().wait_until(lambda: commits(checkpoint / "q0")[-1] > seen["q0"], 300, "a later commit")
        second.wait_until(lambda: _committed(second).get("q0", -1) > seen["q0"], 60, "the status reports it")
        seen = _committed(second)
    finally:
        second.kill()

    # the driver lands where the checkpoint is not: it refuses instead of starting over
    checkpoint.rename(tmp_path / "checkpoints-elsewhere")
    expected = {contract.ENV_EXPECTED_COMMITS: json.dumps(seen)}
    third = RuntimeProcess(tmp_path, args, {**env, **expected, contract.ENV_ATTEMPT: "3"}, name="attempt3")
    started = time.monotonic()
    try:
        code = third.start().wait(timeout=300)
    finally:
        third.kill()
    print(f"refused to start from an empty checkpoint in {time.monotonic() - started:.1f}s (expected q0 >= {seen})")
    assert code == contract.EXIT_CHECKPOINT_BEHIND, third.log()[-3000:]
    termination = third.termination()
    assert termination["reason"] == "CheckpointBehind"
    assert f"committed batch {seen['q0']}" in termination["message"] and "has no commits" in termination["message"]
    assert commits(checkpoint / "q0") == []  # nothing was processed


def test_a_new_checkpoint_refuses_an_output_whose_sink_log_is_ahead(tmp_path: Path) -> None:
    """The quick start re-run on a new cluster: a fresh checkpoint against an output path that keeps an earlier
    run's `_spark_metadata`. Spark's file sink would skip batches 0..N of the new checkpoint without running them
    (no output, no state); the runtime refuses to start instead, naming the sink and the fix."""
    inputs, output = tmp_path / "in", tmp_path / "out"
    write_events(inputs, 6, 20)
    args = ["--input", str(inputs), "--output", str(output), "--files-per-batch", "1"]
    env = {contract.ENV_STATE_PARTITIONS: "2", contract.ENV_ATTEMPT: "1"}

    earlier = RuntimeProcess(tmp_path, args, {**env, contract.ENV_CHECKPOINT_DIR: str(tmp_path / "c1")}, name="old")
    try:
        earlier.start().wait_until(lambda: len(commits(tmp_path / "c1" / "q0")) >= 2, 300, "two commits")
    finally:
        earlier.kill()
    logged = sorted(int(path.name) for path in (output / "_spark_metadata").iterdir() if path.name.isdigit())
    assert logged, "the earlier run logged batches in its sink"

    fresh = tmp_path / "c2"
    later = RuntimeProcess(tmp_path, args, {**env, contract.ENV_CHECKPOINT_DIR: str(fresh)}, name="new")
    try:
        code = later.start().wait(timeout=300)
    finally:
        later.kill()
    assert code == contract.EXIT_CHECKPOINT_BEHIND, later.log()[-3000:]
    termination = later.termination()
    assert termination["reason"] == "SinkAhead"
    assert str(output) in termination["message"] and "_spark_metadata" in termination["message"]
    assert commits(fresh / "q0") == []  # nothing was skipped: no batch ran
