"""An app whose status the models cannot read is held: no actions, a Degraded condition, one Event.

A status the models refuse (a field written by a newer operator, a value out of range) must never be
taken for an empty status: that would start run 1 again on its old checkpoint and rewind state and
offsets. The operator leaves the status as it is, except for the Degraded condition that names the
fields and the fix.
Never: I/O or the clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from headrace.core.plan import Event
from headrace.core.timefmt import format_time
from headrace.core.validation import Problem

STATUS_UNREADABLE = "StatusUnreadable"


@dataclass(frozen=True)
class Hold:
    """What to write for a held app: its conditions (raw, to merge-patch) and the event to post, if any."""

    conditions: list[dict[str, Any]]
    event: Event | None


def message(problems: tuple[Problem, ...]) -> str:
    """The Degraded message: the fields, and what to do about them."""
    fields = "; ".join(str(problem) for problem in problems)
    return (
        f"the operator cannot read this app's status ({fields}); it does nothing for this app until it can "
        "(never starts over from an empty status). Run the operator version that wrote it (e.g. roll the operator "
        "forward to match the CRD), or remove the field from status by hand"
    )


def hold_conditions(raw_conditions: Any, problems: tuple[Problem, ...], generation: int, now: datetime) -> Hold:
    """The Degraded condition set on the raw conditions (other conditions kept as they are); an event when the
    condition is new or its message changed."""
    text = message(problems)
    conditions = [item for item in raw_conditions if isinstance(item, dict)] if isinstance(raw_conditions, list) else []
    previous = next((item for item in conditions if item.get("type") == "Degraded"), None)
    same = previous is not None and previous.get("reason") == STATUS_UNREADABLE and previous.get("message") == text
    transition = previous.get("lastTransitionTime") if previous and previous.get("status") == "True" else None
    degraded = {
        "type": "Degraded",
        "status": "True",
        "reason": STATUS_UNREADABLE,
        "message": text,
        "lastTransitionTime": transition or format_time(now),
        "observedGeneration": generation,
    }
    kept = [item for item in conditions if item.get("type") != "Degraded"]
    return Hold(conditions=[*kept, degraded], event=None if same else Event("Warning", STATUS_UNREADABLE, text))
