"""Executors lost with their node: Spark's allocator replaces them only once their pod is gone.

What Spark does (`ExecutorPodsSnapshot`, `ExecutorPodsAllocator`): a deleted executor pod counts as gone only once its
phase is no longer Running; a pod on a lost node keeps phase Running (no kubelet reports anything), also once it is
deleted, so the allocator counts it towards `spark.executor.instances` and requests no replacement, while the driver
has already removed the executor (its heartbeats stopped: `spark.network.timeout`) and asked for its pod's deletion.
The app then runs short of executors until the pod object is gone (the node returns, or its Node object is deleted).

The operator confirms what Spark already decided: an executor pod that is being deleted, whose grace period (plus
`fence.FENCE_MARGIN_SECONDS`) has passed, on a node that is not Ready (lost: no kubelet will ever confirm), is
force-deleted (grace 0), and Spark's allocator replaces it. Safe: the driver has given that executor up, and
output of a lost executor's task is never committed (its task is run again elsewhere). The controller lists an
app's executor pods only when its driver reports fewer registered executors than it requested.
Never: I/O or the clock.
"""

from __future__ import annotations

from headrace.core import fence
from headrace.core.builder import Builder
from headrace.core.observation import ExecutorPod, Observation
from headrace.core.plan import DeletePod

FORCE_DELETED = "ExecutorForceDeleted"


def short(observation: Observation) -> bool:
    """The driver reports fewer registered executors than it asked for (so one may be stuck on a lost node)."""
    progress = observation.progress
    if progress is None or progress.registered_executors is None or progress.requested_executors is None:
        return False
    return progress.registered_executors < progress.requested_executors


def stuck(pod: ExecutorPod, builder: Builder) -> bool:
    """Deleted, past its grace period and the margin, not terminated, on a node that is not Ready."""
    if not pod.deleting or pod.terminated or not pod.node_lost:
        return False
    due = pod.deletion_due or builder.now
    return (builder.now - due).total_seconds() >= fence.FENCE_MARGIN_SECONDS


def confirm_lost(builder: Builder, observation: Observation) -> None:
    """Force-delete the executor pods Spark gave up that are stuck on lost nodes."""
    gone = [pod for pod in observation.executors if stuck(pod, builder)]
    for pod in gone:
        builder.actions.append(DeletePod(name=pod.name, reason="executor stuck on a lost node", grace_seconds=0))
    if gone:
        listed = ", ".join(f"{pod.name} (node {pod.node})" for pod in gone)
        builder.event(
            FORCE_DELETED,
            f"executor pods stuck Terminating on nodes that are not Ready, force-deleted so that Spark replaces them: "
            f"{listed}",
            warning=True,
        )
