"""Restoring a savepoint into this run, query by query, before each query starts.

Owns: the order of a restore: read the savepoint's metadata and copy every query into the run's
checkpoint directory (first query start), then per query check the stateful operators against the
new plan, repartition or refuse on a partition change, refuse a stateful restore into a file sink
that moved past the savepoint, and seed a new file sink's log. Also the same operator check of a
pre-warmed upgrade's first query against the running driver's checkpoint, at its gate (`gate_problems`).
Never: decides compatibility itself (rules in ``restore``) or starts queries.
"""

from __future__ import annotations

import logging
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.streaming.readwriter import DataStreamWriter

from headrace.runtime.checkpoint_files import StatefulOperator, last_batch_id, last_committed_batch
from headrace.runtime.hadoop_fs import HadoopFileSystem, join
from headrace.runtime.registry import TrackedQuery
from headrace.runtime.restore import (
    COMPACT_INTERVAL_CONF,
    RestoreIncompatibleError,
    copy_savepoint_query,
    current_partitions,
    operator_problems,
    partition_decision,
    plan_operators,
    repartition_checkpoint,
    seed_file_sink_log,
    sink_ahead_problem,
)
from headrace.runtime.savepoint import SavepointError, checkpoint_operators, read_savepoint
from headrace.runtime.settings import RuntimeSettings

log = logging.getLogger(__name__)


def explain_plan(writer: DataStreamWriter) -> str:
    """The physical plan of the query a writer would start (stateful operators carry opIds)."""
    frame = writer._df
    jvm: Any = frame.sparkSession._jvm
    return str(jvm.PythonSQLUtils.explainString(frame._jdf.queryExecution(), "simple"))


def saved_operators(query: dict[str, Any]) -> list[StatefulOperator]:
    return [StatefulOperator(int(item["id"]), str(item["name"]), item.get("partitions")) for item in query["operators"]]


def gate_problems(fs: HadoopFileSystem, checkpoint: str, writer: DataStreamWriter) -> list[str]:
    """Why the query `writer` would start cannot read the state the query checkpoint `checkpoint` holds (a running
    driver's, which a pre-warmed upgrade's savepoint or last-state takeover is about to hand over); empty when it can,
    or when that checkpoint committed nothing yet (a new query: nothing to restore)."""
    files = fs.list_files(checkpoint)
    if last_committed_batch(files) is None:
        return []
    return operator_problems(checkpoint_operators(fs, checkpoint, files), plan_operators(explain_plan(writer)))


class Restorer:
    """Restores ``settings.restore_from`` into ``settings.checkpoint_dir``."""

    def __init__(self, settings: RuntimeSettings, spark: SparkSession, fs: HadoopFileSystem) -> None:
        assert settings.restore_from is not None
        self._settings = settings
        self._spark = spark
        self._fs = fs
        self._path = settings.restore_from
        self._savepoint: dict[str, Any] = {"queries": []}

    def copy_all(self) -> None:
        """Copy every query of the savepoint into this run (skipped for queries already restored)."""
        root = self._settings.checkpoint_dir
        if not root:
            raise RestoreIncompatibleError("HEADRACE_RESTORE_FROM needs HEADRACE_CHECKPOINT_DIR to restore into")
        try:
            self._savepoint = read_savepoint(self._fs, self._path)
        except SavepointError as error:
            raise RestoreIncompatibleError(str(error)) from None
        for query in self._savepoint["queries"]:
            if query.get("batchId") is None:
                continue
            source = {"savepoint": self._path, "key": query["key"], "batchId": query["batchId"]}
            if copy_savepoint_query(self._fs, join(self._path, query["key"]), join(root, query["key"]), source):
                log.info("restored query %s at batch %s from %s", query["key"], query["batchId"], self._path)

    def prepare(self, tracked: TrackedQuery) -> None:
        """Refuse an incompatible restore of this query, or adapt the copy, before it runs."""
        saved = self._saved_query(tracked.key)
        if saved is None:
            return
        operators = saved_operators(saved)
        planned = plan_operators(explain_plan(tracked.writer))
        problems = operator_problems(operators, planned)
        if problems:
            raise RestoreIncompatibleError(f"query {tracked.key}: " + "; ".join(problems))
        stateful = bool(operators or planned)
        self._adapt_partitions(tracked, stateful)
        if tracked.file_sink_path:
            self._check_file_sink(tracked, tracked.file_sink_path, stateful)

    def _adapt_partitions(self, tracked: TrackedQuery, stateful: bool) -> None:
        settings = self._settings
        decision = partition_decision(
            current_partitions(self._fs, tracked.checkpoint),
            settings.state_partitions,
            settings.allow_repartition,
            settings.state_backend,
            stateful,
        )
        if decision.action == "refuse":
            raise RestoreIncompatibleError(f"query {tracked.key}: {decision.message}")
        if decision.action == "repartition":
            assert settings.state_partitions is not None
            batch = repartition_checkpoint(
                self._spark, tracked.checkpoint, settings.state_partitions, tracked.file_sink_path
            )
            log.info("query %s: %s; repartitioned as batch %d", tracked.key, decision.message, batch)

    def _check_file_sink(self, tracked: TrackedQuery, sink: str, stateful: bool) -> None:
        committed = last_batch_id(self._fs.list_names(join(tracked.checkpoint, "commits")))
        if committed is None:
            return
        sink_batch = last_batch_id(self._fs.list_names(join(sink, "_spark_metadata")))
        problem = sink_ahead_problem(sink, committed, sink_batch)
        if problem and stateful:
            raise RestoreIncompatibleError(f"query {tracked.key}: {problem}")
        if problem:
            log.warning(
                "query %s: %s; Spark skips them, exact only if replayed batches are identical", tracked.key, problem
            )
        interval = int(self._spark.conf.get(COMPACT_INTERVAL_CONF, "10") or "10")
        if seed_file_sink_log(self._fs, sink, committed, interval):
            log.info("query %s: new file sink %s starts after batch %d", tracked.key, sink, committed)

    def restores(self, key: str) -> bool:
        """Whether the savepoint holds a committed batch of this query (its restore checks the sink)."""
        return any(query["key"] == key and query.get("batchId") is not None for query in self._savepoint["queries"])

    def saved_sink_path(self, key: str) -> str | None:
        """The file sink a query of the savepoint wrote to, if the savepoint records one."""
        for query in self._savepoint["queries"]:
            if query["key"] == key and query.get("sinkPath"):
                return str(query["sinkPath"])
        return None

    def _saved_query(self, key: str) -> dict[str, Any] | None:
        for query in self._savepoint["queries"]:
            if query["key"] == key and query.get("batchId") is not None:
                return dict(query)
        log.warning("query %s is not in savepoint %s; it starts without state", key, self._path)
        return None
