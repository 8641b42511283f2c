"""Which lifecycle transition a decision ended, and how long it took; the age of a running app's last batch.

Owns: `Underway` (a transition in progress: which one, since when) and `step(underway, previous,
new, now, started)`, which takes the transition a decision started from its plan (`Plan.started`:
the planner says which, where it starts it), and from the status before and after it which one
ended and with what duration. The metrics observe only what `step` returns.

    deploy   first driver requested (run 1, attempt 1)       -> that driver Running (Ready True)
    recover  driver failure seen (restarts.total grew)       -> the replacement Running
    upgrade  spec change acted on (new attempt or run, or the stop-with-savepoint of an upgrade)
                                                             -> the new driver Running
    rescale  in place: status.executors changed on the same attempt
                                                             -> the driver reports that many executors
             through a savepoint: an upgrade that changes state.partitions and restores a savepoint
                                                             -> the new run Running
    suspend  the stop-with-savepoint of a suspension begins  -> phase Suspended
             (0 s when there is no driver to stop)
    resume   the first attempt started after Suspended      -> its driver Running

A transition that fails (terminal Failed, a refused upgrade or suspension) ends without being
observed; a failure during any transition turns it into a recover.
The caller keeps `Underway` between decisions (in memory). An operator that starts without it
(restart, failover) adopts the transition the status shows in progress, timed from the status
(pendingOperation.startedAt, the Progressing condition's lastTransitionTime, the last failure time);
an in-place rescale in progress cannot be recovered that way and is not observed.
Never: I/O or the clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final, get_args

from headrace.api.models import RunStatus, StreamingAppStatus
from headrace.core.conditions import get_condition
from headrace.core.plan import Started, Transition
from headrace.core.timefmt import parse_time

TRANSITIONS: Final[tuple[Transition, ...]] = get_args(Transition)


@dataclass(frozen=True)
class Underway:
    """A transition in progress: which, since when, and for an in-place rescale the executors to wait for."""

    transition: Transition
    since: datetime
    executors: int | None = None


@dataclass(frozen=True)
class Ended:
    """A transition that completed, and how long it took."""

    transition: Transition
    seconds: float


@dataclass(frozen=True)
class Step:
    """What one decision did to the transitions: the one now underway (or None) and the one it ended."""

    underway: Underway | None
    ended: Ended | None = None


def step(
    underway: Underway | None,
    previous: StreamingAppStatus,
    new: StreamingAppStatus,
    now: datetime,
    started: Started | None = None,
) -> Step:
    """A decision made at `now` that recorded `new` over `previous` and started `started` (its plan's)."""
    current = underway if underway is not None else adopted(previous)
    current = _begun(started, current, now) or current
    if current is None or new.phase in ("Failed", "Completed") or _abandoned(current, previous, new):
        return Step(None)
    if _ended(current, previous, new):
        return Step(None, Ended(current.transition, max((now - current.since).total_seconds(), 0.0)))
    return Step(current)


def adopted(status: StreamingAppStatus) -> Underway | None:
    """The transition a status shows in progress, for an operator that did not see it start."""
    pending = status.pendingOperation
    if pending is not None and pending.kind in ("Upgrade", "Suspend"):
        kind: Transition = "upgrade" if pending.kind == "Upgrade" else "suspend"
        return Underway(kind, parse_time(pending.startedAt))
    if _ready(status) or status.run is None:
        return None
    if status.phase in ("Restarting", "RolledBack"):
        times = status.restarts.failureTimes
        return Underway("recover", parse_time(times[-1])) if times else None
    progressing = get_condition(status.conditions, "Progressing")
    starting: dict[str | None, Transition] = {
        "Deploying": "deploy" if (status.run.number, status.run.attempt) == (1, 1) else "resume",
        "Upgrading": "upgrade",
    }
    if progressing is None or progressing.status != "True" or status.phase not in starting:
        return None
    return Underway(starting[status.phase], parse_time(progressing.lastTransitionTime))


def last_batch_age(status: StreamingAppStatus, now: datetime) -> float | None:
    """Seconds since the running driver last committed a batch (None: not running, or no batch yet)."""
    if not _ready(status) or status.progress is None or status.progress.lastBatchTime is None:
        return None
    return max((now - parse_time(status.progress.lastBatchTime)).total_seconds(), 0.0)


def _begun(started: Started | None, underway: Underway | None, now: datetime) -> Underway | None:
    """The transition the decision's plan started (or continued under its name), if any."""
    if started is None:
        return None
    if underway is not None and underway.transition in started.continues:
        return Underway(started.transition, underway.since)
    return Underway(started.transition, now, executors=started.executors)


def _ended(underway: Underway, previous: StreamingAppStatus, new: StreamingAppStatus) -> bool:
    if underway.transition == "suspend":
        return new.phase == "Suspended"
    if underway.executors is not None:
        registered = new.progress.registeredExecutors if new.progress is not None else None
        return _ready(new) and registered == underway.executors
    return _ready(new) and not _ready(previous)


def _abandoned(underway: Underway, previous: StreamingAppStatus, new: StreamingAppStatus) -> bool:
    """A stop-with-savepoint (upgrade, savepoint rescale, suspend) given up: the old driver keeps running."""
    if underway.transition not in ("upgrade", "rescale", "suspend") or underway.executors is not None:
        return False
    was = previous.pendingOperation.kind if previous.pendingOperation is not None else None
    return (
        was in ("Upgrade", "Suspend")
        and new.pendingOperation is None
        and _attempt(new.run) == _attempt(previous.run)
        and new.phase != "Suspended"
    )


def _ready(status: StreamingAppStatus) -> bool:
    ready = get_condition(status.conditions, "Ready")
    return ready is not None and ready.status == "True"


def _attempt(run: RunStatus | None) -> tuple[int, int] | None:
    return (run.number, run.attempt) if run is not None else None
