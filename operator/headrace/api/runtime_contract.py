"""The contract between the operator and its agent inside the driver (`headrace.runtime`).

Owns: the environment variables the operator sets on the driver container, the control endpoint's
paths and port defaults, the status document's fields and phases, the savepoint metadata file name,
the runtime's exit codes and the termination reason the operator reads back. Both sides import these
names from here, so they cannot drift.
Never: logic. Plain constants and small typed records only.
"""

from __future__ import annotations

from typing import Any, Final, Literal, TypedDict

# --- Environment of the driver container (set by the operator, read by the runtime) -------------
ENV_APP_NAME: Final = "HEADRACE_APP_NAME"  # metadata.name of the StreamingApp
ENV_APP_NAMESPACE: Final = "HEADRACE_APP_NAMESPACE"
ENV_RUN_ID: Final = "HEADRACE_RUN_ID"  # e.g. "r3": a run is one checkpoint lineage
ENV_ATTEMPT: Final = "HEADRACE_ATTEMPT"  # attempt number within the run, from 1
ENV_CHECKPOINT_DIR: Final = "HEADRACE_CHECKPOINT_DIR"  # this run's checkpoint root (any Hadoop URI)
# The one HEADRACE_* variable a user may set (spec.driver.env): "spark-submit" starts the driver JVM the
# previous way, through spark-submit's launcher and without the class-data sharing archive (for comparison).
ENV_JVM_START: Final = "HEADRACE_JVM_START"
USER_SETTABLE_ENV: Final = frozenset({ENV_JVM_START})
ENV_SAVEPOINT_DIR: Final = "HEADRACE_SAVEPOINT_DIR"  # where savepoints go unless a request names a path
ENV_RESTORE_FROM: Final = "HEADRACE_RESTORE_FROM"  # savepoint path to restore from before the first batch
ENV_STATE_BACKEND: Final = "HEADRACE_STATE_BACKEND"  # "rocksdb" | "hdfs"
ENV_STATE_PARTITIONS: Final = "HEADRACE_STATE_PARTITIONS"  # spark.sql.shuffle.partitions for new checkpoints
ENV_ALLOW_REPARTITION: Final = "HEADRACE_ALLOW_REPARTITION"  # "true": restore may repartition state
ENV_MODE: Final = "HEADRACE_MODE"  # "continuous" | "bounded" (Trigger.AvailableNow, then exit 0)
# JSON {query key: last committed batch id} the operator saw committed by earlier attempts of this run;
# a query whose checkpoint has fewer commits refuses to start (EXIT_CHECKPOINT_BEHIND)
ENV_EXPECTED_COMMITS: Final = "HEADRACE_EXPECTED_COMMITS"
# "true": a warm standby driver. The script runs up to its first query start (JVM, SparkContext and executors
# up), which blocks, nothing written to the checkpoint, until POST PATH_PROMOTE; then it goes on as an active driver
ENV_STANDBY: Final = "HEADRACE_STANDBY"
# A pre-warmed upgrade's new driver (HEADRACE_STANDBY): the running driver's checkpoint directory. At its gate, before
# the operator stops the running driver, the new driver checks that its first query's stateful operators can read
# the state that checkpoint holds for the same query, and exits with EXIT_RESTORE_INCOMPATIBLE when they cannot
ENV_PREWARM_CHECKPOINT: Final = "HEADRACE_PREWARM_CHECKPOINT"
# "false": a standby (or pre-warmed) driver waits at its gate without running the warm-up query first
# (spec.standby.warmup); unset or "true": it runs it
ENV_WARMUP: Final = "HEADRACE_WARMUP"
# Name of the app's driver Lease (coordination.k8s.io/v1, in HEADRACE_APP_NAMESPACE), set on every driver (before
# issue 23, only on those of an app with a warm standby): the driver starts its queries only while it holds the
# Lease (a standby: once promoted), takes it only when released or expired, renews it, and exits with
# EXIT_LEASE_LOST at once when it cannot renew within the renew deadline or sees another holder. Its identity is
# HEADRACE_POD_NAME; it releases the Lease when it exits.
ENV_DRIVER_LEASE: Final = "HEADRACE_DRIVER_LEASE"
DRIVER_LEASE_SECONDS: Final = 15  # a Lease not renewed for this long may be taken over
DRIVER_LEASE_RENEW_DEADLINE_SECONDS: Final = 10  # the holder stops writing when it could not renew for this long
DRIVER_LEASE_RETRY_SECONDS: Final = 2  # the holder renews, and a waiting driver reads the Lease, this often
ENV_CONTROL_PORT: Final = "HEADRACE_CONTROL_PORT"
ENV_CONTROL_TOKEN: Final = "HEADRACE_CONTROL_TOKEN"  # bearer token; requests without it are refused
# Directory holding CONTROL_TLS_CERT_FILE and CONTROL_TLS_KEY_FILE (the app's Secret, mounted): set, the control
# endpoint is served over TLS only (missing or unreadable files stop the runtime); unset, plain HTTP
ENV_CONTROL_TLS_DIR: Final = "HEADRACE_CONTROL_TLS_DIR"
ENV_METRICS_PORT: Final = "HEADRACE_METRICS_PORT"
ENV_POD_IP: Final = "HEADRACE_POD_IP"  # from the downward API; becomes spark.driver.host
ENV_POD_NAME: Final = "HEADRACE_POD_NAME"  # becomes spark.kubernetes.driver.pod.name
# JSON {Spark key: name of the variable holding its value} for spec.sparkConfFromSecrets; each variable is a
# secretKeyRef (named ENV_SPARK_CONF_SECRET_PREFIX + index), so values are never in the pod spec or a ConfigMap
ENV_SPARK_CONF_SECRETS: Final = "HEADRACE_SPARK_CONF_SECRETS"
ENV_SPARK_CONF_SECRET_PREFIX: Final = "HEADRACE_SPARK_CONF_SECRET_"

DEFAULT_CONTROL_PORT: Final = 4048
DEFAULT_METRICS_PORT: Final = 9464
DRIVER_PORT: Final = 7078
BLOCK_MANAGER_PORT: Final = 7079
SPARK_UI_PORT: Final = 4040

# --- Control endpoint (HTTPS with the app's certificate, JSON, `Authorization: Bearer <token>`) ---
CONTROL_TLS_CERT_FILE: Final = "tls.crt"  # PEM certificate, in ENV_CONTROL_TLS_DIR (also the Secret's key)
CONTROL_TLS_KEY_FILE: Final = "tls.key"  # PEM private key, in ENV_CONTROL_TLS_DIR (also the Secret's key)
PATH_STATUS: Final = "/v1/status"  # GET
PATH_SAVEPOINT: Final = "/v1/savepoint"  # POST {"path": str | null, "reason": str}
PATH_STOP_WITH_SAVEPOINT: Final = "/v1/stop-with-savepoint"  # POST {"path": str | null, "reason": str}
PATH_RESCALE: Final = "/v1/rescale"  # POST {"executors": int}
# POST {"path": str}: delete one savepoint directory, a direct child of HEADRACE_SAVEPOINT_DIR only;
# answers {"path": str, "deleted": bool} (false: it was already gone)
PATH_DISPOSE_SAVEPOINT: Final = "/v1/dispose-savepoint"
# POST {}: a standby driver starts its queries (the operator fenced the active one first); answers
# {"promoted": bool (false: it was not waiting, e.g. promoted before), "phase": RuntimePhase}
# body (optional) {"restoreFrom": str | null, "allowRepartition": bool}: the savepoint a standby created before it
# was taken (a pre-warmed savepoint upgrade) restores, unless HEADRACE_RESTORE_FROM already named one
PATH_PROMOTE: Final = "/v1/promote"
PATH_HEALTH: Final = "/healthz"  # GET, no token: 200 once the runtime serves
PATH_METRICS: Final = "/metrics"  # GET on the metrics port, no token (Prometheus)

# --- Savepoints ----------------------------------------------------------------------------------
SAVEPOINT_METADATA_FILE: Final = "_headrace_savepoint.json"

# --- Exit codes of `python -m headrace.runtime` --------------------------------------------------
EXIT_OK: Final = 0  # bounded run finished, or stopped after stop-with-savepoint
EXIT_FAILED: Final = 1  # the job failed (retryable from the checkpoint)
EXIT_USAGE: Final = 2  # bad invocation
EXIT_RESTORE_INCOMPATIBLE: Final = 3  # savepoint cannot be restored into this job: do not retry
EXIT_CHECKPOINT_BEHIND: Final = 4  # the checkpoint has fewer commits than the operator saw: do not start over
EXIT_LEASE_LOST: Final = 5  # the driver lost its Lease (ENV_DRIVER_LEASE): it stopped writing; retryable

# The driver writes a one-line JSON reason ({"reason": CamelCase, "message": str}) here on exit;
# Kubernetes copies it into the pod's container status so the operator can report it.
TERMINATION_MESSAGE_PATH: Final = "/dev/termination-log"


# --- What the operator reads of the runtime's answers (the runtime builds them with these types) --
RuntimePhase = Literal["Standby", "Starting", "Running", "Savepointing", "Stopping", "Finished"]
SAVEPOINTING_PHASES: Final[frozenset[RuntimePhase]] = frozenset({"Savepointing", "Stopping"})  # or stopping after one


class ExecutorCounts(TypedDict, total=False):
    """`executors` of the status document: the executor total last requested, those registered, their cores (task
    slots; local mode: the local master's threads), and since when that many have been registered (as the runtime
    saw it at its status calls and batches; ISO, UTC)."""

    requested: int | None
    registered: int | None
    cores: int | None
    registeredSince: str | None


class QueryTotals(TypedDict):
    """`queries[].totals` of the status document: what the query's batches added up to in this driver (the
    autoscaler's signals: the operator takes the differences between two status calls)."""

    batches: int
    inputRows: int
    busySeconds: float  # the batches' durations (triggerExecution), summed


class LastSavepoint(TypedDict):
    """`lastSavepoint` of the status document: the last savepoint this driver took."""

    path: str
    completedAt: str
    sizeBytes: int
    reason: str


class StatusDocument(TypedDict, total=False):
    """The answer of GET PATH_STATUS. The operator reads it as untrusted JSON: any field may be missing."""

    app: dict[str, str]
    runId: str
    attempt: int
    mode: str
    phase: RuntimePhase
    # per query: key, id, runId, name, checkpoint, managedCheckpoint, active, lastCommittedBatchId, lastCommittedAt,
    # progress (the last batch's summary: rates, durationMs, source_backlog, source_partitions, state_operators...),
    # totals (QueryTotals), triggerIntervalSeconds (a processing-time trigger's; 0: back to back; null: other)
    queries: list[dict[str, Any]]
    executors: ExecutorCounts
    restoredFrom: str | None
    lastSavepoint: LastSavepoint | None
    startedAt: str  # when the driver process started (ISO, UTC)
    phases: dict[str, float]  # start-up phase (STARTUP_PHASES) -> seconds from the process start
    atGate: bool  # a standby whose script reached its first query start: it waits there to be promoted


# --- How the runtime ends: the reason of its termination message (the operator records it) --------
TerminationReason = Literal[
    "Completed",  # EXIT_OK: a bounded run finished
    "StoppedWithSavepoint",  # EXIT_OK
    "Terminated",  # EXIT_FAILED: SIGTERM without a savepoint
    "ScriptExited",  # EXIT_FAILED
    "ScriptFailed",  # EXIT_FAILED
    "QueryFailed",  # EXIT_FAILED
    "StopWithSavepointFailed",  # EXIT_FAILED
    "InvalidInvocation",  # EXIT_USAGE
    "RestoreIncompatible",  # EXIT_RESTORE_INCOMPATIBLE
    "CheckpointBehind",  # EXIT_CHECKPOINT_BEHIND
    "SinkAhead",  # EXIT_CHECKPOINT_BEHIND: a file sink's log is ahead of everything the checkpoint planned
    "LeaseLost",  # EXIT_LEASE_LOST
]

# The termination reason after a stop-with-savepoint; its message is the prefix and the savepoint's
# path, which the operator reads back when it lost the answer of the call (it restarted meanwhile).
STOPPED_WITH_SAVEPOINT: Final = "StoppedWithSavepoint"
STOPPED_WITH_SAVEPOINT_PREFIX: Final = "stopped after savepoint "

# --- Start-up phases of a driver attempt (status document `phases` keys, metric label values) ----
# Each is reported once, in seconds from the driver process's start (`startedAt`): the runtime's
# metric `headrace_runtime_phase_seconds{phase=...}` (0 until reached) and the status document.
PHASE_JVM_STARTED: Final = "jvm_started"  # the script's SparkSession builder launched the JVM
PHASE_SPARK_CONTEXT_READY: Final = "spark_context_ready"
PHASE_EXECUTORS_REGISTERED: Final = "executors_registered"  # the first executor (local mode: none needed)
PHASE_QUERIES_STARTED: Final = "queries_started"  # the script's first query started
PHASE_FIRST_BATCH: Final = "first_batch_committed"  # the first batch of this attempt finished
STARTUP_PHASES: Final = (
    PHASE_JVM_STARTED,
    PHASE_SPARK_CONTEXT_READY,
    PHASE_EXECUTORS_REGISTERED,
    PHASE_QUERIES_STARTED,
    PHASE_FIRST_BATCH,
)
# Reached by a standby driver only (status document `phases`, no metric): when it was promoted
PHASE_PROMOTED: Final = "promoted"
# Reached by a standby driver only (status document `phases`, no metric): its warm-up query ended
PHASE_WARMED_UP: Final = "warmed_up"
