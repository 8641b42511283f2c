"""Parse the duration strings of the API (`90s`, `5m`, `1h30m`, `250ms`, `2d`)."""

from __future__ import annotations

import re

from headrace.api.models import DURATION_PATTERN

_PART = re.compile(r"([0-9]+)(ms|s|m|h|d)")
_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str) -> float:
    """Seconds in a duration string; raises ValueError naming the expected form."""
    if not re.fullmatch(DURATION_PATTERN, text):
        raise ValueError(f"{text!r} is not a duration such as 30s, 5m or 1h30m")
    return sum(int(number) * _SECONDS[unit] for number, unit in _PART.findall(text))
