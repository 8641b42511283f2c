"""A warm standby driver (issue 14, item 3): it runs the script up to its first query start and waits there,
JVM and SparkContext up, touching nothing, until promoted; then it takes over the checkpoint exactly once.

Real PySpark in local mode: an active attempt commits, a standby of the next attempt waits beside it on the same
checkpoint, the active is SIGKILLed (the operator's fence), the standby is promoted and goes on; a final bounded
attempt drains the input and the sink must hold every window exactly once.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from headrace.api import runtime_contract as contract

from .harness import RuntimeProcess, commits, finish_bounded, write_events, write_sentinel
from .test_exactly_once_kill import expected_rows, sink_rows

pytestmark = pytest.mark.spark

FILES, EVENTS_PER_FILE = 12, 20


def _status(process: RuntimeProcess) -> dict[str, Any]:
    code, status = process.request("GET", contract.PATH_STATUS, timeout=10)
    assert code == 200, status
    return status


def _at_gate(process: RuntimeProcess) -> bool:
    try:
        code, status = process.request("GET", contract.PATH_STATUS, timeout=10)
    except OSError:  # its control endpoint is not up yet
        return False
    return code == 200 and status.get("atGate") is True


def test_a_standby_waits_warm_and_takes_over_exactly_once(tmp_path: Path, reader_spark: Any) -> None:
    inputs, output, checkpoint = tmp_path / "in", tmp_path / "out", tmp_path / "checkpoints"
    write_events(inputs, FILES // 2, EVENTS_PER_FILE)  # the rest arrives once the standby is promoted
    args = ["--input", str(inputs), "--output", str(output), "--files-per-batch", "1"]
    env = {contract.ENV_CHECKPOINT_DIR: str(checkpoint), contract.ENV_STATE_PARTITIONS: "2"}
    active = RuntimeProcess(tmp_path, args, {**env, contract.ENV_ATTEMPT: "1"}, name="active")
    standby_env = {**env, contract.ENV_ATTEMPT: "2", contract.ENV_STANDBY: "true"}
    standby = RuntimeProcess(tmp_path, args, standby_env, name="standby")
    try:
        active.start().wait_until(lambda: len(commits(checkpoint / "q0")) >= 2, 300, "two commits")
        standby.start().wait_until(lambda: "waiting to be promoted" in standby.log(), 300, "the standby's gate")
        status = _status(standby)
        assert status["phase"] == "Standby"
        assert status["queries"] == []
        assert contract.PHASE_SPARK_CONTEXT_READY in status["phases"]  # warm: the script's session is up
        assert contract.PHASE_QUERIES_STARTED not in status["phases"]
        # warmed up first (a synthetic query in a scratch directory), then it waits: nothing of it in the checkpoint
        assert contract.PHASE_WARMED_UP in status["phases"]
        warmed = re.search(
            r"standby: warm-up ran (\d+) micro-batches in [\d.]+ s \((\w+); scratch (\S+) removed", standby.log()
        )
        assert warmed is not None and warmed[2] in ("done", "timeout"), standby.log()[-3000:]
        assert not Path(warmed[3]).exists()
        assert sorted(path.name for path in checkpoint.iterdir()) == ["q0"]  # the active driver's one query
        code, refused = standby.request("POST", contract.PATH_STOP_WITH_SAVEPOINT, {}, timeout=10)
        assert code == 409, refused
        code, refused = standby.request("POST", contract.PATH_SAVEPOINT, {"path": str(tmp_path / "sp")}, timeout=10)
        assert code == 409, refused

        active.kill()  # the operator's fence: the active driver is gone before the standby is promoted
        last = commits(checkpoint / "q0")[-1]
        promoted_at = time.monotonic()
        assert standby.request("POST", contract.PATH_PROMOTE, timeout=10) == (
            200,
            {"promoted": True, "phase": "Starting"},
        )
        write_events(inputs, FILES - FILES // 2, EVENTS_PER_FILE, first=FILES // 2)
        write_sentinel(inputs, FILES)
        standby.wait_until(lambda: commits(checkpoint / "q0")[-1] > last, 120, "a commit by the promoted standby")
        took = time.monotonic() - promoted_at
        code, again = standby.request("POST", contract.PATH_PROMOTE, timeout=10)
        assert (code, again["promoted"]) == (200, False)  # idempotent
        status = _status(standby)
        assert status["phase"] == "Running" and status["attempt"] == 2
        assert contract.PHASE_PROMOTED in status["phases"]
        print(f"promotion -> first commit of the standby: {took:.2f}s (local mode)")
    finally:
        active.kill()
        standby.kill()
    finish_bounded(tmp_path, args, env)
    assert sink_rows(reader_spark, output) == expected_rows(FILES, EVENTS_PER_FILE)


def test_a_standby_ends_on_sigterm_while_it_waits(tmp_path: Path) -> None:
    inputs, checkpoint = tmp_path / "in", tmp_path / "checkpoints"
    write_events(inputs, 2, 5)
    args = ["--input", str(inputs), "--output", str(tmp_path / "out")]
    env = {
        contract.ENV_CHECKPOINT_DIR: str(checkpoint),
        contract.ENV_STANDBY: "true",
        # a pre-warmed upgrade's whose running checkpoint cannot be read now: compared later, not refused
        contract.ENV_PREWARM_CHECKPOINT: "nosuchfs://nowhere/r1",
    }
    standby = RuntimeProcess(tmp_path, args, env, name="standby")
    try:
        standby.start().wait_until(lambda: "waiting to be promoted" in standby.log(), 300, "the standby's gate")
        assert "could not compare query q0 with the running driver's checkpoint nosuchfs://nowhere/r1" in standby.log()
        assert standby.process is not None
        standby.process.terminate()
        assert standby.wait(timeout=30) == contract.EXIT_FAILED
    finally:
        standby.kill()
    assert standby.termination()["reason"] == "Terminated"
    assert not checkpoint.exists()  # it never touched the checkpoint


def test_a_pre_warmed_upgrade_restores_the_savepoint_it_is_handed_at_promotion(
    tmp_path: Path, reader_spark: Any
) -> None:
    """Issue 14 item 4: the new run's driver waits warm at its gate (atGate) while the old run processes; the old
    one stops with a savepoint; promoted with that savepoint, the new driver restores it into its own checkpoint and
    goes on; the sink holds every window exactly once."""
    inputs, output = tmp_path / "in", tmp_path / "out"
    old_checkpoint, new_checkpoint = tmp_path / "r1", tmp_path / "r2"
    write_events(inputs, FILES // 2, EVENTS_PER_FILE)
    args = ["--input", str(inputs), "--output", str(output), "--files-per-batch", "1"]
    common = {contract.ENV_STATE_PARTITIONS: "2"}
    old = RuntimeProcess(tmp_path, args, {**common, contract.ENV_CHECKPOINT_DIR: str(old_checkpoint)}, name="old")
    new_env = {
        **common,
        contract.ENV_CHECKPOINT_DIR: str(new_checkpoint),
        contract.ENV_STANDBY: "true",
        contract.ENV_PREWARM_CHECKPOINT: str(old_checkpoint),  # compared at the gate: the same query, compatible
    }
    new = RuntimeProcess(tmp_path, args, new_env, name="new")
    try:
        old.start().wait_until(lambda: commits(old_checkpoint / "q0"), 300, "a commit by the old driver")
        new.start().wait_until(lambda: _at_gate(new), 300, "the new driver at its gate")
        assert f"query q0 can read the state of the running driver's checkpoint {old_checkpoint}" in new.log()
        old.wait_until(lambda: len(commits(old_checkpoint / "q0")) >= 2, 300, "two commits by the old driver")
        assert _status(new)["queries"] == [] and not new_checkpoint.exists()  # warm, nothing written
        code, record = old.request("POST", contract.PATH_STOP_WITH_SAVEPOINT, {"path": str(tmp_path / "sp")})
        assert code == 200, record
        assert old.wait(timeout=120) == contract.EXIT_OK
        stopped_at = time.monotonic()
        body = {"restoreFrom": record["path"], "allowRepartition": True}
        assert new.request("POST", contract.PATH_PROMOTE, body, timeout=10) == (
            200,
            {"promoted": True, "phase": "Starting"},
        )
        write_events(inputs, FILES - FILES // 2, EVENTS_PER_FILE, first=FILES // 2)
        write_sentinel(inputs, FILES)
        restored = record["queries"][0]["batchId"]
        new.wait_until(lambda: max(commits(new_checkpoint / "q0"), default=-1) > restored, 120, "a commit after it")
        took = time.monotonic() - stopped_at
        status = _status(new)
        assert status["restoredFrom"] == record["path"] and status["atGate"] is False
        print(f"old driver stopped -> first commit of the pre-warmed driver: {took:.2f}s (local mode)")
    finally:
        old.kill()
        new.kill()
    finish_bounded(tmp_path, args, {**common, contract.ENV_CHECKPOINT_DIR: str(new_checkpoint)})
    assert sink_rows(reader_spark, output) == expected_rows(FILES, EVENTS_PER_FILE)
