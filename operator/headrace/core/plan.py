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


@dataclass(frozen=True)
class DeletePod:
    """Delete a driver pod (its executors follow through owner references)."""

    name: str
    reason: str


@dataclass(frozen=True)
class RescaleInPlace:
    """Ask the running driver for a new executor total through its control endpoint."""

    pod: str
    address: str | None
    executors: int


Action = EnsureDriver | DeletePod | RescaleInPlace


@dataclass(frozen=True)
class Event:
    """A Kubernetes Event about the app (reason in CamelCase)."""

    type: Literal["Normal", "Warning"]
    reason: str
    message: str


@dataclass(frozen=True)
class Plan:
    """What to do now: record `status` first, then act, then reconcile again after `requeue_after`."""

    status: StreamingAppStatus
    actions: tuple[Action, ...] = ()
    events: tuple[Event, ...] = ()
    requeue_after: float | None = None
    notes: tuple[str, ...] = field(default=())
