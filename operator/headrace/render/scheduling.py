"""Typed scheduling and resources of driver and executor pods (spec.driver, spec.executor: docs/reference.md).

Owns: how `PodScheduling` becomes pod spec fields (nodeSelector, tolerations, affinity, topology spread,
priority class), the drivers' spread over nodes (`spread`) and a container's resources (memory with its
overhead, ephemeral storage, extended resources). A user's podTemplate merges over the result, the typed fields
winning on conflict.
Never: decisions or I/O.
"""

from __future__ import annotations

import copy
from typing import Any

from headrace.api.models import PodScheduling
from headrace.core.quantities import pod_memory

HOSTNAME = "kubernetes.io/hostname"
# The weight of the preference that keeps an app's driver pods on different nodes (the most a preference can have).
SPREAD_WEIGHT = 100


def pod_fields(scheduling: PodScheduling) -> dict[str, Any]:
    """The PodSpec fields the typed scheduling settings set (only those set)."""
    fields: dict[str, Any] = {}
    if scheduling.nodeSelector:
        fields["nodeSelector"] = dict(scheduling.nodeSelector)
    if scheduling.tolerations:
        fields["tolerations"] = [toleration.model_dump(exclude_none=True) for toleration in scheduling.tolerations]
    if scheduling.affinity is not None:
        fields["affinity"] = scheduling.affinity.model_dump()
    if scheduling.topologySpreadConstraints:
        fields["topologySpreadConstraints"] = [item.model_dump() for item in scheduling.topologySpreadConstraints]
    if scheduling.priorityClassName:
        fields["priorityClassName"] = scheduling.priorityClassName
    return fields


def spread(fields: dict[str, Any], match_labels: dict[str, str]) -> dict[str, Any]:
    """`fields` with a preferred pod anti-affinity from the pods `match_labels` selects, per node, added to the
    user's own affinity: an app's drivers (the running one and its warm standby or pre-warmed successor) on
    different nodes, so that one lost node does not take both. Preferred, not required: a cluster with one
    schedulable node still runs the standby (beside the driver, where a node's loss takes both)."""
    affinity = copy.deepcopy(fields.get("affinity") or {})
    anti = dict(affinity.get("podAntiAffinity") or {})
    preferred = list(anti.get("preferredDuringSchedulingIgnoredDuringExecution") or [])
    preferred.append(
        {
            "weight": SPREAD_WEIGHT,
            "podAffinityTerm": {"labelSelector": {"matchLabels": dict(match_labels)}, "topologyKey": HOSTNAME},
        }
    )
    anti["preferredDuringSchedulingIgnoredDuringExecution"] = preferred
    affinity["podAntiAffinity"] = anti
    return {**fields, "affinity": affinity}


def resources(scheduling: PodScheduling, heap: str, cpu_request: str | None, overhead_factor: float) -> dict[str, Any]:
    """A container's resources: memory (request = limit: the heap plus memoryOverhead, or the default overhead),
    the CPU request, ephemeral storage and extended resources (request = limit, as Kubernetes requires of
    extended resources)."""
    fixed = {"memory": pod_memory(heap, overhead_factor, scheduling.memoryOverhead)}
    if scheduling.ephemeralStorage:
        fixed["ephemeral-storage"] = scheduling.ephemeralStorage
    fixed.update(scheduling.extendedResources)
    requests = {"cpu": cpu_request, **fixed} if cpu_request else dict(fixed)
    return {"requests": requests, "limits": dict(fixed)}
