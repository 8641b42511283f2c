"""Kubernetes-style conditions: set one, keeping lastTransitionTime when the status does not change."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from headrace.api.models import Condition
from headrace.core.timefmt import format_time

ConditionStatus = Literal["True", "False", "Unknown"]


def set_condition(
    conditions: list[Condition],
    *,
    type_: str,
    status: ConditionStatus,
    reason: str,
    message: str,
    generation: int | None,
    now: datetime,
) -> list[Condition]:
    """A new list with the condition of `type_` set; its transition time moves only when status changes."""
    previous = next((condition for condition in conditions if condition.type == type_), None)
    transition = previous.lastTransitionTime if previous and previous.status == status else format_time(now)
    updated = Condition(
        type=type_,
        status=status,
        reason=reason,
        message=message,
        lastTransitionTime=transition,
        observedGeneration=generation,
    )
    others = [condition for condition in conditions if condition.type != type_]
    order = {"Ready": 0, "Progressing": 1, "Degraded": 2}
    return sorted([*others, updated], key=lambda condition: (order.get(condition.type, 9), condition.type))


def get_condition(conditions: list[Condition], type_: str) -> Condition | None:
    """The condition of a type, if present."""
    return next((condition for condition in conditions if condition.type == type_), None)
