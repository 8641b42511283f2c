"""Pre-warmed upgrades (spec.standby.prewarmUpgrades): the new driver warms while the old one keeps processing.

    spec change applied with upgradeMode savepoint or last-state while the driver runs, pre-warming on:
      pending={Upgrade, Prewarm, target}: the old attempt's standby (if any) is removed, then the new
      spec's driver is created as a standby (it runs the script up to its first query start):
        savepoint  -> attempt 1 of run n+1 (what it restores is handed over when it is promoted)
        last-state -> attempt a+1 of run n (the run's checkpoint)
    the new driver waits at its first query start (its status says atGate):
        savepoint  -> savepoints.begin_upgrade: stop-with-savepoint of the old driver; once it succeeded, the
                      new run's attempt finds its driver there, the fence (`continue_start`) waits until the
                      old pod is gone, and the driver is promoted with the savepoint to restore
        last-state -> next_attempt: the fence removes the old driver (it exits at once: the checkpoint is
                      consistent at any point), then the new driver is promoted
    the new driver ends, or has not reached its gate within restartPolicy.startTimeout -> the upgrade is
      refused before the old driver is touched: the new driver is removed, the old one keeps running, this
      spec is not retried until it changes (UpgradeNotRetried)
    the old driver stops running meanwhile, or the spec changes again -> the pre-warm is dropped (its driver
      removed) and the next decision starts over from what it then sees

Never two writers on one checkpoint: the pre-warmed driver writes nothing before it is promoted, and it is
promoted only once every other driver of the app is gone (`standby.tend`), as a warm standby is.
Never: I/O or the clock.
"""

from __future__ import annotations

from headrace.api.models import PrewarmUpgrade, RunStatus, StreamingAppSpec
from headrace.core import savepoints, standby
from headrace.core.attempts import delete_pods, ensure, expected_commits, next_attempt, planned_run
from headrace.core.builder import Builder
from headrace.core.durations import parse_duration
from headrace.core.observation import DriverPod, Observation
from headrace.core.plan import OPERATION, Started
from headrace.core.timefmt import format_time, parse_time

PREWARM_POLL_SECONDS = 2.0  # how often a warming driver is asked whether it reached its gate
FENCE_POLL_SECONDS = 1.0


def wanted(spec: StreamingAppSpec) -> bool:
    """Whether an upgrade to `spec` is pre-warmed: savepoint or last-state, a continuous job, and
    standby.prewarmUpgrades (unset: as standby.enabled, whose standby the pre-warmed driver replaces)."""
    if spec.mode != "continuous" or spec.upgradeMode not in ("savepoint", "last-state"):
        return False
    chosen = spec.standby.prewarmUpgrades
    return standby.wanted(spec) if chosen is None else chosen


def target(builder: Builder, spec: StreamingAppSpec, run: RunStatus, *, move: bool = False) -> RunStatus:
    """The attempt the upgrade to `spec` starts: run n+1 for a savepoint (restore source not known yet), else
    the next attempt of the run on its checkpoint (as `attempts.next_attempt` will record it); a move (the same
    spec off a drained node, `headrace.core.drain`), always the latter: it keeps the run whatever the upgrade mode."""
    if spec.upgradeMode == "savepoint" and not move:
        return planned_run(builder, spec, run=run.number + 1, attempt=1, restore_from=None)
    return planned_run(builder, spec, run=run.number, attempt=run.attempt + 1, restore_from=run.restoredFrom)


def begin(
    builder: Builder, spec: StreamingAppSpec, observation: Observation, pod: DriverPod, *, move: str | None = None
) -> None:
    """Start pre-warming the upgrade to `spec` beside the running driver `pod` (with `move`, why: the same spec,
    moved off its node)."""
    run = builder.status.run
    assert run is not None
    goal = target(builder, spec, run, move=move is not None)
    recorded = builder.app.status.pendingOperation
    if recorded is None or recorded.kind != "Upgrade":
        builder.start(Started("upgrade", OPERATION))
    pending = PrewarmUpgrade(
        startedAt=format_time(builder.now), targetSpecHash=goal.specHash, prewarmDriver=goal.driverPod, move=move
    )
    builder.status.pendingOperation = pending
    if move is not None:
        builder.event(
            "DriverMoving",
            f"{move}: starting driver {goal.driverPod} on another node as a warm standby; driver {pod.name} keeps "
            "processing until it waits at its first query start",
        )
    else:
        builder.event(
            "UpgradePrewarming",
            f"upgradeMode {spec.upgradeMode}: starting driver {goal.driverPod} with the new spec as a warm standby; "
            f"driver {pod.name} keeps processing until it waits at its first query start",
        )
    builder.phase("Upgrading", f"pre-warming driver {goal.driverPod}")
    builder.condition("Progressing", "True", "Prewarming", f"driver {goal.driverPod} warms up")
    proceed(builder, spec, observation, pod, pending)


def proceed(
    builder: Builder, spec: StreamingAppSpec, observation: Observation, pod: DriverPod | None, pending: PrewarmUpgrade
) -> None:
    """One step of the pending pre-warm (`pod`: the running, old driver)."""
    run = builder.status.run
    assert run is not None
    moving = pending.move is not None
    goal = target(builder, spec, run, move=moving)
    new = observation.driver(goal.number, goal.attempt)
    if pending.targetSpecHash != goal.specHash:
        _drop(builder, new, "the spec changed again: starting over with the newest spec")
        return
    if pod is None or pod.phase != "Running" or pod.deleting:
        _drop(builder, new, f"driver {run.driverPod} stopped running meanwhile")
        return
    if new is None or new.spec_hash != goal.specHash:  # not there yet, or the old spec's standby in its place
        _create(builder, spec, observation, goal, new)
        return
    if not _at_gate(builder, spec, observation, new, pod, pending=pending):
        return
    builder.event("UpgradePrewarmed", f"driver {new.name} waits at its first query start: stopping driver {pod.name}")
    if spec.upgradeMode == "savepoint" and not moving:
        savepoints.begin_upgrade(builder, spec, pod)
    else:
        builder.event("LastStateUpgrade", f"driver {new.name} takes over the checkpoint of run {run.number}")
        next_attempt(builder, spec, observation, why="Upgrading")


def _at_gate(
    builder: Builder,
    spec: StreamingAppSpec,
    observation: Observation,
    new: DriverPod,
    old: DriverPod,
    *,
    pending: PrewarmUpgrade,
) -> bool:
    """Whether the new driver waits at its gate; if not, wait for it, or refuse the upgrade when it failed."""
    if new.deleting and new.created_at is not None and new.created_at < parse_time(pending.startedAt):
        builder.requeue(FENCE_POLL_SECONDS)  # left by an earlier, dropped pre-warm of the same spec: wait it out
        return False
    if new.deleting or new.terminated:
        why = new.message or new.reason or ("deleted" if new.deleting else f"exit code {new.exit_code}")
        _refuse(builder, new, old, pending, f"it ended before its first query start: {why}")
        return False
    if observation.prewarmed is not None and observation.prewarmed.at_gate:
        return True
    waited = (builder.now - new.created_at).total_seconds() if new.created_at is not None else 0.0
    timeout = parse_duration(spec.restartPolicy.startTimeout)
    if waited < timeout:
        builder.requeue(min(PREWARM_POLL_SECONDS, timeout - waited))
        return False
    waiting = f" ({new.waiting})" if new.waiting else ""
    _refuse(
        builder,
        new,
        old,
        pending,
        f"it did not reach its first query start within restartPolicy.startTimeout "
        f"({spec.restartPolicy.startTimeout}){waiting}; check spec.image, the script and the cluster's "
        "capacity, or raise restartPolicy.startTimeout",
    )
    return False


def _create(
    builder: Builder, spec: StreamingAppSpec, observation: Observation, goal: RunStatus, new: DriverPod | None
) -> None:
    """Remove what stands in the way (a standby of the old spec, in the new driver's place or not), then create
    the new driver as a standby."""
    run = builder.status.run
    assert run is not None
    following = observation.driver(run.number, run.attempt + 1)
    in_the_way = {
        pod.name: pod
        for pod in (new, following)
        if pod is not None and (pod.name != goal.driverPod or pod.spec_hash != goal.specHash)
    }
    if in_the_way:
        delete_pods(builder, tuple(in_the_way.values()), "replaced by an upgrade's pre-warmed driver")
        builder.requeue(FENCE_POLL_SECONDS)
        return
    commits = expected_commits(builder) if goal.number == run.number else ()
    builder.actions.append(ensure(spec, goal, commits, standby=True, keep=run, compare_checkpoint=run.checkpointDir))
    builder.requeue(PREWARM_POLL_SECONDS)


def _refuse(builder: Builder, new: DriverPod, old: DriverPod, pending: PrewarmUpgrade, why: str) -> None:
    """The new driver failed before its gate: the upgrade is refused; the old driver was never touched (a move
    blames no spec: it is tried again while the node still drains)."""
    if pending.move is not None:
        _drop(builder, new, f"the new driver {new.name} failed: {why}; driver {old.name} keeps running")
        return
    builder.status.pendingOperation = None
    builder.status.failedSpecHash = pending.targetSpecHash
    delete_pods(builder, (new,), "pre-warmed upgrade driver failed")
    message = (
        f"the upgrade's new driver {new.name} failed: {why}. Driver {old.name} was not stopped and keeps running the "
        "previous spec; fix the spec and apply it again"
    )
    builder.status.restarts = builder.status.restarts.model_copy(  # what UpgradeNotRetried repeats; not a restart
        update={"lastFailureReason": "UpgradePrewarmFailed", "lastFailureMessage": message}
    )
    builder.report_error("UpgradePrewarmFailed", message)
    builder.condition("Progressing", "False", "UpgradePrewarmFailed", message)
    builder.phase("Running", "the driver keeps running the previous spec")
    builder.requeue(0)


def _drop(builder: Builder, new: DriverPod | None, why: str) -> None:
    """Give the pre-warm up without a verdict on the spec (the next decision starts over)."""
    builder.status.pendingOperation = None
    if new is not None:
        delete_pods(builder, (new,), "pre-warm dropped")
    builder.event("UpgradePrewarmDropped", why)
    builder.condition("Progressing", "False", "UpgradePrewarmDropped", why)
    builder.requeue(0)
