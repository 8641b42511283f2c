"""What the observer saw, as plain immutable data the planner decides on.

Never: I/O. The controller's observer builds these from Kubernetes objects.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from headrace.api.models import SavepointReason

PodPhase = Literal["Pending", "Running", "Succeeded", "Failed", "Unknown"]


@dataclass(frozen=True)
class DriverPod:
    """One driver pod of the app, of any run and attempt."""

    name: str
    run: int
    attempt: int
    phase: PodPhase
    deleting: bool = False
    reason: str | None = None  # e.g. Evicted, OOMKilled, Error, the runtime's termination reason
    message: str | None = None
    exit_code: int | None = None
    running_since: datetime | None = None
    ip: str | None = None
    control_tls: bool = True  # False: a pod from before the control endpoint had TLS (it serves plain HTTP)
    savepoint_path: str | None = None  # set when the runtime exited after stop-with-savepoint
    created_at: datetime | None = None
    waiting: str | None = None  # why a pod that has not started waits (Unschedulable, ImagePullBackOff: ...)
    standby: bool = False  # created as a warm standby (it waits for promotion until promoted)
    spec_hash: str | None = None  # the spec it was created with (its label)
    lease_guarded: bool = False  # its driver writes only while holding the app's driver Lease (HEADRACE_DRIVER_LEASE)
    deletion_due: datetime | None = None  # deleting: when its grace period ends (its deletionTimestamp)
    node: str | None = None  # the node it was scheduled to
    node_draining: bool = False  # ... which is being emptied: cordoned or tainted for removal (`core.drain`)
    writer: bool = False  # labelled as the writing driver (the one the PodDisruptionBudget protects)
    executor_budget: int | None = None  # ... with its executors' budget made for this many (None: not labelled so)
    # a writer: one of its attempt's executors (which their budget keeps from eviction) is on a node being drained
    executors_draining: bool = False
    containers_terminated: bool = False  # its kubelet reports every container of the pod terminated
    node_ready: bool = False  # its node was read Ready and reachable (False: unknown, not Ready, unreachable, gone)
    node_lost: bool = False  # its node was read not Ready (NotReady, Unknown, unreachable) or gone (False: unknown)

    @property
    def terminated(self) -> bool:
        """The pod's containers have stopped for good."""
        return self.phase in ("Succeeded", "Failed")


@dataclass(frozen=True)
class BatchTotals:
    """What the driver's batches added up to since it started, summed over its queries."""

    batches: int
    input_rows: int
    busy_seconds: float


@dataclass(frozen=True)
class DriverProgress:
    """What the driver's runtime reports about its queries, summed over queries."""

    last_batch_id: int | None = None
    last_batch_time: datetime | None = None
    input_rows_per_second: float | None = None
    processed_rows_per_second: float | None = None
    watermark: str | None = None
    state_rows: int | None = None
    source_backlog: float | None = None
    registered_executors: int | None = None
    requested_executors: int | None = None
    ready: bool = False  # the runtime runs queries: savepoints can be taken
    standby: bool = False  # the runtime is a standby waiting for promotion
    at_gate: bool = False  # ... and its script reached its first query start (JVM, SparkContext, executors warm)
    savepointing: bool = False  # a savepoint or stop-with-savepoint is underway (or the driver stops after one)
    last_savepoint: str | None = None  # path of the last savepoint the driver took
    committed: tuple[tuple[str, int], ...] = ()  # (query key, last committed batch id) per query
    started_at: datetime | None = None  # when the driver process started (the runtime's clock)
    phases: tuple[tuple[str, float], ...] = ()  # start-up phase -> seconds from started_at, in the order reached
    # the autoscaler's signals
    totals: BatchTotals | None = None
    executor_cores: int | None = None  # task slots of the registered executors
    executors_since: datetime | None = None  # since when that many executors are registered
    source_partitions: int | None = None  # the most Kafka partitions a query reads
    stateful: bool = False  # a query keeps state (spec.state.partitions bounds its parallelism)
    back_to_back: bool = False  # a query runs its batches back to back (no processing-time trigger)

    def phase_at(self, phase: str) -> datetime | None:
        """When the driver reached a start-up phase, if it reported it."""
        seconds = dict(self.phases).get(phase)
        if self.started_at is None or seconds is None:
            return None
        return self.started_at + timedelta(seconds=seconds)


SavepointPhase = Literal["Pending", "InProgress", "Succeeded", "Failed"]


@dataclass(frozen=True)
class SavepointResource:
    """One StreamingSavepoint of the app."""

    name: str
    reason: SavepointReason
    phase: SavepointPhase | None = None
    path: str | None = None  # status.path (where it is)
    import_path: str | None = None  # spec.path (the user imports an existing savepoint)
    batch_id: int | None = None
    time: str | None = None
    created_at: datetime | None = None
    operator_made: bool = False

    @property
    def done(self) -> bool:
        """Finished, one way or the other."""
        return self.phase in ("Succeeded", "Failed")


@dataclass(frozen=True)
class Refusal:
    """The API server refused an object of an attempt (admission, validation): what and why, as it said."""

    run: int
    attempt: int
    what: str  # e.g. "Pod clicks-r1-a2-driver"
    message: str
    dry_run: bool = False  # refused while checking, before anything was removed


@dataclass(frozen=True)
class ExecutorPod:
    """An executor pod of the app being deleted (listed only while the driver is short of executors)."""

    name: str
    node: str | None
    deleting: bool
    deletion_due: datetime | None = None
    terminated: bool = False
    node_lost: bool = False  # its node is not Ready (NotReady or Unknown): nothing will confirm its deletion


@dataclass(frozen=True)
class DriverLease:
    """The app's driver Lease as the operator last read it, and since when (the operator's clock) it has read that
    same record: an unchanged record is how the operator tells, on its own clock, that its holder stopped renewing."""

    holder: str | None  # None: released, or never taken
    lease_seconds: int
    unchanged_since: datetime
    exists: bool = True  # False: there is no Lease (unchanged_since: since the operator first found none)


@dataclass(frozen=True)
class Observation:
    """Everything the planner may look at besides spec and status."""

    drivers: tuple[DriverPod, ...] = ()
    savepoints: tuple[SavepointResource, ...] = ()
    progress: DriverProgress | None = None  # from the current driver's control endpoint, when it answered
    refused: Refusal | None = None  # set by the controller when creating (or checking) an attempt was refused
    unanswered: bool = False  # the current driver was asked for its status and did not answer (a missed heartbeat)
    savepoints_in_flight: frozenset[str] = frozenset()  # StreamingSavepoints this operator is asking a driver for
    prewarmed: DriverProgress | None = None  # a pre-warmed upgrade's new driver (pendingOperation Upgrade/Prewarm)
    lease: DriverLease | None = None  # the driver Lease, read when a guarded driver is stuck deleting or unanswered
    executors: tuple[ExecutorPod, ...] = ()  # executor pods being deleted, listed while the driver is short of them
    # the running driver's warm standby shares its node, and another node (known, trusted) could take the standby
    # now (False: not so, or not known: an operator that may not watch Nodes, a single-node cluster)
    other_node_free: bool = False

    def savepoint(self, name: str) -> SavepointResource | None:
        """A StreamingSavepoint of the app by name."""
        return next((item for item in self.savepoints if item.name == name), None)

    def driver(self, run: int, attempt: int) -> DriverPod | None:
        """The pod of one attempt, if it exists."""
        return next((pod for pod in self.drivers if pod.run == run and pod.attempt == attempt), None)

    def others(self, run: int, attempt: int) -> tuple[DriverPod, ...]:
        """Every driver pod that is not the given attempt's (the fence waits for these to be gone)."""
        return tuple(pod for pod in self.drivers if not (pod.run == run and pod.attempt == attempt))
