"""Merge a user's pod template into a rendered pod: maps deeply, containers by name, lists appended."""

from __future__ import annotations

from typing import Any

_BY_NAME = {"containers", "initContainers", "volumes", "env", "volumeMounts", "ports"}


def merge(base: Any, overlay: Any, key: str | None = None) -> Any:
    """`overlay` merged into `base` (neither is modified); the operator's fields win on conflict."""
    if isinstance(base, dict) and isinstance(overlay, dict):
        merged = dict(overlay)
        for name, value in base.items():
            merged[name] = merge(value, overlay[name], name) if name in overlay else value
        return merged
    if isinstance(base, list) and isinstance(overlay, list):
        if key in _BY_NAME:
            return _merge_named(base, overlay)
        return [*overlay, *base]
    return base


def _merge_named(base: list[Any], overlay: list[Any]) -> list[Any]:
    by_name = {item.get("name"): item for item in overlay if isinstance(item, dict)}
    result = [
        merge(item, by_name.pop(item.get("name")), None) if item.get("name") in by_name else item for item in base
    ]
    return [*result, *by_name.values()]
