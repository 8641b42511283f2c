"""Turn Kubernetes objects into the planner's plain observation (reading only, no decisions)."""

from __future__ import annotations

import json
import math
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from headrace.api import names
from headrace.api import runtime_contract as contract
from headrace.api.models import PrewarmUpgrade, StreamingAppSpec, StreamingAppStatus, ThroughSavepoint
from headrace.core.observation import (
    BatchTotals,
    DriverLease,
    DriverPod,
    DriverProgress,
    ExecutorPod,
    Observation,
    PodPhase,
    SavepointPhase,
    SavepointResource,
)
from headrace.core.planner import AppView
from headrace.core.timefmt import parse_time
from headrace.core.validation import Problem

_PHASES: set[str] = {"Pending", "Running", "Succeeded", "Failed", "Unknown"}
_SAVEPOINT_PHASES: set[str] = {"Pending", "InProgress", "Succeeded", "Failed"}


def _terminated(pod: dict[str, Any]) -> dict[str, Any]:
    for container in pod.get("status", {}).get("containerStatuses") or []:
        state = container.get("state") or {}
        if "terminated" in state:
            terminated: dict[str, Any] = state["terminated"]
            return terminated
    return {}


def _all_terminated(pod: dict[str, Any]) -> bool:
    """Whether the pod's kubelet reports every container (at least one) terminated."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return bool(statuses) and all("terminated" in (item.get("state") or {}) for item in statuses)


def _running_since(pod: dict[str, Any]) -> str | None:
    for container in pod.get("status", {}).get("containerStatuses") or []:
        running = (container.get("state") or {}).get("running")
        if running and running.get("startedAt"):
            started: str = running["startedAt"]
            return started
    return None


def _termination_reason(terminated: dict[str, Any], pod_status: dict[str, Any]) -> tuple[str | None, str | None]:
    """The runtime writes {"reason", "message"} JSON as its termination message; Kubernetes adds its own."""
    message = terminated.get("message")
    if message:
        try:
            parsed = json.loads(message)
        except json.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict) and parsed.get("reason"):
            return str(parsed["reason"]), str(parsed.get("message", ""))
    reason = pod_status.get("reason") or terminated.get("reason")
    detail = pod_status.get("message") or (message.strip()[-500:] if message else None)
    return reason, detail


def serves_control_tls(pod: dict[str, Any]) -> bool:
    """Whether a driver pod serves its control endpoint over HTTPS: it mounts the app's control certificate. Only
    a pod whose spec is known to lack the volume (made before the endpoint had TLS; pod volumes never change)
    is spoken to in plain HTTP; a copy without its spec counts as TLS (the token never goes out in clear by
    default)."""
    spec = pod.get("spec")
    if spec is None:
        return True
    return any(volume.get("name") == names.CONTROL_TLS_VOLUME for volume in spec.get("volumes") or [])


def read_driver_pod(
    pod: dict[str, Any],
    draining_nodes: frozenset[str] = frozenset(),
    ready_nodes: frozenset[str] = frozenset(),
    lost_nodes: frozenset[str] = frozenset(),
) -> DriverPod | None:
    """One driver pod as the planner sees it (None if it lacks Headrace's labels); `ready_nodes`: the nodes read
    Ready (asked about only for the pods `ended_nodes` names); `lost_nodes`: the nodes read lost (of `live_nodes`)."""
    metadata = pod.get("metadata", {})
    labels = metadata.get("labels") or {}
    try:
        run, attempt = int(labels[names.RUN]), int(labels[names.ATTEMPT])
    except (KeyError, ValueError):
        return None
    status = pod.get("status") or {}
    phase_text = status.get("phase") or "Pending"
    phase: PodPhase = phase_text if phase_text in _PHASES else "Unknown"  # type: ignore[assignment]
    terminated = _terminated(pod)
    reason, message = _termination_reason(terminated, status) if terminated or phase == "Failed" else (None, None)
    started = _running_since(pod)
    created = metadata.get("creationTimestamp")
    savepoint_path = None
    if (
        reason == contract.STOPPED_WITH_SAVEPOINT
        and message
        and message.startswith(contract.STOPPED_WITH_SAVEPOINT_PREFIX)
    ):
        savepoint_path = message.removeprefix(contract.STOPPED_WITH_SAVEPOINT_PREFIX).strip()
    return DriverPod(
        name=metadata["name"],
        run=run,
        attempt=attempt,
        phase=phase,
        deleting=metadata.get("deletionTimestamp") is not None,
        reason=reason,
        message=message,
        exit_code=terminated.get("exitCode"),
        running_since=parse_time(started) if started else None,
        ip=status.get("podIP"),
        control_tls=serves_control_tls(pod),
        savepoint_path=savepoint_path,
        created_at=parse_time(created) if created else None,
        waiting=_waiting(status) if phase == "Pending" else None,
        standby=labels.get(names.STANDBY) == "true",
        spec_hash=labels.get(names.SPEC_HASH),
        lease_guarded=lease_guarded(pod),
        deletion_due=_deletion_due(metadata),
        node=(pod.get("spec") or {}).get("nodeName"),
        node_draining=(pod.get("spec") or {}).get("nodeName") in draining_nodes,
        writer=labels.get(names.WRITER) == "true",
        executor_budget=_count_label(labels.get(names.EXECUTOR_BUDGET)),
        containers_terminated=_all_terminated(pod),
        node_ready=(pod.get("spec") or {}).get("nodeName") in ready_nodes,
        node_lost=(pod.get("spec") or {}).get("nodeName") in lost_nodes,
    )


def _count_label(value: str | None) -> int | None:
    """A label's non-negative count (None: absent or not a count)."""
    return int(value) if value is not None and value.isdigit() else None


def lease_guarded(pod: dict[str, Any]) -> bool:
    """Whether the pod's driver writes only while holding the app's driver Lease: its driver container has
    HEADRACE_DRIVER_LEASE (pods made by an operator before every driver had it do not; a copy without its spec
    counts as not guarded, the safe side: the fence then waits for the pod to be gone)."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        if any(item.get("name") == contract.ENV_DRIVER_LEASE for item in container.get("env") or []):
            return True
    return False


def _deletion_due(metadata: dict[str, Any]) -> datetime | None:
    """When a deleted pod's grace period ends: its deletionTimestamp (set to the deletion's time plus the grace)."""
    stamp = metadata.get("deletionTimestamp")
    return parse_time(stamp) if stamp else None


def _waiting(status: dict[str, Any]) -> str | None:
    """Why a pending pod waits: its container's waiting reason, or why it is not scheduled."""
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason"):
            return f"{waiting['reason']}: {waiting.get('message', '')}".strip(": ")[:300]
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return f"{condition.get('reason', 'Unschedulable')}: {condition.get('message', '')}".strip(": ")[:300]
    return None


def read_savepoint_resource(body: dict[str, Any]) -> SavepointResource:
    """One StreamingSavepoint as the planner sees it."""
    metadata, spec, status = body["metadata"], body.get("spec") or {}, body.get("status") or {}
    phase_text = status.get("phase")
    phase: SavepointPhase | None = phase_text if phase_text in _SAVEPOINT_PHASES else None
    created = metadata.get("creationTimestamp")
    return SavepointResource(
        name=metadata["name"],
        reason=spec.get("reason", "manual"),
        phase=phase,
        path=status.get("path"),
        import_path=spec.get("path"),
        batch_id=status.get("batchId"),
        time=status.get("time"),
        created_at=parse_time(created) if created else None,
        operator_made=(metadata.get("labels") or {}).get(names.CREATED_BY) == names.CREATED_BY_OPERATOR,
    )


def _sum(values: list[Any]) -> Any:
    present = [value for value in values if value is not None]
    return sum(present) if present else None


def _count(value: Any) -> float | None:
    """A non-negative finite number of the untrusted document, else None."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0:
        return float(value)
    return None


def _totals(queries: list[Any]) -> BatchTotals | None:
    """The queries' batch totals summed (None when a query reports none: a runtime from before them)."""
    totals = [query.get("totals") for query in queries]
    if not queries or not all(isinstance(item, dict) for item in totals):
        return None
    fields = [[_count(item.get(name)) for item in totals] for name in ("batches", "inputRows", "busySeconds")]
    if any(value is None for values in fields for value in values):
        return None
    batches, rows, busy = (sum(value or 0.0 for value in values) for values in fields)
    return BatchTotals(batches=int(batches), input_rows=int(rows), busy_seconds=busy)


def _scaling_signals(document: contract.StatusDocument) -> dict[str, Any]:
    """The autoscaler's fields of DriverProgress."""
    queries: list[Any] = [query for query in document.get("queries") or [] if isinstance(query, dict)]
    executors: Any = document.get("executors") or {}
    progress = [query.get("progress") if isinstance(query.get("progress"), dict) else {} for query in queries]
    partitions = [count for item in progress if (count := _count(item.get("source_partitions"))) is not None]
    since = executors.get("registeredSince") if isinstance(executors, dict) else None
    cores = _count(executors.get("cores")) if isinstance(executors, dict) else None
    try:
        executors_since = parse_time(since) if isinstance(since, str) else None
    except ValueError:
        executors_since = None
    return {
        "totals": _totals(queries),
        "executor_cores": int(cores) if cores is not None else None,
        "executors_since": executors_since,
        "source_partitions": int(max(partitions)) if partitions else None,
        "stateful": any((_count(item.get("state_operators")) or 0) > 0 for item in progress),
        "back_to_back": any(query.get("triggerIntervalSeconds") == 0 for query in queries),
    }


def _started_at(document: contract.StatusDocument) -> datetime | None:
    stamp = document.get("startedAt")
    try:
        return parse_time(stamp) if isinstance(stamp, str) else None
    except ValueError:
        return None


def _phases(document: contract.StatusDocument) -> tuple[tuple[str, float], ...]:
    """The runtime's start-up phases it reported, known names and finite non-negative seconds only."""
    reported = document.get("phases")
    if not isinstance(reported, dict):
        return ()
    phases = [
        (phase, float(seconds))
        for phase, seconds in reported.items()
        if phase in contract.STARTUP_PHASES
        and isinstance(seconds, int | float)
        and not isinstance(seconds, bool)
        and math.isfinite(seconds)
        and seconds >= 0
    ]
    return tuple(sorted(phases, key=lambda item: item[1]))


def driver_progress(document: contract.StatusDocument) -> DriverProgress:
    """The runtime's status document summed over its queries."""
    queries: list[Any] = document.get("queries") or []
    executors, last_savepoint = document.get("executors"), document.get("lastSavepoint")
    progress = [query.get("progress") or {} for query in queries]
    committed = [query.get("lastCommittedAt") for query in queries if query.get("lastCommittedAt")]
    batches = [query.get("lastCommittedBatchId") for query in queries if query.get("lastCommittedBatchId") is not None]
    watermarks: list[str] = [str(item["watermark"]) for item in progress if item.get("watermark")]
    return DriverProgress(
        last_batch_id=max(batches) if batches else None,
        last_batch_time=max(parse_time(stamp) for stamp in committed) if committed else None,
        input_rows_per_second=_sum([item.get("input_rows_per_second") for item in progress]),
        processed_rows_per_second=_sum([item.get("processed_rows_per_second") for item in progress]),
        watermark=min(watermarks) if watermarks else None,
        state_rows=_sum([item.get("state_rows") for item in progress]),
        source_backlog=_sum([item.get("source_backlog") for item in progress]),
        registered_executors=executors.get("registered") if executors else None,
        requested_executors=executors.get("requested") if executors else None,
        ready=document.get("phase") == "Running" and any(query.get("active") for query in queries),
        standby=document.get("phase") == "Standby",
        at_gate=document.get("phase") == "Standby" and document.get("atGate") is True,
        savepointing=document.get("phase") in contract.SAVEPOINTING_PHASES,
        last_savepoint=last_savepoint.get("path") if last_savepoint else None,
        committed=tuple(
            (str(query["key"]), query["lastCommittedBatchId"])
            for query in queries
            if query.get("key") and isinstance(query.get("lastCommittedBatchId"), int)
        ),
        started_at=_started_at(document),
        phases=_phases(document),
        **_scaling_signals(document),
    )


def observe(
    pods: list[dict[str, Any]],
    savepoints: list[dict[str, Any]] | None = None,
    driver_status: contract.StatusDocument | None = None,
    *,
    unanswered: bool = False,
    savepoints_in_flight: frozenset[str] = frozenset(),
    prewarmed_status: contract.StatusDocument | None = None,
    lease: DriverLease | None = None,
    draining_nodes: frozenset[str] = frozenset(),
    ready_nodes: frozenset[str] = frozenset(),
    lost_nodes: frozenset[str] = frozenset(),
) -> Observation:
    """The observation built from an app's driver pods, StreamingSavepoints and driver status."""
    drivers = tuple(
        pod
        for pod in (read_driver_pod(item, draining_nodes, ready_nodes, lost_nodes) for item in pods)
        if pod is not None
    )
    return Observation(
        drivers=tuple(sorted(drivers, key=lambda pod: (pod.run, pod.attempt))),
        savepoints=tuple(read_savepoint_resource(item) for item in savepoints or []),
        progress=driver_progress(driver_status) if driver_status else None,
        unanswered=unanswered,
        savepoints_in_flight=savepoints_in_flight,
        prewarmed=driver_progress(prewarmed_status) if prewarmed_status else None,
        lease=lease,
    )


def deleted_executors(pods: list[dict[str, Any]], lost_nodes: frozenset[str]) -> tuple[ExecutorPod, ...]:
    """The executor pods being deleted, as `headrace.core.executors` decides on them."""
    found = []
    for pod in pods:
        metadata, node = pod["metadata"], (pod.get("spec") or {}).get("nodeName")
        if not metadata.get("deletionTimestamp"):
            continue
        phase = (pod.get("status") or {}).get("phase")
        found.append(
            ExecutorPod(
                name=metadata["name"],
                node=node,
                deleting=True,
                deletion_due=_deletion_due(metadata),
                terminated=phase in ("Succeeded", "Failed"),
                node_lost=node in lost_nodes,
            )
        )
    return tuple(found)


def running_nodes(pods: list[dict[str, Any]]) -> frozenset[str]:
    """The nodes the app's running driver pods (not being deleted) are on: those whose drains matter."""
    return frozenset(
        node
        for pod in pods
        if (node := (pod.get("spec") or {}).get("nodeName"))
        and (pod.get("status") or {}).get("phase") == "Running"
        and not pod["metadata"].get("deletionTimestamp")
    )


def live_nodes(pods: list[dict[str, Any]]) -> frozenset[str]:
    """The nodes the app's driver pods that have not ended are on (being deleted or not): whether they are lost decides
    a warm standby's fate (`headrace.core.fence.stranded`)."""
    return frozenset(
        node
        for pod in pods
        if (node := (pod.get("spec") or {}).get("nodeName"))
        and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    )


def attempt_executor_nodes(pods: list[dict[str, Any]], run: int, attempt: int) -> frozenset[str]:
    """The nodes of one attempt's executor pods (not being deleted), from the app's executor pods."""
    wanted = {names.RUN: str(run), names.ATTEMPT: str(attempt)}
    return frozenset(
        node
        for pod in pods
        if (node := (pod.get("spec") or {}).get("nodeName"))
        and not pod["metadata"].get("deletionTimestamp")
        and all((pod["metadata"].get("labels") or {}).get(key) == value for key, value in wanted.items())
    )


def _ended_guarded(pod: dict[str, Any]) -> bool:
    """A driver created with the Lease whose pod ended with every container terminated: it may hold the Lease."""
    ended = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
    return ended and lease_guarded(pod) and _all_terminated(pod)


def ended_nodes(pods: list[dict[str, Any]]) -> frozenset[str]:
    """The nodes of the app's ended Lease-guarded driver pods: whether they are Ready decides if the kubelet's
    report of their death is a proof (`headrace.core.fence.release_dead`)."""
    return frozenset(node for pod in pods if _ended_guarded(pod) and (node := (pod.get("spec") or {}).get("nodeName")))


def lease_wanted(pods: list[dict[str, Any]], *, unanswered: bool) -> bool:
    """Whether the planner needs the app's driver Lease: a driver created with it is stuck deleting (not yet
    terminated), or ended (its Lease may be released at once), or the current driver did not answer (its Lease may
    tell that it stopped)."""
    if unanswered:
        return True
    return any(
        (pod["metadata"].get("deletionTimestamp") and lease_guarded(pod) and not _terminated(pod))
        or _ended_guarded(pod)
        for pod in pods
    )


def app_view(body: dict[str, Any]) -> AppView:
    """The app as the planner sees it; a spec that does not parse becomes problems naming fields."""
    metadata = body["metadata"]
    problems: tuple[Problem, ...] = ()
    spec: StreamingAppSpec | None
    try:
        spec = StreamingAppSpec.model_validate(body.get("spec") or {})
    except ValidationError as error:
        spec = None
        problems = _problems("spec", error)
    status_problems: tuple[Problem, ...] = ()
    try:
        status = StreamingAppStatus.model_validate(body.get("status") or {})
    except ValidationError as error:
        status = StreamingAppStatus()  # a placeholder: the planner never acts on an app whose status is unreadable
        status_problems = _problems("status", error)
    return AppView(
        name=metadata["name"],
        namespace=metadata["namespace"],
        generation=int(metadata.get("generation", 1)),
        spec=spec,
        status=status,
        parse_problems=problems,
        status_problems=status_problems,
        deleting_since=parse_time(stamp) if (stamp := metadata.get("deletionTimestamp")) else None,
        final_savepoint_finalizer=names.FINAL_SAVEPOINT_FINALIZER in (metadata.get("finalizers") or ()),
    )


def logged_savepoint(app: dict[str, Any]) -> str | None:
    """The StreamingSavepoint the app's write-ahead log is taking (None: none, or its status cannot be read)."""
    try:
        status = StreamingAppStatus.model_validate(app.get("status") or {})
    except ValidationError:
        return None
    pending = status.pendingOperation
    return pending.savepoint if isinstance(pending, ThroughSavepoint) else None


def _problems(root: str, error: ValidationError) -> tuple[Problem, ...]:
    return tuple(
        Problem(".".join([root, *(str(part) for part in item["loc"])]), item["msg"]) for item in error.errors()
    )


def prewarmed_driver_pod(status: StreamingAppStatus, pods: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The new driver a pre-warmed upgrade waits for (pendingOperation Upgrade/Prewarm), when it runs and has an
    IP; else None."""
    pending = status.pendingOperation
    if not isinstance(pending, PrewarmUpgrade):
        return None
    pod = next((item for item in pods if item["metadata"]["name"] == pending.prewarmDriver), None)
    if pod is None or (pod.get("status") or {}).get("phase") != "Running" or not pod["status"].get("podIP"):
        return None
    return None if pod["metadata"].get("deletionTimestamp") else pod


def standby_beside(app: dict[str, Any], pods: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The app's live warm standby pod (labelled so, not the writer) bound to the node of its current driver pod
    (status.run.driverPod, live too), if any: whether another node could take it decides its move."""
    current = ((app.get("status") or {}).get("run") or {}).get("driverPod")
    live = [pod for pod in pods if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    live = [pod for pod in live if not pod["metadata"].get("deletionTimestamp")]
    driver = next((pod for pod in live if pod["metadata"]["name"] == current), None)
    node = ((driver or {}).get("spec") or {}).get("nodeName")
    if driver is None or not node:
        return None
    for pod in live:
        labels = pod["metadata"].get("labels") or {}
        standby = labels.get(names.STANDBY) == "true" and labels.get(names.WRITER) != "true"
        if pod is not driver and standby and (pod.get("spec") or {}).get("nodeName") == node:
            return pod
    return None


def current_driver_pod(app: dict[str, Any], pods: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The app's current driver pod (status.run.driverPod) when it runs, has an IP and is not being deleted;
    else None (a terminating driver is exiting: asking it could only wait for a timeout)."""
    current = ((app.get("status") or {}).get("run") or {}).get("driverPod")
    pod = next((item for item in pods if item["metadata"]["name"] == current), None)
    address = ((pod or {}).get("status") or {}).get("podIP")
    if pod is None or pod["status"].get("phase") != "Running" or not address:
        return None
    if pod["metadata"].get("deletionTimestamp"):
        return None
    return pod
