"""Reading the write-ahead log in the form releases before the typed log wrote it (once, on upgrade).

Those releases kept an operation's particulars in `status.pendingOperation.detail`, a map of strings
(`previousRun` and `previousSpec` of a StartDriver, `reason` and `rollback` of a Restart, `savepoint`,
`reason`, `target`, `try` and `silentSince` of an operation through a savepoint, `target` and `prewarm`
of a pre-warmed upgrade). An operator upgraded under a running app reads such an entry into the typed
one; its next status write replaces the whole status, so the old form is read once.
The CRD keeps `detail` in its schema (`LEGACY_DETAIL_SCHEMA`): the API server prunes fields its schema
does not name, also from objects it reads, so without it an entry written by the previous release, or
by it during a rolling upgrade, would lose its particulars.

Owns: the old form's keys and their translation. Never: decisions, I/O, the clock.
"""

from __future__ import annotations

import json
from typing import Any, Final

LEGACY_DETAIL: Final = "detail"
LEGACY_DETAIL_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "additionalProperties": {"type": "string"},
    "description": "Deprecated: the particulars of an operation as releases before the typed log wrote them "
    "(a map of strings); read once when the operator is upgraded, never written.",
}


def migrate_pending_operation(value: Any) -> Any:
    """A `status.pendingOperation` in the typed form (`value` unchanged unless it is in the old form)."""
    if not isinstance(value, dict) or LEGACY_DETAIL not in value:
        return value
    entry = {key: item for key, item in value.items() if key != LEGACY_DETAIL}
    detail = value.get(LEGACY_DETAIL) or {}
    if not isinstance(detail, dict):
        return value  # not the old form either: validation names the field
    entry.update(_particulars(str(entry.get("kind")), str(entry.get("step")), detail))
    return entry


def _particulars(kind: str, step: str, detail: dict[str, Any]) -> dict[str, Any]:
    """The typed fields of entry `kind`/`step` from its old `detail` (keys it does not have stay unset)."""
    fields: dict[str, Any] = {}
    match kind, step:
        case "StartDriver", "CreateDriver":
            if "previousRun" in detail:
                fields["previousRun"] = json.loads(detail["previousRun"])
            if "previousSpec" in detail:
                fields["previousSpec"] = detail["previousSpec"]
        case "Restart", "Backoff":
            fields["reason"] = detail.get("reason", "")
            fields["rollback"] = bool(detail.get("rollback"))
        case "Savepoint" | "Upgrade" | "Suspend", "TakeSavepoint":
            fields["savepoint"] = detail.get("savepoint", "")
            fields["reason"] = detail.get("reason", "manual" if kind == "Savepoint" else kind.lower())
            fields["targetSpecHash"] = detail.get("target", "")
            fields["tries"] = int(detail.get("try", "1"))
            if "silentSince" in detail:
                fields["silentSince"] = detail["silentSince"]
        case "Upgrade", "Prewarm":
            fields["targetSpecHash"] = detail.get("target", "")
            fields["prewarmDriver"] = detail.get("prewarm", "")
        case _:
            pass  # an unknown pair: the typed log refuses it, naming kind/step
    return fields
