"""Holding an app whose status cannot be read: merge its Degraded condition (through the status recorder), post one
Event.

The status itself is left as it is (a full status write would drop the fields this version does not
know); the pure decision is `headrace.core.unreadable`.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from headrace.adapters.kube import KubeClient
from headrace.controller.status_recorder import StatusRecorder
from headrace.core import unreadable
from headrace.core.planner import AppView

logger = logging.getLogger(__name__)


def hold_app(kube: KubeClient, recorder: StatusRecorder, body: dict[str, Any], view: AppView, now: datetime) -> None:
    """Say why nothing happens for this app; touch nothing else."""
    held = unreadable.hold_conditions(
        (body.get("status") or {}).get("conditions"), view.status_problems, view.generation, now
    )
    metadata = body["metadata"]
    logger.warning("holding %s/%s: %s", metadata["namespace"], metadata["name"], held.conditions[-1]["message"])
    recorder.unreadable_conditions(body, held.conditions)
    if held.event is not None:
        kube.post_event(body, type_=held.event.type, reason=held.event.reason, message=held.event.message, now=now)
