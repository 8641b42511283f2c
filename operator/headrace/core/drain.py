"""Drains as handovers: a driver on a node that is being drained moves off it through the pre-warmed path.

The driver that runs the app's queries is labelled its writer (`MarkWriter`), the one the app's PodDisruptionBudget
(`render.manifests.driver_disruption_budget`) keeps from eviction. A node is being drained when it is cordoned
(spec.unschedulable, as `kubectl drain` and Karpenter do first) or carries a cluster autoscaler's or Karpenter's
disruption taint (`DRAIN_TAINTS`); the observer says so per pod (`DriverPod.node_draining`), and of the writer when
a node of its attempt's executors is (`DriverPod.executors_draining`: their own budget,
`render.manifests.executor_disruption_budget`, holds their eviction). The budgets refuse the eviction of the writer
and of its executors, so the drain waits, while the operator

    removes a warm standby on a drained node (a new one is made on another node once the driver runs there);
    moves a continuous job's running driver (on a drained node, or with executors there) with a pre-warmed driver
    (`prewarm.begin(move=...)`): the next attempt of the run, created as a standby, is scheduled on another node
    (the drained one takes no new pod) and warms while the old one keeps processing; once it waits at its first
    query start, the old driver is stopped and the new one promoted on the run's checkpoint (as a last-state
    upgrade, whatever the upgrade mode), so the drain's pause is the one of a pre-warmed upgrade; the old pod and
    its executors are then gone (deleted, not evicted) and the drain goes on;
    restarts a bounded job's driver on another node (nothing to pre-warm: it resumes from its checkpoint).

A move is begun only while nothing else is under way and the spec is the running one (an upgrade pending moves the
driver anyway: its new driver is scheduled elsewhere). A new driver that fails before its gate drops the move
without blaming the spec; it is tried again while the node still drains.
Never: I/O or the clock.
"""

from __future__ import annotations

from headrace.api.models import StreamingAppSpec
from headrace.core import prewarm
from headrace.core.attempts import delete_pods, next_attempt
from headrace.core.builder import Builder, parse_spec_json
from headrace.core.changes import classify_change
from headrace.core.observation import DriverPod, Observation
from headrace.core.plan import MarkWriter

# Taints a node carries while it is emptied: cordoned (the node lifecycle controller's taint for
# spec.unschedulable), the cluster autoscaler's scale-down, Karpenter's disruption (v1, and v0.3x's key).
DRAIN_TAINTS = frozenset(
    {
        "node.kubernetes.io/unschedulable",
        "ToBeDeletedByClusterAutoscaler",
        "karpenter.sh/disrupted",
        "karpenter.sh/disruption",
    }
)


def draining(unschedulable: bool, taint_keys: frozenset[str]) -> bool:
    """Whether a node with these settings is being emptied (its pods are about to be evicted)."""
    return unschedulable or bool(taint_keys & DRAIN_TAINTS)


def tend(builder: Builder, spec: StreamingAppSpec, observation: Observation, pod: DriverPod) -> bool:
    """While the current driver `pod` runs and nothing is under way: move what runs on a drained node off it.
    True when it acted (the rest of the decision waits for the next one)."""
    run = builder.status.run
    assert run is not None
    progress = observation.progress
    executors = builder.status.executors or spec.executor.instances  # (0: a status from before it counted them)
    labelled = pod.writer and pod.executor_budget == executors
    if not labelled and progress is not None and progress.ready and not pod.deleting:
        # it writes: from now on its eviction, and its executors', waits for a handover (the executors' budget
        # follows its executor count: made again after an in-place rescale or the autoscaler's)
        builder.actions.append(MarkWriter(name=pod.name, run=pod.run, attempt=pod.attempt, executors=executors))
    running = parse_spec_json(builder.status.lastReconciledSpec)
    following = observation.driver(run.number, run.attempt + 1)
    if following is not None and following.standby and following.node_draining and not following.deleting:
        delete_pods(builder, (following,), f"node {following.node} is being drained")
        builder.event("StandbyMoved", f"standby driver {following.name} left node {following.node}, being drained")
        return True
    if (
        not (pod.node_draining or pod.executors_draining)
        or running is None
        or classify_change(running, spec) is not None
    ):
        return False
    why = f"node {pod.node} is being drained" if pod.node_draining else "a node of its executors is being drained"
    if spec.mode != "continuous":
        builder.event("DriverMoving", f"{why}: restarting driver {pod.name} on another node from its checkpoint")
        next_attempt(builder, running, observation, why="Restarting")
        return True
    if progress is None or not progress.ready:
        return False  # a driver still starting moves once it runs its queries (a pre-warm compares against them)
    prewarm.begin(builder, running, observation, pod, move=why)
    return True
