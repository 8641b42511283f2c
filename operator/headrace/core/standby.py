"""The warm standby driver (spec.standby): when to create it, which pod is the standby, when to promote it.

The standby of attempt `a` of a run is the pod of attempt `a + 1`, created early (label headrace.dev/standby,
HEADRACE_STANDBY=true) with the spec the run runs: it waits at its script's first query start. When the running
driver is lost, the next attempt is started as on any restart, without the backoff; the fence of
`attempts.continue_start` removes the lost driver (and waits until its pod is gone) and finds attempt `a + 1`
already there; then the current driver is promoted, only while no other driver of the app but a later standby
exists. A standby on a lost node (`fence.stranded`) is never promoted nor kept: a lost driver is then recovered
through a fresh attempt at once (the standby's pod is removed first: `attempts.continue_start`), and a standby lost
while the driver runs is removed and replaced (event StandbyLost). A new standby is created once the current driver
committed a batch. A standby that shares the running driver's node (made while no other node could take it: the
drivers' anti-affinity is only preferred, and a scheduled pod never moves) is removed once another node could
(event StandbyMoved), at most once per MOVE_EVERY: its replacement then goes elsewhere. Anything else about a standby
(another spec, failed, disabled, a new run, suspended) removes it; a spec change starts it afresh.
Every driver holds the app's driver Lease while it writes (`headrace.core.fence`), a standby once promoted.
Never: I/O or the clock.
"""

from __future__ import annotations

from datetime import timedelta

from headrace.api.models import RunStatus, StreamingAppSpec
from headrace.core import fence
from headrace.core.attempts import ensure, expected_commits, may_repartition
from headrace.core.builder import Builder, parse_spec_json, spec_hash
from headrace.core.observation import DriverPod, Observation
from headrace.core.plan import DeletePod, PromoteDriver
from headrace.core.timefmt import format_time, parse_time

# The least time between two moves of an app's standby off its driver's node: a move the scheduler could not honour
# (the other node lacks room, or the pod's required node affinity excludes it) costs a standby's warm-up, not a loop.
MOVE_EVERY = timedelta(minutes=10)


def wanted(spec: StreamingAppSpec) -> bool:
    """Whether the app runs a warm standby (enabled, and a continuous job: a bounded one has nothing to take over)."""
    return spec.standby.enabled and spec.mode == "continuous"


def _running_spec(builder: Builder) -> StreamingAppSpec | None:
    return parse_spec_json(builder.status.lastReconciledSpec)


def kept(builder: Builder, spec: StreamingAppSpec, observation: Observation, run: RunStatus) -> DriverPod | None:
    """The standby of the current attempt worth keeping: wanted, not failing, not on a lost node, created with the
    running spec."""
    running = _running_spec(builder)
    pod = observation.driver(run.number, run.attempt + 1)
    if running is None or pod is None or not pod.standby or pod.terminated or pod.deleting or fence.stranded(pod):
        return None
    if not wanted(spec) or pod.spec_hash != spec_hash(running):
        return None
    return pod


def ready(builder: Builder, spec: StreamingAppSpec, observation: Observation, run: RunStatus) -> DriverPod | None:
    """The kept standby, when its pod runs (its JVM is up or coming up): a loss is then recovered through it."""
    pod = kept(builder, spec, observation, run)
    return pod if pod is not None and pod.phase == "Running" else None


def tend(builder: Builder, spec: StreamingAppSpec, observation: Observation, pod: DriverPod) -> None:
    """While the current driver runs: promote it if it is a standby waiting; create a standby once it committed."""
    run = builder.status.run
    assert run is not None
    if pod.standby and _waiting(observation):
        others = [
            other
            for other in observation.others(run.number, run.attempt)
            if not (other.standby and other.run == run.number and other.attempt > run.attempt)
        ]
        if not others:  # the fence: no other driver of the app (continue_start waited for them to be gone)
            promote = PromoteDriver(
                pod=pod.name,
                address=pod.ip,
                control_tls=pod.control_tls,
                restore_from=run.restoredFrom,  # a pre-warmed savepoint upgrade learns it only now
                allow_repartition=may_repartition(spec, run),
            )
            builder.actions.append(promote)
            builder.event("StandbyPromoted", f"standby driver {pod.name} starts the queries of run {run.number}")
        return
    following = observation.driver(run.number, run.attempt + 1)
    planned = {action.name for action in builder.actions if isinstance(action, DeletePod)}
    ended = following is not None and following.terminated and not following.deleting
    if following is not None and following.standby and ended and following.name not in planned:
        builder.actions.append(DeletePod(name=following.name, reason="standby driver ended"))
        message = f"standby driver {following.name} ended ({following.reason}); replaced"
        builder.event("StandbyFailed", message, warning=True)
        return
    if following is not None and _move(builder, observation, pod, following, planned):
        return
    running = _running_spec(builder)
    committed = observation.progress is not None and bool(observation.progress.committed)
    if following is None and running is not None and committed and wanted(spec):
        following_run = run.model_copy(update={"attempt": run.attempt + 1})
        builder.actions.append(ensure(running, following_run, expected_commits(builder), standby=True, keep=run))
        builder.event("StandbyStarting", f"warm standby driver for attempt {run.attempt + 1} of run {run.number}")


def _move(builder: Builder, observation: Observation, pod: DriverPod, following: DriverPod, planned: set[str]) -> bool:
    """Remove a waiting standby that shares the running driver's node once another node could take it (one node's
    loss would take both), unless one was moved within MOVE_EVERY. True when it did."""
    run = builder.status.run
    assert run is not None
    shared = following.standby and following.node is not None and following.node == pod.node
    live = not (following.terminated or following.deleting or pod.deleting) and following.name not in planned
    if not (shared and live and observation.other_node_free):
        return False
    last = parse_time(run.standbyMovedAt) if run.standbyMovedAt else None
    if last is not None and builder.now - last < MOVE_EVERY:
        return False
    builder.actions.append(DeletePod(name=following.name, reason=f"shares node {pod.node} with the running driver"))
    run.standbyMovedAt = format_time(builder.now)
    message = (
        f"standby driver {following.name} shares node {pod.node} with the running driver {pod.name}; moved so that "
        "one node's loss does not take both"
    )
    builder.event("StandbyMoved", message)
    return True


def stranded(pod: DriverPod, observation: Observation) -> bool:
    """The current driver is a standby not yet running its queries (perhaps promoted, never answering as such) on a
    lost node: the app recovers without it, as from a failed driver."""
    return fence.stranded(pod) and _waiting(observation)


def _waiting(observation: Observation) -> bool:
    """The current driver has not started its queries as a standby (or has not answered yet: promoting is
    idempotent, and a driver not yet at its gate passes it once promoted)."""
    progress = observation.progress
    return progress is None or progress.standby
