"""Recording an app's status as the real operator wrote it, for the health check tests on recorded statuses
(tests/gitops/recorded/README.md): with HEADRACE_RECORD_STATUSES set, the integration and e2e tests that
see a status worth keeping write it there."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def record_status(app: dict[str, Any], label: str) -> dict[str, Any]:
    """The app trimmed to what the health check reads; written to $HEADRACE_RECORD_STATUSES/<label>.json when
    that is set."""
    kept = {
        "apiVersion": app["apiVersion"],
        "kind": app["kind"],
        "metadata": {key: app["metadata"][key] for key in ("name", "namespace", "generation")},
        "status": app["status"],
    }
    target = os.environ.get("HEADRACE_RECORD_STATUSES")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        (Path(target) / f"{label}.json").write_text(json.dumps(kept, indent=2) + "\n")
    return kept
