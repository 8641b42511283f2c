"""RFC 3339 timestamps as Kubernetes writes them (UTC, `Z`), without reading the clock."""

from __future__ import annotations

from datetime import UTC, datetime


def format_time(moment: datetime) -> str:
    """`2026-11-21T12:00:00Z` (sub-second precision kept when present)."""
    moment = moment.astimezone(UTC)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if moment.microsecond:
        text += f".{moment.microsecond:06d}"
    return text + "Z"


def parse_time(text: str) -> datetime:
    """Inverse of `format_time`; also accepts offsets."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)
