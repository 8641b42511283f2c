"""The planner's output: the status to record (the intent), the actions to carry out, events to post.

Never: I/O. Actions are data; `headrace.controller` carries them out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from headrace.api.models import StreamingAppSpec, StreamingAppStatus


@dataclass(frozen=True)
class EnsureDriver:
    """Create (idempotently) the driver pod of an attempt and everything it needs."""

    run: int
    attempt: int
    spec: StreamingAppSpec
    checkpoint_dir: str
    restore_from: str | None = None
    allow_repartition: bool = False
    check_only: bool = False  # a server-side dry run (dryRun=All): would the API server accept these objects?
    expected_commits: tuple[tuple[str, int], ...] = ()  # (query key, batch) earlier attempts of the run committed
    standby: bool = False  # a warm standby of the next attempt, beside the running driver (spec.standby)
    keep: tuple[int, int] | None = None  # (run, attempt) of the driver that keeps running beside it: its objects stay
    # The run's previous attempt ran with the app's shared objects and failed once since the run was healthy: the
    # controller may create only this attempt's own objects (`attempts.after_ran`).
    after_ran: bool = False
    # A pre-warmed upgrade's new driver checks at its gate that its first query can read this checkpoint's state (the
    # running driver's), so an incompatible upgrade is refused before that driver stops.
    compare_checkpoint: str | None = None


@dataclass(frozen=True)
class PromoteDriver:
    """Let the current driver, created as a warm standby, start its queries (every other driver is gone)."""

    pod: str
    address: str | None
    control_tls: bool = True
    restore_from: str | None = None  # the savepoint it restores (a pre-warmed upgrade's, known only once taken)
    allow_repartition: bool = False


@dataclass(frozen=True)
class DeletePod:
    """Delete a driver pod (its executors follow through owner references); `grace_seconds` None leaves the pod's
    own termination grace period (30 s), a number shortens it (the kubelet still confirms the kill). `keep_log`: the
    pod's driver has ended, and the tail of its log is copied to the app's driver-log ConfigMap first (`headrace logs
    --previous` reads it once the pod is gone)."""

    name: str
    reason: str
    grace_seconds: int | None = None
    keep_log: bool = False


@dataclass(frozen=True)
class ReleaseDriverLease:
    """Release the app's driver Lease if `holder` (a driver pod its kubelet confirmed dead) still holds it, so the
    next driver takes it at once instead of waiting for it to expire (`headrace.core.fence.release_dead`)."""

    holder: str
    reason: str


@dataclass(frozen=True)
class MarkWriter:
    """Label the driver pod that runs the app's queries as its writer (names.WRITER): the one its
    PodDisruptionBudget keeps from eviction; first, the executors' budget is made to select its attempt's executors
    (`render.manifests.executor_disruption_budget`), so a failed label is retried with the budget already right."""

    name: str
    run: int
    attempt: int
    executors: int  # the writer's executor count: the budget's minAvailable (and the label that records it)


@dataclass(frozen=True)
class RescaleInPlace:
    """Ask the running driver for a new executor total through its control endpoint."""

    pod: str
    address: str | None
    executors: int
    control_tls: bool = True  # the pod serves the control endpoint over TLS (DriverPod.control_tls)


@dataclass(frozen=True)
class CreateSavepointResource:
    """Create the StreamingSavepoint that records a savepoint the operator takes (`dispose`: its files go with it,
    spec.savepoints.disposeOnDelete)."""

    name: str
    reason: str
    dispose: bool = False


@dataclass(frozen=True)
class TakeSavepoint:
    """Ask the running driver for a savepoint at `path` (and to stop after it, when `stop`);
    the outcome is written to the StreamingSavepoint `name`."""

    name: str
    pod: str
    address: str | None
    path: str
    reason: str
    stop: bool = False
    control_tls: bool = True  # the pod serves the control endpoint over TLS (DriverPod.control_tls)


@dataclass(frozen=True)
class SetSavepointStatus:
    """Record a savepoint's outcome without asking a driver (imports, interrupted attempts)."""

    name: str
    phase: Literal["Succeeded", "Failed"]
    path: str | None = None
    message: str = ""


@dataclass(frozen=True)
class DeleteSavepointResource:
    """Delete a StreamingSavepoint record (retention)."""

    name: str


@dataclass(frozen=True)
class SetFinalizer:
    """Add (`present`) or remove the app's finalizer headrace.dev/final-savepoint (spec.savepoints.onDeletion)."""

    present: bool


Action = (
    EnsureDriver
    | DeletePod
    | ReleaseDriverLease
    | MarkWriter
    | PromoteDriver
    | RescaleInPlace
    | CreateSavepointResource
    | TakeSavepoint
    | SetSavepointStatus
    | DeleteSavepointResource
    | SetFinalizer
)


EventType = Literal["Normal", "Warning"]


@dataclass(frozen=True)
class Event:
    """A Kubernetes Event about the app (reason in CamelCase)."""

    type: EventType
    reason: str
    message: str


Transition = Literal["deploy", "recover", "upgrade", "rescale", "suspend", "resume"]
"""The lifecycle transitions the operator times (`headrace.core.transitions`, metric headrace_transition_duration)."""

FAILURE, NEW_ATTEMPT, OPERATION, SUSPENDED, RESCALED = range(5)
"""What started a transition, the first outranking the rest when one decision starts several: a failure counted, a
new attempt or run, a stop-with-savepoint begun (upgrade, suspend), the app suspended, executors rescaled in place."""


@dataclass(frozen=True)
class Started:
    """A lifecycle transition a decision started. One of a kind in `continues` already underway goes on under this
    name, timed from its own start (the next attempt of a recover; the new run of an upgrade whose savepoint began
    it); `executors`: an in-place rescale's target."""

    transition: Transition
    cause: int
    continues: frozenset[Transition] = frozenset()
    executors: int | None = None


@dataclass(frozen=True)
class Plan:
    """What to do now: record `status` first, then act, then reconcile again after `requeue_after`; `started`: the
    lifecycle transition this decision starts, if any."""

    status: StreamingAppStatus
    actions: tuple[Action, ...] = ()
    events: tuple[Event, ...] = ()
    requeue_after: float | None = None
    notes: tuple[str, ...] = field(default=())
    started: Started | None = None
