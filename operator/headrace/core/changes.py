"""Classify a spec change by what it requires: the largest change kind among the changed fields wins.

Each model field declares its kind (`headrace.api.models.change(...)`); fields that declare nothing
are upgrades. Free-form and list fields count as changed as a whole.
Never: I/O.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from headrace.api.models import ChangeKind, StreamingAppSpec


def _declared_kind(model: type[BaseModel], name: str) -> ChangeKind | None:
    field = model.model_fields[name]
    for item in field.metadata:
        if isinstance(item, ChangeKind):
            return item
    return None


def _nested_model(model: type[BaseModel], name: str) -> type[BaseModel] | None:
    annotation = model.model_fields[name].annotation
    for candidate in (annotation, *getattr(annotation, "__args__", ())):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel) and candidate.model_fields:
            if candidate.model_config.get("extra") == "allow":
                return None
            return candidate
    return None


def _walk(model: type[BaseModel], old: Any, new: Any, inherited: ChangeKind) -> ChangeKind | None:
    if old == new:
        return None
    if not isinstance(old, dict) or not isinstance(new, dict):
        return inherited
    largest: ChangeKind | None = None
    for name in model.model_fields:
        old_value, new_value = old.get(name), new.get(name)
        if old_value == new_value:
            continue
        declared = _declared_kind(model, name)
        kind = inherited if declared is None else declared
        nested = _nested_model(model, name)
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


def savepoint_requested(old: StreamingAppSpec, new: StreamingAppSpec) -> bool:
    """The user bumped savepoints.triggerNonce: take one savepoint now."""
    return old.savepoints.triggerNonce != new.savepoints.triggerNonce
