"""Pure parts of the runtime as tables: checkpoint selection, plans, decisions, progress, settings."""

from __future__ import annotations

import pytest

from headrace.api import spark_defaults
from headrace.runtime.checkpoint_files import (
    IncompleteCheckpointError,
    StatefulOperator,
    boundary_problem,
    keep_referenced_ssts,
    last_batch_id,
    operator_from_metadata,
    partitions_from_offsets,
    referenced_sst_files,
    select_committed_prefix,
    sink_log_filler,
    sink_log_seed,
    snapshot_archives,
)
from headrace.runtime.control import authorized
from headrace.runtime.progress import kafka_backlog, summarize, watermark_lag_seconds
from headrace.runtime.restore import operator_problems, partition_decision, plan_operators, sink_ahead_problem
from headrace.runtime.settings import SettingsError, settings_from_env
from headrace.runtime.sparkconf import merged_conf

CHECKPOINT = [
    "metadata",
    ".metadata.crc",
    *[f"offsets/{batch}" for batch in range(6)],
    *[f"offsets/.{batch}.crc" for batch in range(6)],
    *[f"commits/{batch}" for batch in range(5)],
    "sources/0/3",
    "sources/0/4",
    "sources/0/5",
    "sources/0/2.compact",
    "state/0/_metadata/metadata",
    "state/0/0/_metadata/schema",
    *[f"state/0/0/{version}.changelog" for version in range(1, 7)],
    "state/0/0/3.zip",
    "state/0/0/6.zip",
    "state/0/0/SSTs/000008-abc.sst",
    *[f"state/0/1/{version}.delta" for version in range(1, 7)],
    "state/0/1/2.snapshot",
    "_headrace_restored.json",
]


def test_committed_prefix_at_batch_4_takes_state_version_5() -> None:
    selected = {item.path: item.required for item in select_committed_prefix(CHECKPOINT, 4)}
    assert "metadata" in selected
    assert ".metadata.crc" not in selected
    assert "_headrace_restored.json" not in selected
    assert [path for path in selected if path.startswith("offsets/")] == [f"offsets/{batch}" for batch in range(5)]
    # A source's log is numbered by its own offsets, not batch ids (a file source's runs ahead of them after a
    # driver died between its log entry and the offsets entry): every entry is kept, none required.
    assert {"sources/0/2.compact", "sources/0/3", "sources/0/4", "sources/0/5"} <= selected.keys()
    assert not any(required for path, required in selected.items() if path.startswith("sources/"))
    # RocksDB with changelogs: newest snapshot <= 5 is 3.zip, then changelogs 4 and 5.
    assert [path for path in selected if path.startswith("state/0/0/") and "_metadata" not in path] == [
        "state/0/0/3.zip",
        "state/0/0/4.changelog",
        "state/0/0/5.changelog",
        "state/0/0/SSTs/000008-abc.sst",
    ]
    # HDFS store: snapshot 2 then deltas 3..5.
    assert [path for path in selected if path.startswith("state/0/1/")] == [
        "state/0/1/2.snapshot",
        "state/0/1/3.delta",
        "state/0/1/4.delta",
        "state/0/1/5.delta",
    ]
    assert selected["offsets/4"] and selected["commits/3"] and not selected["commits/1"]
    assert not selected["state/0/0/SSTs/000008-abc.sst"]


def test_committed_prefix_without_snapshot_takes_every_changelog() -> None:
    paths = ["metadata", "commits/0", "commits/1", *[f"state/0/0/{version}.changelog" for version in (1, 2, 3)]]
    selected = [item.path for item in select_committed_prefix(paths, 1) if item.path.startswith("state")]
    assert selected == ["state/0/0/1.changelog", "state/0/0/2.changelog"]


def test_only_the_ssts_of_the_chosen_snapshot_are_kept() -> None:
    selection = select_committed_prefix([*CHECKPOINT, "state/0/0/SSTs/000009-def.sst", "state/0/1/SSTs/1-x.sst"], 4)
    assert snapshot_archives(selection) == {"state/0/0": ["state/0/0/3.zip"]}
    metadata = 'v1\n{"sstFiles":[{"localFileName":"000009.sst","dfsSstFileName":"000009-def.sst","sizeBytes":9}]}'
    referenced = referenced_sst_files(metadata)
    assert referenced == {"000009-def.sst"}
    kept = {item.path: item.required for item in keep_referenced_ssts(selection, {"state/0/0": referenced})}
    assert kept["state/0/0/SSTs/000009-def.sst"] is True
    assert "state/0/0/SSTs/000008-abc.sst" not in kept
    assert "state/0/1/SSTs/1-x.sst" not in kept  # no snapshot: replayed from changelogs alone
    unknown = {item.path: item.required for item in keep_referenced_ssts(selection, {"state/0/0": None})}
    assert unknown["state/0/0/SSTs/000008-abc.sst"] is False


def test_committed_prefix_refuses_missing_state_versions() -> None:
    paths = ["metadata", *[f"commits/{batch}" for batch in range(6)], "state/0/0/1.changelog", "state/0/0/2.changelog"]
    with pytest.raises(IncompleteCheckpointError, match=r"state/0/0 has no state file for versions \[3, 4, 5, 6\]"):
        select_committed_prefix(paths, 5)


def test_committed_prefix_leaves_out_partitions_a_repartition_to_fewer_left_behind() -> None:
    """12 -> 8 partitions: state/0/8..11 stay in the checkpoint with versions up to the repartition only."""
    stale = [f"state/0/{partition}/{version}.changelog" for partition in (8, 11) for version in range(1, 4)]
    kept = [f"state/0/{partition}/{version}.changelog" for partition in range(8) for version in range(1, 7)]
    paths = ["metadata", *[f"commits/{batch}" for batch in range(6)], *kept, *stale, "state/0/11/SSTs/1-x.sst"]
    with pytest.raises(IncompleteCheckpointError, match="state/0/11 has no state file"):
        select_committed_prefix(paths, 5)  # not knowing the partitions: as before
    selected = {item.path for item in select_committed_prefix(paths, 5, partitions=8)}
    assert {path for path in selected if path.startswith("state/")} == set(kept)
    with pytest.raises(IncompleteCheckpointError, match="state/0/11 has no state file"):
        select_committed_prefix(paths, 5, partitions=12)  # partitions it still has must be complete


def test_log_helpers() -> None:
    assert last_batch_id(["0", "1", "9.compact", ".9.compact.crc", "10"]) == 10
    assert last_batch_id([]) is None
    offsets = 'v1\n{"batchWatermarkMs":0,"conf":{"spark.sql.shuffle.partitions":"3"}}\n{"logOffset":4}'
    assert partitions_from_offsets(offsets) == 3
    metadata = 'v1\n{"operatorInfo":{"operatorId":0,"operatorName":"dedupe"},"stateStoreInfo":[{"numPartitions":2}]}'
    assert operator_from_metadata(metadata) == StatefulOperator(0, "dedupe", 2)


@pytest.mark.parametrize(
    ("last_batch", "interval", "expected"),
    [
        (3, 10, ["0", "1", "2", "3"]),
        (9, 10, ["9.compact"]),
        (12, 10, ["9.compact", "10", "11", "12"]),
        (5, 3, ["5.compact"]),
    ],
)
def test_sink_log_seed(last_batch: int, interval: int, expected: list[str]) -> None:
    assert sink_log_seed(last_batch, interval) == expected


AGGREGATION_PLAN = """== Physical Plan ==
*(5) HashAggregate(keys=[window#12-T5000ms, key#1], functions=[count(1)])
+- StateStoreSave [window#12-T5000ms, key#1], state info [ checkpoint = <unknown>, runId = x, opId = 0, ver = 0, numPartitions = 2] stateStoreCkptIds = None, Append
   +- *(4) HashAggregate(keys=[window#12-T5000ms, key#1], functions=[merge_count(1)])
      +- StateStoreRestore [window#12-T5000ms, key#1], state info [ checkpoint = <unknown>, runId = x, opId = 0, ver = 0, numPartitions = 2] stateStoreCkptIds = None, 2
"""  # noqa: E501
DEDUPE_PLAN = """== Physical Plan ==
StreamingDeduplicate [id#0L], state info [ checkpoint = <unknown>, runId = y, opId = 0, ver = 0, numPartitions = 2] stateStoreCkptIds = None
+- Exchange hashpartitioning(id#0L, 2), REQUIRED_BY_STATEFUL_OPERATOR, [plan_id=717]
"""  # noqa: E501


def test_plan_operators_from_explain() -> None:
    assert plan_operators(AGGREGATION_PLAN) == [StatefulOperator(0, "stateStoreSave")]
    assert plan_operators(DEDUPE_PLAN) == [StatefulOperator(0, "dedupe")]
    assert plan_operators("== Physical Plan ==\n*(1) Project [id#0L]\n") == []


@pytest.mark.parametrize(
    ("saved", "planned", "problem"),
    [
        ([StatefulOperator(0, "stateStoreSave")], [StatefulOperator(0, "stateStoreSave")], None),
        (
            [StatefulOperator(0, "stateStoreSave")],
            [StatefulOperator(0, "dedupe")],
            "changed from stateStoreSave to dedupe",
        ),
        ([StatefulOperator(0, "stateStoreSave")], [], "the new job has no stateful operators"),
        ([], [StatefulOperator(0, "dedupe")], "savepoint has no stateful operators"),
        ([StatefulOperator(0, "customOperator")], [StatefulOperator(0, "SomethingNew")], None),
    ],
)
def test_operator_problems(saved: list[StatefulOperator], planned: list[StatefulOperator], problem: str | None) -> None:
    problems = operator_problems(saved, planned)
    if problem is None:
        assert problems == []
    else:
        assert len(problems) == 1
        assert problem in problems[0]


@pytest.mark.parametrize(
    ("saved", "wanted", "allow", "backend", "stateful", "action"),
    [
        (4, 4, False, "rocksdb", True, "keep"),
        (4, None, False, "rocksdb", True, "keep"),
        (4, 8, False, "rocksdb", False, "keep"),
        (4, 8, False, "rocksdb", True, "refuse"),
        (4, 8, True, "hdfs", True, "refuse"),
        (4, 8, True, "rocksdb", True, "repartition"),
    ],
)
def test_partition_decision(  # noqa: PLR0917 - one parameter per table column
    saved: int, wanted: int | None, allow: bool, backend: str, stateful: bool, action: str
) -> None:
    decision = partition_decision(saved, wanted, allow, backend, stateful)
    assert decision.action == action
    if action == "refuse":
        assert "from 4 (savepoint) to 8" in decision.message


def test_progress_summary() -> None:
    progress = {
        "batchId": 7,
        "timestamp": "2026-11-21T23:56:40.000Z",
        "numInputRows": 20,
        "inputRowsPerSecond": 10.0,
        "processedRowsPerSecond": 40.0,
        "durationMs": {"triggerExecution": 500},
        "eventTime": {"watermark": "2026-11-21T23:56:30.000Z"},
        "stateOperators": [{"numRowsTotal": 3, "memoryUsedBytes": 100}, {"numRowsTotal": 2, "memoryUsedBytes": 50}],
        "sources": [{"latestOffset": '{"t":{"0":100,"1":50}}', "endOffset": {"t": {"0": 90, "1": 50}}}],
    }
    summary = summarize(progress)
    assert (summary.batch_id, summary.state_rows, summary.state_memory_bytes) == (7, 5, 150)
    assert summary.watermark_lag_seconds == 10.0
    assert summary.source_backlog == 10.0
    assert summary.committed_at == "2026-11-21T23:56:40.500Z"
    assert (summary.source_partitions, summary.state_operators) == (2, 2)
    assert summarize({"batchId": 0}).source_backlog is None
    assert summarize({"batchId": 0, "sources": [{"latestOffset": '{"logOffset": 4}'}]}).source_partitions is None


EPOCH = "1970-01-01T00:00:00.000Z"


def test_kafka_backlog_and_watermark_edge_cases() -> None:
    assert kafka_backlog('{"logOffset": 4}', '{"logOffset": 4}') is None
    assert kafka_backlog(None, None) is None
    assert watermark_lag_seconds("2026-11-21T00:00:00Z", "1970-01-01T00:00:00.000Z") is None
    first = summarize({"batchId": 0, "timestamp": "2026-11-21T00:00:00Z", "eventTime": {"watermark": EPOCH}})
    assert (first.watermark, first.watermark_lag_seconds) == (None, None), "before any event time: no watermark"


def test_settings_from_env() -> None:
    settings = settings_from_env(
        {"HEADRACE_STATE_PARTITIONS": "8", "HEADRACE_MODE": "bounded", "HEADRACE_ALLOW_REPARTITION": "true"}
    )
    assert (settings.state_partitions, settings.bounded, settings.allow_repartition) == (8, True, True)
    assert settings.state_backend == "rocksdb"
    assert not settings.in_pod
    assert settings.warmup, "a standby warms up unless told not to"
    assert not settings_from_env({"HEADRACE_WARMUP": "false"}).warmup
    for env, name in [
        ({"HEADRACE_STATE_PARTITIONS": "x"}, "HEADRACE_STATE_PARTITIONS"),
        ({"HEADRACE_STATE_BACKEND": "memory"}, "HEADRACE_STATE_BACKEND"),
        ({"HEADRACE_CONTROL_PORT": "70000"}, "HEADRACE_CONTROL_PORT"),
        ({"HEADRACE_ATTEMPT": "0"}, "HEADRACE_ATTEMPT"),
        ({"HEADRACE_WARMUP": "maybe"}, "HEADRACE_WARMUP"),
    ]:
        with pytest.raises(SettingsError, match=name):
            settings_from_env(env)


def test_spark_conf_in_a_pod_and_locally() -> None:
    pod = settings_from_env(
        {
            "HEADRACE_POD_IP": "10.0.0.7",
            "HEADRACE_POD_NAME": "app-r1-a1-driver",
            "KUBERNETES_SERVICE_HOST": "10.96.0.1",
            "KUBERNETES_SERVICE_PORT": "443",
            "HEADRACE_STATE_BACKEND": "hdfs",
            "HEADRACE_STATE_PARTITIONS": "16",
        }
    )
    conf = merged_conf(pod, {"spark.executor.instances": "2"})
    assert conf["spark.master"] == "k8s://https://10.96.0.1:443"
    assert conf["spark.driver.host"] == "10.0.0.7"
    assert conf["spark.kubernetes.driver.pod.name"] == "app-r1-a1-driver"
    assert conf["spark.sql.shuffle.partitions"] == "16"
    assert conf["spark.sql.streaming.stateStore.providerClass"].endswith("HDFSBackedStateStoreProvider")
    assert merged_conf(pod, {"spark.master": "k8s://https://api:6443"})["spark.master"] == "k8s://https://api:6443"
    local = merged_conf(settings_from_env({}), {})
    assert local["spark.master"] == "local[2]"
    assert local["spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"] == "true"
    assert spark_defaults.parse(spark_defaults.render(conf)) == conf


def test_the_spark_context_does_not_wait_for_executors_unless_configured_to() -> None:
    settings = settings_from_env({})
    assert merged_conf(settings, {})["spark.scheduler.minRegisteredResourcesRatio"] == "0"
    configured = merged_conf(settings, {"spark.scheduler.minRegisteredResourcesRatio": "0.8"})
    assert configured["spark.scheduler.minRegisteredResourcesRatio"] == "0.8"


def test_bearer_token_check() -> None:
    assert authorized("Bearer s3cret", "s3cret")
    assert authorized("bearer s3cret", "s3cret")
    assert not authorized("Bearer wrong", "s3cret")
    assert not authorized(None, "s3cret")
    assert not authorized("Basic s3cret", "s3cret")
    assert not authorized("Bearer anything", None)


def test_sink_ahead_problem() -> None:
    assert sink_ahead_problem("/out", 5, None) is None
    assert sink_ahead_problem("/out", 5, 5) is None
    problem = sink_ahead_problem("/out", 5, 8)
    assert problem is not None
    assert "already committed batches 6..8 after the savepoint's batch 5" in problem


@pytest.mark.parametrize(
    ("planned", "committed", "sink", "problem"),
    [
        (None, None, None, None),  # never ran a batch
        (7, 7, 7, None),
        (7, 7, None, None),  # no file sink
        (7, 7, 6, None),  # sink behind: the next batch writes it
        (8, 7, 7, "the offsets log ends at batch 8 but the commits log at 7"),
        (7, 7, 8, "the file sink's log has batch 8 after the last committed batch 7"),  # issue 5
        (None, None, 0, "the file sink's log has batch 0 after the last committed batch None"),
    ],
)
def test_boundary_problem(planned: int | None, committed: int | None, sink: int | None, problem: str | None) -> None:
    assert boundary_problem(planned, committed, sink) == problem


def test_sink_log_filler_compacts_what_the_log_lists_before_a_compaction_batch() -> None:
    files = {"0": 'v1\n{"path":"a"}', "1": "v1", "2": 'v1\n{"path":"b"}\n{"path":"c"}'}
    compacted = 'v1\n{"path":"a"}\n{"path":"b"}\n{"path":"c"}'
    assert sink_log_filler(3, 4, files, files.__getitem__) == ("3.compact", compacted)
    files["3.compact"] = "v1\n" + '{"path":"a"}'
    files["4"] = 'v1\n{"path":"d"}'
    newest_on = sink_log_filler(7, 4, files, files.__getitem__)[1]  # from the newest compaction on
    assert newest_on == 'v1\n{"path":"a"}\n{"path":"d"}'
    assert sink_log_filler(5, 4, files, files.__getitem__) == ("5", "v1")  # not a compaction batch: nothing listed
