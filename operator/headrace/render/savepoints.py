"""The StreamingSavepoint resource, as the operator and the `headrace savepoint` command create it.

Owns: its body (the operator's carry its app's labels and the created-by label retention looks for).
Never: creating it, choosing its name or when to take one.
"""

from __future__ import annotations

from typing import Any

from headrace.api import models, names


def savepoint_resource(
    namespace: str, app: str, name: str, reason: str, *, operator_made: bool, dispose: bool = False
) -> dict[str, Any]:
    """A StreamingSavepoint asking for a savepoint of `app` (its status is the operator's to fill in); with
    `dispose`, deleting it deletes its files (spec.disposeOnDelete)."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if operator_made:
        metadata["labels"] = {**names.app_labels(app), names.CREATED_BY: names.CREATED_BY_OPERATOR}
    spec: dict[str, Any] = {"appName": app, "reason": reason}
    if dispose:
        spec["disposeOnDelete"] = True
    return {"apiVersion": models.API_VERSION, "kind": models.SAVEPOINT_KIND, "metadata": metadata, "spec": spec}
