"""Restoring a savepoint into a new run, refusing incompatible restores, and offline repartition.

Owns: the compatibility rules (pure: stateful operators of the new plan vs the savepoint, state
partitions vs the requested ones), copying a savepoint's query into a fresh checkpoint without
touching the savepoint, and :func:`repartition_checkpoint` (also the operator's library entry).
Never: starts or stops queries; never writes into a savepoint.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from headrace.runtime.checkpoint_files import (
    RESTORE_MARKER,
    SINK_LOG_VERSION,
    StatefulOperator,
    last_batch_id,
    last_committed_batch,
    partitions_from_offsets,
    sink_log_filler,
    sink_log_seed,
)
from headrace.runtime.hadoop_fs import HadoopFileSystem, join

# Physical plan node -> the operator name Spark records in state/<op>/_metadata.
PLAN_NODE_OPERATOR_NAMES = {
    "StateStoreSave": "stateStoreSave",
    "StateStoreRestore": "stateStoreSave",
    "StreamingDeduplicate": "dedupe",
    "StreamingDeduplicateWithinWatermark": "dedupeWithinWatermark",
    "SessionWindowStateStoreSave": "sessionWindowStateStoreSaveExec",
    "SessionWindowStateStoreRestore": "sessionWindowStateStoreSaveExec",
    "StreamingSymmetricHashJoin": "symmetricHashJoin",
    "FlatMapGroupsWithState": "flatMapGroupsWithState",
    "FlatMapGroupsInPandasWithState": "applyInPandasWithState",
    "StreamingGlobalLimit": "globalLimit",
    "TransformWithState": "transformWithStateExec",
}
COMPACT_INTERVAL_CONF = "spark.sql.streaming.fileSink.log.compactInterval"
EMPTY_SINK_LOG_ENTRY = SINK_LOG_VERSION
_STATEFUL_PLAN_LINE = re.compile(r"^[\s:+\-|]*(?:\*\(\d+\)\s*)?(\w+).*state info \[.*?opId = (\d+)")


class RestoreIncompatibleError(BaseException):
    """The savepoint cannot be restored into this job; never retried.

    A ``BaseException`` (like ``SystemExit``) so a script's ``except Exception`` cannot hide it.
    """


@dataclass(frozen=True)
class PartitionDecision:
    """What to do about state partitions: keep them, repartition, or refuse with a message."""

    action: str  # "keep" | "repartition" | "refuse"
    message: str = ""


def plan_operators(explain: str) -> list[StatefulOperator]:
    """The stateful operators in a streaming query's physical plan (``explain`` text), by opId."""
    found: dict[int, StatefulOperator] = {}
    for line in explain.splitlines():
        match = _STATEFUL_PLAN_LINE.match(line)
        if match:
            node, operator_id = match.group(1), int(match.group(2))
            name = PLAN_NODE_OPERATOR_NAMES.get(node, node)
            if operator_id not in found or node in PLAN_NODE_OPERATOR_NAMES:
                found[operator_id] = StatefulOperator(operator_id, name)
    return [found[key] for key in sorted(found)]


def _describe(operators: list[StatefulOperator]) -> str:
    if not operators:
        return "no stateful operators"
    return ", ".join(f"#{operator.operator_id} {operator.name}" for operator in operators)


def operator_problems(saved: list[StatefulOperator], planned: list[StatefulOperator]) -> list[str]:
    """Why the new plan cannot read the saved state; empty when it can."""
    saved_names = {operator.operator_id: operator.name for operator in saved}
    planned_names = {operator.operator_id: operator.name for operator in planned}
    if saved_names.keys() != planned_names.keys():
        return [f"stateful operators changed: savepoint has {_describe(saved)}, the new job has {_describe(planned)}"]
    known = set(PLAN_NODE_OPERATOR_NAMES.values())
    problems = []
    for operator_id, saved_name in saved_names.items():
        planned_name = planned_names[operator_id]
        if saved_name != planned_name and (saved_name in known and planned_name in known):
            problems.append(f"stateful operator #{operator_id} changed from {saved_name} to {planned_name}")
    return problems


def partition_decision(
    saved: int | None, wanted: int | None, allow_repartition: bool, state_backend: str, stateful: bool
) -> PartitionDecision:
    """Keep, repartition or refuse when the requested state partitions differ from the savepoint's."""
    if not stateful or saved is None or wanted is None or saved == wanted:
        return PartitionDecision("keep")
    change = f"state partitions changed from {saved} (savepoint) to {wanted} (HEADRACE_STATE_PARTITIONS)"
    if not allow_repartition:
        return PartitionDecision(
            "refuse", f"{change}; keep spec.state.partitions at {saved} or allow repartitioning the savepoint copy"
        )
    if state_backend != "rocksdb":
        return PartitionDecision("refuse", f"{change}; repartitioning needs the rocksdb state backend")
    return PartitionDecision("repartition", change)


def sink_ahead_problem(sink: str, committed: int, sink_batch: int | None) -> str | None:
    """Why restoring at ``committed`` into a file sink whose log reached ``sink_batch`` is unsafe."""
    if sink_batch is None or sink_batch <= committed:
        return None
    return (
        f"the file sink {sink} already committed batches {committed + 1}..{sink_batch} after the savepoint's "
        f"batch {committed}, and Spark skips batch ids its sink log has without running their stateful "
        "operators; restore into a new output path, or use a savepoint taken with stop-with-savepoint"
    )


def current_partitions(fs: HadoopFileSystem, checkpoint: str) -> int | None:
    """The state partitions pinned in a checkpoint's newest offsets log entry."""
    batch = last_committed_batch(f"commits/{name}" for name in fs.list_names(join(checkpoint, "commits")))
    if batch is None:
        return None
    return partitions_from_offsets(fs.read_text(join(checkpoint, "offsets", str(batch))))


def copy_savepoint_query(
    fs: HadoopFileSystem, savepoint_query_dir: str, checkpoint: str, record: dict[str, Any]
) -> bool:
    """Copy one query of a savepoint into ``checkpoint`` unless an earlier attempt already did.

    Copies into a staging directory, marks it complete, then renames it into place, so a driver
    killed mid-copy starts over. Returns True when it copied. Refuses a checkpoint that already
    holds a different lineage.
    """
    if fs.exists(join(checkpoint, RESTORE_MARKER)):
        return False
    if fs.list_names(join(checkpoint, "commits")):
        raise RestoreIncompatibleError(
            f"checkpoint {checkpoint} already holds committed batches that were not restored from the savepoint; "
            "restore into a new run's checkpoint directory"
        )
    staging = checkpoint.rstrip("/") + ".restoring"
    fs.delete(staging)
    files = [path for path in fs.list_files(savepoint_query_dir) if not any(p.startswith(".") for p in path.split("/"))]
    missing = fs.copy_files(savepoint_query_dir, staging, sorted(files))
    if missing:
        raise OSError(f"files vanished from the savepoint {savepoint_query_dir} while copying: {missing}")
    fs.write_text(join(staging, RESTORE_MARKER), json.dumps(record, sort_keys=True))
    fs.delete(checkpoint)
    if not fs.rename(staging, checkpoint):
        raise OSError(f"could not move the restored checkpoint {staging} to {checkpoint}")
    return True


def repartition_checkpoint(spark: Any, checkpoint: str, partitions: int, file_sink_path: str | None = None) -> int:
    """Repartition a stopped query's state to ``partitions`` (RocksDB only); return the new batch id.

    Spark writes a "repartition batch" N+1 holding re-sharded state. With a file sink, Spark 4.3
    never records that batch in ``<sink>/_spark_metadata`` and the resumed query fails at the next
    sink-log compaction with BATCH_METADATA_NOT_FOUND; an entry for batch N+1 recording no new files is
    written to work around it, unless the sink already has one (`sink_log_filler`: when N+1 is a compaction
    batch, ``<N+1>.compact`` listing every earlier file).
    """
    spark._jsparkSession.streamingCheckpointManager().repartition(checkpoint, partitions, True)
    fs = HadoopFileSystem.of_session(spark)
    batch = last_batch_id(fs.list_names(join(checkpoint, "commits")))
    if batch is None:
        raise OSError(f"repartition of {checkpoint} left no committed batch")
    log_dir = join(file_sink_path, "_spark_metadata") if file_sink_path else None
    names = fs.list_names(log_dir) if log_dir else []
    if log_dir and names and str(batch) not in names and f"{batch}.compact" not in names:
        interval = int(spark.conf.get(COMPACT_INTERVAL_CONF, "10") or "10")
        name, content = sink_log_filler(batch, interval, names, lambda entry: fs.read_text(join(log_dir, entry)))
        fs.write_text(join(log_dir, name), content)
    return batch


def seed_file_sink_log(fs: HadoopFileSystem, sink_path: str, last_batch: int, compact_interval: int) -> bool:
    """Let a restored query write into a new, empty file-sink directory; True if it seeded.

    Without entries for batches up to the restored one, Spark fails at the next sink-log
    compaction (BATCH_METADATA_NOT_FOUND). The entries are empty: the new directory holds only
    output after the savepoint. A sink that already has a log is left alone.
    """
    log_dir = join(sink_path, "_spark_metadata")
    if fs.list_names(log_dir):
        return False
    for name in sink_log_seed(last_batch, compact_interval):
        fs.write_text(join(log_dir, name), EMPTY_SINK_LOG_ENTRY)
    return True
