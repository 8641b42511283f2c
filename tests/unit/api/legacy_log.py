"""The write-ahead log entry as the release before the typed log wrote it, made from a typed status (test only).

`tests/unit/api/legacy_statuses.json` holds statuses that release's planner wrote in the middle of each
operation; `test_log_migration` checks this function against them, and the upgrade test
(tests/integration/test_log_upgrade.py) uses it to put a running app's log back into that form.
"""

from __future__ import annotations

import json
from typing import Any


def legacy_form(status: dict[str, Any]) -> dict[str, Any]:
    """`status` (as stored) with its pendingOperation in the old form: particulars in `detail`, as strings."""
    entry = status.get("pendingOperation")
    if entry is None:
        return status
    kept = {"kind", "step", "startedAt"}
    old: dict[str, Any] = {key: value for key, value in entry.items() if key in kept}
    detail: dict[str, str] = {}
    match entry["kind"], entry["step"]:
        case "StartDriver", "CreateDriver":
            old |= {"run": entry["run"], "attempt": entry["attempt"]}
            if "previousRun" in entry:
                detail["previousRun"] = json.dumps(entry["previousRun"], separators=(",", ":"))
                detail["previousSpec"] = entry["previousSpec"]
        case "Restart", "Backoff":
            detail["reason"] = entry["reason"]
            if entry.get("rollback"):
                detail["rollback"] = status["lastStableSpec"]
        case _, "TakeSavepoint":
            detail |= {
                "savepoint": entry["savepoint"],
                "reason": entry["reason"],
                "target": entry["targetSpecHash"],
                "try": str(entry.get("tries", 1)),
            }
            if "silentSince" in entry:
                detail["silentSince"] = entry["silentSince"]
        case "Upgrade", "Prewarm":
            detail |= {"target": entry["targetSpecHash"], "prewarm": entry["prewarmDriver"]}
        case other:
            raise AssertionError(f"no old form of {other}")
    return {**status, "pendingOperation": {**old, "detail": detail}}
