"""Classify a spec change by what it requires: the largest change kind among the changed fields wins.

Each field's kind comes from `headrace.api.change_kinds` (declared on the model, else its parent's,
else an upgrade). Free-form and list fields count as changed as a whole.
Never: I/O.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from headrace.api.change_kinds import field_kinds
from headrace.api.models import ChangeKind, StreamingAppSpec


def _walk(model: type[BaseModel], old: Any, new: Any, inherited: ChangeKind) -> ChangeKind | None:
    if old == new:
        return None
    if not isinstance(old, dict) or not isinstance(new, dict):
        return inherited
    largest: ChangeKind | None = None
    for name, kind, nested in field_kinds(model, inherited):
        old_value, new_value = old.get(name), new.get(name)
        if old_value == new_value:
            continue
        found = _walk(nested, old_value, new_value, kind) if nested is not None else kind
        if found is not None and (largest is None or found > largest):
            largest = found
    return largest


def classify_change(old: StreamingAppSpec, new: StreamingAppSpec) -> ChangeKind | None:
    """None when nothing changed; otherwise the largest kind of change between two specs."""
    return _walk(StreamingAppSpec, old.model_dump(mode="json"), new.model_dump(mode="json"), ChangeKind.UPGRADE)


def restart_requested(old: StreamingAppSpec, new: StreamingAppSpec) -> bool:
    """The user bumped restartNonce: restart from the latest checkpoint."""
    return old.restartNonce != new.restartNonce


def redeploy_requested(old: StreamingAppSpec, new: StreamingAppSpec) -> bool:
    """The user changed redeployNonce: a new run from spec.restoreFrom."""
    return old.redeployNonce != new.redeployNonce


def savepoint_requested(old: StreamingAppSpec, new: StreamingAppSpec) -> bool:
    """The user bumped savepoints.triggerNonce: take one savepoint now."""
    return old.savepoints.triggerNonce != new.savepoints.triggerNonce
