"""Redeploying an app from a chosen savepoint: a change of spec.redeployNonce (Flink's savepointRedeployNonce).

The running driver (if any) stops without a savepoint and a new run restores `spec.restoreFrom`
(a StreamingSavepoint that succeeded, or a path) with the current spec. It goes through
`start_attempt`: the StartDriver entry of the write-ahead log records the new run and its restore
source before anything is done, and its fence dry-runs the new run's objects before the running
driver is deleted (a refused spec never costs the running driver). The nonce is applied once it is
in status.lastReconciledSpec: the same value never redeploys again. A redeploy whose source cannot
be used is refused, naming the field; the running driver keeps running.
Never: I/O or the clock.
"""

from __future__ import annotations

from headrace.api.models import StreamingAppSpec
from headrace.core.attempts import start_attempt
from headrace.core.builder import Builder, parse_spec_json
from headrace.core.changes import redeploy_requested
from headrace.core.observation import Observation
from headrace.core.savepoints import restore_source

REDEPLOY_REFUSED = "RedeployRefused"
REDEPLOYING = "Redeploying"
NO_SOURCE = (
    "spec.redeployNonce changed but spec.restoreFrom is unset: set spec.restoreFrom.savepoint (a StreamingSavepoint) "
    "or spec.restoreFrom.path (a savepoint directory) to redeploy from"
)


def requested(builder: Builder, spec: StreamingAppSpec) -> bool:
    """Whether the spec's redeployNonce differs from the one the current run applied."""
    running = parse_spec_json(builder.status.lastReconciledSpec)
    return running is not None and redeploy_requested(running, spec)


def begin(builder: Builder, spec: StreamingAppSpec, observation: Observation) -> None:
    """Start run n+1 from spec.restoreFrom, or refuse (status.error names the field) and keep what runs."""
    run = builder.status.run
    running = parse_spec_json(builder.status.lastReconciledSpec)
    assert run is not None
    assert running is not None
    path, problem = restore_source(spec, observation)
    if spec.restoreFrom is None:
        problem = NO_SOURCE
    if path is None or problem is not None:
        builder.report_error(REDEPLOY_REFUSED, f"{problem}; nothing was stopped, the redeploy waits for a fix")
        return
    builder.status.failedSpecHash = None
    builder.status.suspendedSavepoint = None  # a suspended app resumes from the chosen savepoint instead
    builder.status.restarts = builder.status.restarts.model_copy(
        update={"consecutive": 0, "failureTimes": [], "startupFailures": 0, "nextRetryAt": None}
    )
    builder.event(
        REDEPLOYING,
        f"spec.redeployNonce {running.redeployNonce} -> {spec.redeployNonce}: starting run {run.number + 1} "
        f"from {path} (the running driver stops without a savepoint)",
    )
    start_attempt(builder, spec, observation, run=run.number + 1, attempt=1, restore_from=path, why="Upgrading")
