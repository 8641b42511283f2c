"""Where a driver attempt's start-up went, from the loss it replaces to its first committed batch.

Owns: the FirstBatch event's message: the operator's own moments (the failure it recovers from, pod
created, container started) and the runtime's start-up phases (JVM, SparkContext, executors, queries,
first batch), each as seconds from one anchor: the failure when the attempt replaces a failed driver,
else the pod's creation (a deploy, an upgrade, a resume).
Never: I/O or the clock.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Final

from headrace.api import runtime_contract as contract
from headrace.core.observation import DriverPod, DriverProgress
from headrace.core.timefmt import format_time

FIRST_BATCH_EVENT: Final = "FirstBatch"
CREATION_PRECISION: Final = timedelta(seconds=1)  # creationTimestamp is truncated to the second
PHASE_LABELS: Final = {
    contract.PHASE_JVM_STARTED: "JVM",
    contract.PHASE_SPARK_CONTEXT_READY: "SparkContext",
    contract.PHASE_EXECUTORS_REGISTERED: "executors",
    contract.PHASE_QUERIES_STARTED: "queries started",
    contract.PHASE_FIRST_BATCH: "first batch",
}


def first_batch_message(pod: DriverPod, progress: DriverProgress, failed_at: datetime | None) -> str | None:
    """The FirstBatch event's message, or None when the driver has not reported its first batch.

    `failed_at` is the failure the attempt recovers from (None for a deploy, an upgrade or a resume); a
    failure after the pod's creation (Kubernetes keeps whole seconds of it) is not this attempt's cause and is
    ignored."""
    first = progress.phase_at(contract.PHASE_FIRST_BATCH)
    if first is None or progress.started_at is None:
        return None
    if failed_at is not None and pod.created_at is not None and failed_at > pod.created_at + CREATION_PRECISION:
        failed_at = None
    anchor = failed_at or pod.created_at or progress.started_at
    moments = [("pod created", pod.created_at), ("container started", pod.running_since)]
    moments += [(PHASE_LABELS.get(phase, phase), progress.phase_at(phase)) for phase, _ in progress.phases]
    steps = ", ".join(f"{what} +{_seconds(anchor, moment):.1f}s" for what, moment in moments if moment is not None)
    since = f"the failure at {format_time(failed_at)}" if failed_at else "the pod's creation"
    return (
        f"driver {pod.name} (run {pod.run}, attempt {pod.attempt}) committed its first batch "
        f"{_seconds(anchor, first):.1f}s after {since}: {steps}"
    )


def _seconds(anchor: datetime, moment: datetime) -> float:
    return max((moment - anchor).total_seconds(), 0.0)
