"""Savepoints while running, stop-with-savepoint, restores (plain, repartitioned, refused).

The steps are module-scoped fixtures, each one runtime process, chained as a user would:
run -> savepoint A while running -> SIGKILL -> restore A -> stop-with-savepoint B -> restore B
(same sink, bounded: the final output equals an uninterrupted run's), restore B repartitioned into
a new sink, and restores that must be refused before any batch runs.
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from headrace.api import runtime_contract as contract

from .harness import TOKEN, RuntimeProcess, commits, expected_counts, write_events, write_sentinel

pytestmark = pytest.mark.spark

# One file per batch. The restored run needs savepoint A's batch + 4 within the input; A falls near batch 10.
FILES, EVENTS_PER_FILE = 30, 30
LOCAL_CLUSTER = "local-cluster[2,1,1024]"  # a standalone master with two workers: executors can change


@dataclass
class Workspace:
    root: Path
    savepoints: dict[str, dict[str, Any]] = field(default_factory=dict)
    observations: dict[str, Any] = field(default_factory=dict)

    @property
    def inputs(self) -> Path:
        return self.root / "in"

    def args(self, sink: str, variant: str = "window") -> list[str]:
        output = self.root / sink
        return ["--input", str(self.inputs), "--output", str(output), "--files-per-batch", "1", "--variant", variant]

    def env(self, run: str, **extra: str) -> dict[str, str]:
        return {
            contract.ENV_CHECKPOINT_DIR: str(self.root / run),
            contract.ENV_SAVEPOINT_DIR: str(self.root / "savepoints"),
            contract.ENV_STATE_PARTITIONS: "2",
            contract.ENV_APP_NAME: "counts",
            contract.ENV_RUN_ID: run,
            "SPARK_CONF_DIR": str(self.root / "conf"),
            **extra,
        }

    def process(self, run: str, sink: str, variant: str = "window", **extra: str) -> RuntimeProcess:
        return RuntimeProcess(self.root, self.args(sink, variant), self.env(run, **extra), name=run)


def sink_rows(spark: Any, output: Path) -> list[tuple[float, str, int]]:
    return sorted((row.window_start, row.key, row["count"]) for row in spark.read.parquet(str(output)).collect())


def sink_rows_up_to(spark: Any, output: Path, batch: int) -> list[tuple[float, str, int]]:
    """Rows the sink committed in batches 0..batch, through its ``_spark_metadata`` log entries.

    Every tenth entry (9, 19, ...) is written compacted, as ``<n>.compact``: it lists the files of every
    batch up to n, so it replaces what was read before it."""
    log = output / "_spark_metadata"
    files: list[str] = []
    for entry in range(batch + 1):
        compacted = log / f"{entry}.compact"
        if compacted.exists():
            files = []
        lines = (compacted if compacted.exists() else log / str(entry)).read_text().splitlines()[1:]
        files += [json.loads(line)["path"] for line in lines if line.strip()]
    if not files:
        return []
    return sorted((row.window_start, row.key, row["count"]) for row in spark.read.parquet(*files).collect())


def combined(*parts: list[tuple[float, str, int]]) -> list[tuple[float, str, int]]:
    total: Counter[tuple[float, str, int]] = Counter()
    for part in parts:
        total.update(part)
    return sorted(total.elements())


def expected_rows() -> list[tuple[float, str, int]]:
    return sorted((window, key, count) for (window, key), count in expected_counts(FILES, EVENTS_PER_FILE).items())


def commit_times(checkpoint: Path) -> list[float]:
    return [os.path.getmtime(checkpoint / "commits" / str(batch)) for batch in commits(checkpoint)]


def cadence_gaps(times: list[float], start: float, end: float) -> tuple[list[float], list[float]]:
    """Gaps between consecutive commits: those overlapping [start, end], and the others."""
    during, outside = [], []
    for before, after in itertools.pairwise(times):
        (during if before < end and after > start else outside).append(after - before)
    return during, outside


def registered_executors(process: RuntimeProcess) -> int | None:
    return process.request("GET", contract.PATH_STATUS)[1]["executors"]["registered"]  # type: ignore[no-any-return]


def rescale(process: RuntimeProcess, executors: int) -> tuple[int, int | None]:
    """Ask for ``executors``; return the HTTP status and how many registered within two minutes."""
    status, _ = process.request("POST", contract.PATH_RESCALE, {"executors": executors})
    deadline = time.monotonic() + 120
    while status == 200 and registered_executors(process) != executors and time.monotonic() < deadline:
        time.sleep(1)
    return status, registered_executors(process)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    root = tmp_path_factory.mktemp("savepoints")
    write_events(root / "in", FILES, EVENTS_PER_FILE)
    # As the operator mounts it; frequent RocksDB snapshots so savepoints hold .zip snapshots too.
    (root / "conf").mkdir()
    (root / "conf" / "spark-defaults.conf").write_text(
        "spark.sql.streaming.stateStore.maintenanceInterval 1s\nspark.sql.streaming.stateStore.minDeltasForSnapshot 2\n"
    )
    return Workspace(root)


@pytest.fixture(scope="module")
def first_run(workspace: Workspace) -> Workspace:
    """Run, probe the endpoints, savepoint A while running, keep running, then SIGKILL."""
    process = workspace.process("r1", "sink", HEADRACE_LOCAL_MASTER=LOCAL_CLUSTER)
    checkpoint = workspace.root / "r1" / "q0"
    try:
        process.start()
        process.wait_until(lambda: len(commits(checkpoint)) >= 3, 300, "three commits")
        observed = workspace.observations
        observed["rescale"] = [rescale(process, 1)]
        observed["rescaled_to_2_at"] = time.time()
        observed["rescale"].append(rescale(process, 2))
        observed["no_token"] = process.request("GET", contract.PATH_STATUS, token=None)[0]
        observed["wrong_token"] = process.request("POST", contract.PATH_SAVEPOINT, {}, token="not-" + TOKEN)[0]
        observed["status"] = process.request("GET", contract.PATH_STATUS)
        observed["metrics"] = process.metrics()
        # The rejoined executor's first tasks are slow (cold JVM): let them pass, so the gaps measured
        # around the savepoint are the savepoint's, not the rescale's.
        settled = len(commits(checkpoint)) + 3
        process.wait_until(lambda: len(commits(checkpoint)) >= settled, 300, "commits after the rescale")
        started = time.time()
        observed["savepoint_status"], workspace.savepoints["A"] = process.request(
            "POST", contract.PATH_SAVEPOINT, {"reason": "manual"}
        )
        observed["savepoint_window"] = (started, time.time())
        saved_batch = workspace.savepoints["A"]["queries"][0]["batchId"]
        process.wait_until(lambda: len(commits(checkpoint)) >= saved_batch + 4, 300, "commits after savepoint")
        observed["commit_times"] = commit_times(checkpoint)
        # disposeOnDelete's call: a throwaway savepoint is deleted, paths outside the root are refused
        _, disposable = process.request("POST", contract.PATH_SAVEPOINT, {"reason": "manual"})
        dispose = contract.PATH_DISPOSE_SAVEPOINT
        observed["dispose_refused"] = [
            process.request("POST", dispose, {"path": path})[0]
            for path in (str(workspace.root / "r1"), disposable["path"] + "/../..", str(workspace.root / "savepoints"))
        ]
        observed["dispose_existed"] = Path(disposable["path"].removeprefix("file:")).is_dir()
        observed["dispose"] = process.request("POST", dispose, {"path": disposable["path"]})
        observed["dispose_again"] = process.request("POST", dispose, {"path": disposable["path"]})
        observed["dispose_left"] = Path(disposable["path"].removeprefix("file:")).exists()
    finally:
        process.kill()
    return workspace


@pytest.fixture(scope="module")
def stopped_run(first_run: Workspace, reader_spark: Any) -> Workspace:
    """Restore A into a new sink, run three more batches, then stop-with-savepoint B."""
    workspace = first_run
    process = workspace.process("r2", "sink2", **{contract.ENV_RESTORE_FROM: workspace.savepoints["A"]["path"]})
    checkpoint = workspace.root / "r2" / "q0"
    restored_batch = workspace.savepoints["A"]["queries"][0]["batchId"]
    try:
        process.start()
        process.wait_until(lambda: len(commits(checkpoint)) >= restored_batch + 4, 300, "commits after restore")
        workspace.observations["rescale_local"] = process.request("POST", contract.PATH_RESCALE, {"executors": 3})
        status, record = process.request("POST", contract.PATH_STOP_WITH_SAVEPOINT, {"reason": "upgrade"})
        workspace.observations["stop_status"] = status
        workspace.observations["stop_exit"] = process.wait(timeout=120)
        workspace.observations["stop_termination"] = process.termination()
        workspace.savepoints["B"] = record
    finally:
        process.kill()
    workspace.observations["sink1_up_to_A"] = sink_rows_up_to(reader_spark, workspace.root / "sink", restored_batch)
    workspace.observations["sink2_at_B"] = sink_rows(reader_spark, workspace.root / "sink2")
    return workspace


@pytest.fixture(scope="module")
def sentinel(workspace: Workspace) -> None:
    write_sentinel(workspace.inputs, FILES)


@pytest.fixture(scope="module")
def restores(stopped_run: Workspace, sentinel: None) -> dict[str, tuple[int, RuntimeProcess]]:
    """Every restore of A and B at once (independent checkpoints and sinks); exit code per run."""
    workspace = stopped_run
    savepoint_a, savepoint_b = workspace.savepoints["A"]["path"], workspace.savepoints["B"]["path"]
    bounded = {contract.ENV_MODE: "bounded"}
    processes = {
        # B (stop-with-savepoint) into the sink it was taken with, run to the end.
        "r3": workspace.process("r3", "sink2", **{contract.ENV_RESTORE_FROM: savepoint_b, **bounded}),
        # B repartitioned 2 -> 3 into a new sink.
        "r4": workspace.process(
            "r4",
            "sink-r4",
            **{
                contract.ENV_RESTORE_FROM: savepoint_b,
                contract.ENV_STATE_PARTITIONS: "3",
                contract.ENV_ALLOW_REPARTITION: "true",
                **bounded,
            },
        ),
        # Refusals: partitions changed without permission; stateful operator changed; A into the
        # first run's sink, which committed batches after A.
        "r5": workspace.process(
            "r5", "sink-r5", **{contract.ENV_RESTORE_FROM: savepoint_b, contract.ENV_STATE_PARTITIONS: "3"}
        ),
        "r6": workspace.process("r6", "sink-r6", "dedupe", **{contract.ENV_RESTORE_FROM: savepoint_b}),
        "r7": workspace.process("r7", "sink", **{contract.ENV_RESTORE_FROM: savepoint_a}),
        # A pre-warmed upgrade's driver whose first query changed its stateful operator: refused at its gate,
        # against the checkpoint of the driver still running (here r2's), never waiting there.
        "r8": workspace.process(
            "r8",
            "sink-r8",
            "dedupe",
            **{contract.ENV_STANDBY: "true", contract.ENV_PREWARM_CHECKPOINT: str(workspace.root / "r2")},
        ),
    }
    try:
        for process in processes.values():
            process.start()
        return {run: (process.wait(timeout=900), process) for run, process in processes.items()}
    finally:
        for process in processes.values():
            process.kill()


def test_dispose_deletes_a_savepoint_directory_only_under_the_savepoint_root(first_run: Workspace) -> None:
    observed = first_run.observations
    assert observed["dispose_refused"] == [400, 400, 400]  # another directory, traversal, the root itself
    assert observed["dispose_existed"] is True
    status, answer = observed["dispose"]
    assert status == 200 and answer["deleted"] is True
    assert observed["dispose_again"][0] == 200 and observed["dispose_again"][1]["deleted"] is False
    assert observed["dispose_left"] is False
    assert (first_run.root / "r1" / "q0" / "commits").is_dir()  # the refused paths are untouched
    assert Path(first_run.savepoints["A"]["path"].removeprefix("file:")).is_dir()


def test_control_endpoint_refuses_missing_or_wrong_token(first_run: Workspace) -> None:
    assert first_run.observations["no_token"] == 401
    assert first_run.observations["wrong_token"] == 401
    status_code, status = first_run.observations["status"]
    assert status_code == 200
    [query] = status["queries"]
    assert query["key"] == "q0"
    assert query["checkpoint"].endswith("r1/q0")
    assert query["lastCommittedBatchId"] >= 0
    assert query["progress"]["state_rows"] > 0
    assert {"requested", "registered"} <= status["executors"].keys()


def test_status_reports_the_autoscalers_signals(first_run: Workspace) -> None:
    """Batch totals, the trigger, the executors' cores and since when they are registered (after the rescale)."""
    observed = first_run.observations
    _, status = observed["status"]
    [query] = status["queries"]
    totals, progress = query["totals"], query["progress"]
    assert totals["batches"] >= 3 and totals["inputRows"] >= progress["input_rows"] > 0
    assert totals["busySeconds"] >= progress["duration_ms"] / 1000 > 0
    assert query["triggerIntervalSeconds"] == 0.0, "the job sets no trigger: batches run back to back"
    assert (progress["state_operators"], progress["source_partitions"]) == (1, None)  # a file source
    executors = status["executors"]
    assert (executors["registered"], executors["cores"]) == (2, 2)  # local-cluster[2,1,1024]
    since = datetime.fromisoformat(executors["registeredSince"].replace("Z", "+00:00")).timestamp()
    assert observed["rescaled_to_2_at"] - 1 <= since <= time.time()


def test_metrics_endpoint_has_the_series(first_run: Workspace) -> None:
    text = first_run.observations["metrics"]
    for series in (
        'headrace_query_input_rows_per_second{query="q0"}',
        'headrace_query_processed_rows_per_second{query="q0"}',
        'headrace_query_batch_duration_seconds{query="q0"}',
        'headrace_query_last_committed_batch_id{query="q0"}',
        'headrace_query_watermark_lag_seconds{query="q0"}',
        'headrace_query_state_rows{query="q0"}',
        'headrace_query_state_memory_bytes{query="q0"}',
        'headrace_query_batches_total{query="q0"}',
        'headrace_runtime_savepoints_total{result="failure"} 0.0',
    ):
        assert series in text


def test_savepoint_while_running_does_not_pause_batches(first_run: Workspace) -> None:
    observed = first_run.observations
    assert observed["savepoint_status"] == 200, first_run.savepoints["A"]
    record = first_run.savepoints["A"]
    assert not record["stopped"]
    assert record["queries"][0]["operators"] == [{"id": 0, "name": "stateStoreSave", "partitions": 2}]
    metadata = json.loads((Path(record["path"].removeprefix("file:")) / contract.SAVEPOINT_METADATA_FILE).read_text())
    assert metadata["queries"][0]["batchId"] == record["queries"][0]["batchId"]
    during, outside = cadence_gaps(observed["commit_times"], *observed["savepoint_window"])
    print(f"savepoint {record['durationSeconds']} s; gaps during {during}, median outside {statistics.median(outside)}")
    assert max(during, default=0.0) <= 2.5 * statistics.median(outside) + 1.0


def test_stop_with_savepoint_exits_0_at_a_batch_boundary(stopped_run: Workspace) -> None:
    observed = stopped_run.observations
    assert observed["stop_status"] == 200
    assert observed["stop_exit"] == contract.EXIT_OK
    assert observed["stop_termination"]["reason"] == "StoppedWithSavepoint"
    record = stopped_run.savepoints["B"]
    assert record["stopped"]
    query = Path(record["path"].removeprefix("file:")) / "q0"
    offsets = max(int(name) for name in os.listdir(query / "offsets") if name.isdigit())
    assert offsets == record["queries"][0]["batchId"] == max(commits(query))
    assert list(query.glob("state/0/*/*.zip")), "the savepoint should include RocksDB snapshots"


def test_rescale_changes_executors_in_place(first_run: Workspace, stopped_run: Workspace) -> None:
    assert first_run.observations["rescale"] == [(200, 1), (200, 2)]
    status, body = stopped_run.observations["rescale_local"]
    assert status == 409
    assert "does not support changing executors" in body["error"]


def test_restored_runs_give_the_output_of_an_uninterrupted_run(
    stopped_run: Workspace, restores: dict[str, tuple[int, RuntimeProcess]], reader_spark: Any
) -> None:
    """A (taken while running) restored into a new sink, then B (stop) restored into that sink."""
    code, process = restores["r3"]
    assert code == contract.EXIT_OK, process.log()[-4000:]
    final = combined(stopped_run.observations["sink1_up_to_A"], sink_rows(reader_spark, stopped_run.root / "sink2"))
    assert final == expected_rows()
    savepoint = Path(stopped_run.savepoints["B"]["path"].removeprefix("file:"))
    assert not (savepoint / "q0" / "commits" / str(stopped_run.savepoints["B"]["queries"][0]["batchId"] + 1)).exists()


def test_repartitioned_restore_is_exact(
    stopped_run: Workspace, restores: dict[str, tuple[int, RuntimeProcess]], reader_spark: Any
) -> None:
    code, process = restores["r4"]
    assert code == contract.EXIT_OK, process.log()[-4000:]
    state = stopped_run.root / "r4" / "q0" / "state" / "0"
    assert sorted(name for name in os.listdir(state) if name.isdigit()) == ["0", "1", "2"]
    final = combined(
        stopped_run.observations["sink1_up_to_A"],
        stopped_run.observations["sink2_at_B"],
        sink_rows(reader_spark, stopped_run.root / "sink-r4"),
    )
    assert final == expected_rows()


def test_a_pre_warmed_driver_refuses_at_its_gate_a_first_query_that_cannot_read_the_running_state(
    stopped_run: Workspace, restores: dict[str, tuple[int, RuntimeProcess]]
) -> None:
    code, process = restores["r8"]
    assert code == contract.EXIT_RESTORE_INCOMPATIBLE, process.log()[-4000:]
    termination = process.termination()
    assert termination["reason"] == "RestoreIncompatible"
    assert "query q0: stateful operator #0 changed from stateStoreSave to dedupe" in termination["message"]
    assert f"the running driver's checkpoint {stopped_run.root / 'r2'}, checked" in termination["message"]
    assert not (stopped_run.root / "r8").exists()  # nothing written: it never passed its gate


@pytest.mark.parametrize(
    ("run", "savepoint", "message"),
    [
        ("r5", "B", "state partitions changed from 2 (savepoint) to 3"),
        ("r6", "B", "stateful operator #0 changed from stateStoreSave to dedupe"),
        ("r7", "A", "already committed batches"),
    ],
)
def test_incompatible_restore_is_refused_before_any_batch(
    stopped_run: Workspace, restores: dict[str, tuple[int, RuntimeProcess]], run: str, savepoint: str, message: str
) -> None:
    code, process = restores[run]
    assert code == contract.EXIT_RESTORE_INCOMPATIBLE, process.log()[-4000:]
    termination = process.termination()
    assert termination["reason"] == "RestoreIncompatible"
    assert message in termination["message"]
    assert max(commits(stopped_run.root / run / "q0")) == stopped_run.savepoints[savepoint]["queries"][0]["batchId"]
    if run != "r7":
        assert not list((stopped_run.root / f"sink-{run}").glob("*.parquet"))
