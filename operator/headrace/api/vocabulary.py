"""The operator's closed vocabularies: the write-ahead log's operation kinds and steps, and failure reasons.

Owns: every word the operator records in `status.pendingOperation` and `status.restarts` and switches
on, as `Literal` types, so a switch over them is checked for exhaustiveness (`typing.assert_never`)
and the metrics' label sets are derived from them (`typing.get_args`) instead of being listed again.
Never: logic. Words the runtime shares with the operator live in `headrace.api.runtime_contract`.
"""

from __future__ import annotations

from typing import Literal, get_args

# --- status.pendingOperation (the write-ahead log) -----------------------------------------------
SavepointOperationKind = Literal["Savepoint", "Upgrade", "Suspend", "Delete"]
"""Operations that go through a savepoint (Upgrade, Suspend and Delete, the final savepoint of a deleted app, stop
the driver with it). Each entry of the log,
with its kind and step, is a model of `headrace.api.models` (`PendingOperation`)."""

SAVEPOINT_OPERATIONS: tuple[SavepointOperationKind, ...] = get_args(SavepointOperationKind)

# --- status.restarts.lastFailureReason -----------------------------------------------------------
OperatorFailureReason = Literal[
    "DriverFailed",
    "DriverLost",
    "DriverDeleted",
    "DriverExited",
    "NoProgress",
    "DriverStartTimeout",
    "DriverUnresponsive",
    "DriverLeaseExpired",
    "DriverRefused",
]
"""Failures the operator names itself (DriverFailed: the pod failed without a more precise reason)."""

KubernetesFailureReason = Literal["Evicted", "OOMKilled"]
"""Well-known reasons Kubernetes gives a failed pod; any other pod or runtime reason is recorded as it is."""

RestartReasonLabel = Literal[OperatorFailureReason, KubernetesFailureReason, "Other"]
"""The bounded label set of the restart counter: a reason outside the two sets above counts as Other."""

RESTART_REASON_LABELS: tuple[RestartReasonLabel, ...] = get_args(RestartReasonLabel)
