"""Stop-with-savepoint of two stateful file-sink queries leaves one consistent batch boundary.

Issue 5: a savepoint recorded batch 24 while a query went on to commit 25 into its file sink, and
the restore was refused. Chained runs of ``jobs/two_windows.py`` with input arriving all along:
r1 (fresh) is stopped once both queries committed batches; r2 restores r1's savepoint with a
repartition and is stopped the moment its first query runs, while the second is still being
restored; r3 restores r2's savepoint into the same sinks and must run on. The stop of r2 lands either
while the second query is being restored (the stop waits for that start, then stops both) or
just before the script starts it (the start is refused and its restored copy, not yet
repartitioned, is saved as it is; r3 repartitions it, as the operator allows for upgrades). After each stop every
query's offsets, commits, file-sink log and savepoint agree on one batch id.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from headrace.api import runtime_contract as contract

from .harness import RuntimeProcess, commits, write_events

pytestmark = pytest.mark.spark

JOB = Path(__file__).parent / "jobs" / "two_windows.py"
QUERIES = ("tumbling", "sliding")
EVENTS_PER_FILE = 20


def log_batches(directory: Path) -> list[int]:
    """Batch ids of a metadata log (``offsets``, ``commits``, ``_spark_metadata``)."""
    if not directory.is_dir():
        return []
    return sorted(int(name.removesuffix(".compact")) for name in os.listdir(directory) if name[0].isdigit())


def boundary(checkpoint: Path, sink: Path) -> dict[str, int | None]:
    """The last batch of a query's offsets, commits and file-sink logs."""
    return {
        "offsets": max(log_batches(checkpoint / "offsets"), default=None),
        "commits": max(log_batches(checkpoint / "commits"), default=None),
        "sink": max(log_batches(sink / "_spark_metadata"), default=None),
    }


@dataclass
class Feeder:
    """Writes one input file every ``interval`` seconds from a thread, as a live source would."""

    directory: Path
    interval: float = 0.5
    next_index: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def write(self, files: int) -> None:
        write_events(self.directory, files, EVENTS_PER_FILE, first=self.next_index)
        self.next_index += files

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.write(1)

    def __enter__(self) -> Feeder:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join()


@dataclass
class Workspace:
    root: Path
    feeder: Feeder
    savepoints: dict[str, dict[str, Any]] = field(default_factory=dict)
    boundaries: dict[str, dict[str, dict[str, int | None]]] = field(default_factory=dict)
    outcomes: dict[str, tuple[int, int, dict[str, Any]]] = field(default_factory=dict)

    def process(self, run: str, **extra: str) -> RuntimeProcess:
        env = {
            contract.ENV_CHECKPOINT_DIR: str(self.root / run),
            contract.ENV_SAVEPOINT_DIR: str(self.root / "savepoints"),
            contract.ENV_STATE_PARTITIONS: "2",
            contract.ENV_APP_NAME: "two-windows",
            contract.ENV_RUN_ID: run,
            **extra,
        }
        args = ["--input", str(self.feeder.directory), "--output", str(self.root / "out"), "--trigger-seconds", "1"]
        return RuntimeProcess(self.root, args, env, name=run, script=JOB)

    def stop(self, run: str, process: RuntimeProcess) -> None:
        """Stop-with-savepoint; record the answer, the exit and every query's logs afterwards."""
        status, record = process.request("POST", contract.PATH_STOP_WITH_SAVEPOINT, {"reason": "upgrade"})
        code = process.wait(timeout=120)
        self.outcomes[run] = (status, code, process.termination())
        self.savepoints[run] = record
        self.boundaries[run] = {
            query: boundary(self.root / run / query, self.root / "out" / query) for query in QUERIES
        }


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    root = tmp_path_factory.mktemp("stop-consistency")
    feeder = Feeder(root / "in")
    feeder.write(4)
    return Workspace(root, feeder)


def query_started(process: RuntimeProcess) -> bool:
    try:
        status, body = process.request("GET", contract.PATH_STATUS, timeout=10)
    except OSError:  # the control endpoint is not up yet
        return False
    return status == 200 and bool(body.get("queries"))


@pytest.fixture(scope="module")
def stopped_runs(workspace: Workspace) -> Workspace:
    """r1 stopped while input arrives; r2 restored with a repartition, stopped as its first query runs."""
    first = workspace.process("r1")
    try:
        with workspace.feeder:
            first.start()
            first.wait_until(
                lambda: all(len(commits(workspace.root / "r1" / query)) >= 3 for query in QUERIES),
                300,
                "three commits per query",
            )
            workspace.stop("r1", first)
    finally:
        first.kill()
    assert workspace.outcomes["r1"][0] == 200, workspace.savepoints["r1"]
    second = workspace.process(
        "r2",
        **{
            contract.ENV_RESTORE_FROM: workspace.savepoints["r1"]["path"],
            contract.ENV_STATE_PARTITIONS: "3",
            contract.ENV_ALLOW_REPARTITION: "true",
        },
    )
    try:
        with workspace.feeder:
            second.start()
            second.wait_until(lambda: query_started(second), 300, "the first query to start")
            workspace.stop("r2", second)
    finally:
        second.kill()
    return workspace


@pytest.mark.parametrize("run", ["r1", "r2"])
def test_stop_with_savepoint_ends_every_query_at_one_batch(stopped_runs: Workspace, run: str) -> None:
    status, code, termination = stopped_runs.outcomes[run]
    record = stopped_runs.savepoints[run]
    assert status == 200, record
    assert code == contract.EXIT_OK
    assert termination["reason"] == "StoppedWithSavepoint"
    assert record["stopped"]
    saved = {query["key"]: query["batchId"] for query in record["queries"]}
    assert set(saved) == set(QUERIES)
    savepoint = Path(record["path"].removeprefix("file:"))
    for query in QUERIES:
        batch = saved[query]
        after_exit = stopped_runs.boundaries[run][query]
        assert after_exit == {"offsets": batch, "commits": batch, "sink": batch}, (query, batch)
        assert max(log_batches(savepoint / query / "offsets")) == max(log_batches(savepoint / query / "commits"))
        assert max(log_batches(savepoint / query / "commits")) == batch


def test_restore_of_the_stopped_repartitioned_run_into_the_same_sinks_runs(stopped_runs: Workspace) -> None:
    """The symptom of issue 5 was this restore exiting 3 ("the file sink ... already committed")."""
    workspace = stopped_runs
    saved = {query["key"]: query["batchId"] for query in workspace.savepoints["r2"]["queries"]}
    restore = {contract.ENV_RESTORE_FROM: workspace.savepoints["r2"]["path"], contract.ENV_ALLOW_REPARTITION: "true"}
    process = workspace.process("r3", **restore, **{contract.ENV_STATE_PARTITIONS: "3"})
    try:
        process.start().wait_until(
            lambda: all(max(commits(workspace.root / "r3" / query), default=-1) > saved[query] for query in QUERIES),
            300,
            "a batch after the savepoint in every query",
        )
    finally:
        process.kill()
