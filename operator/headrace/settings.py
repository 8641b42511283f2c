"""Operator settings, read once at start from the environment (the Helm chart sets them).

| variable | default | meaning |
|---|---|---|
| HEADRACE_NAMESPACES | (empty: all) | comma-separated namespaces to watch |
| HEADRACE_WORKERS | 16 | apps reconciled concurrently |
| HEADRACE_METRICS_PORT | 8080 | port of /metrics |
| HEADRACE_HEALTH_PORT | 8081 | port of /healthz (kopf liveness; answered while standing by too) |
| HEADRACE_RESYNC_SECONDS | 300 | reconcile every app at least this often |
| HEADRACE_LEADER_ELECTION | false (chart: true) | act only while holding a Lease, so several replicas are safe |
| HEADRACE_LEADER_ELECTION_NAMESPACE | $POD_NAMESPACE | namespace of the Lease |
| HEADRACE_LEADER_ELECTION_LEASE | headrace | name of the Lease (chart: the release's full name) |
| POD_NAMESPACE | (none) | the operator's namespace (chart: downward API); NetworkPolicies admit it from there |
| HEADRACE_METRICS_NAMESPACES | (empty: none) | namespaces (comma-separated) admitted to drivers' metrics port |
| HEADRACE_UI_NAMESPACES | (empty: none) | namespaces (comma-separated) admitted to drivers' Spark UI port |
| POD_NAME | (hostname_pid) | this replica's identity in the Lease (chart: downward API) |
| HEADRACE_LEASE_DURATION_SECONDS | 15 | a standby takes over a Lease not renewed for this long |
| HEADRACE_RENEW_DEADLINE_SECONDS | 10 | the leader exits if it could not renew for this long |
| HEADRACE_RETRY_PERIOD_SECONDS | 2 | how often candidates try to acquire and the leader renews |
| HEADRACE_FAILPOINTS | (empty: off) | tests only: failpoints where the process exits hard (controller/failpoints.py) |
| HEADRACE_TENANT_POLICY | (empty: defaults) | JSON of the chart's `tenantPolicy` (what apps may ask of pods) |

The durations are client-go's defaults; the lease duration must exceed the renew deadline, which
must exceed the retry period, so a leader always stops before anyone else can take over.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from pydantic import BaseModel, Field, model_validator

from headrace.core.validation import TenantPolicy
from headrace.render.security import Peers


class OperatorSettings(BaseModel):
    """How this operator process runs."""

    namespaces: list[str] = Field(default_factory=list)
    workers: int = Field(default=16, ge=1, le=256)
    metrics_port: int = Field(default=8080, ge=0, le=65535)
    health_port: int = Field(default=8081, ge=0, le=65535)
    resync_seconds: float = Field(default=300.0, gt=0)
    leader_election: bool = False
    lease_namespace: str | None = None
    lease_name: str = Field(default="headrace", min_length=1)
    identity: str | None = None
    lease_seconds: int = Field(default=15, ge=1)
    renew_deadline_seconds: float = Field(default=10.0, gt=0)
    retry_seconds: float = Field(default=2.0, gt=0)
    tenant_policy: TenantPolicy = Field(default_factory=TenantPolicy)  # the chart's tenantPolicy (docs/security.md)
    operator_namespace: str | None = None
    metrics_namespaces: list[str] = Field(default_factory=list)
    ui_namespaces: list[str] = Field(default_factory=list)

    def peers(self) -> Peers:
        """The namespaces every app's NetworkPolicy admits to the metrics and UI ports."""
        return Peers(metrics_namespaces=tuple(self.metrics_namespaces), ui_namespaces=tuple(self.ui_namespaces))

    @model_validator(mode="after")
    def _election_is_consistent(self) -> OperatorSettings:
        if self.leader_election and not self.lease_namespace:
            raise ValueError("leader election needs the Lease's namespace: set HEADRACE_LEADER_ELECTION_NAMESPACE")
        if not self.lease_seconds > self.renew_deadline_seconds > self.retry_seconds:
            raise ValueError(
                "HEADRACE_LEASE_DURATION_SECONDS must exceed HEADRACE_RENEW_DEADLINE_SECONDS, "
                "which must exceed HEADRACE_RETRY_PERIOD_SECONDS"
            )
        return self

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> OperatorSettings:
        """Settings from environment variables (see the module docstring); the defaults are the fields' own."""
        raw: dict[str, object] = {field: environ[name] for field, name in ENVIRONMENT.items() if environ.get(name)}
        for field, name in NAMESPACE_LISTS.items():
            raw[field] = [item.strip() for item in environ.get(name, "").split(",") if item.strip()]
        if namespace := environ.get("POD_NAMESPACE"):
            raw["operator_namespace"] = namespace
            raw.setdefault("lease_namespace", namespace)
        if policy := environ.get("HEADRACE_TENANT_POLICY"):
            raw["tenant_policy"] = _json("HEADRACE_TENANT_POLICY", policy)
        return cls.model_validate(raw)


ENVIRONMENT = {
    "workers": "HEADRACE_WORKERS",
    "metrics_port": "HEADRACE_METRICS_PORT",
    "health_port": "HEADRACE_HEALTH_PORT",
    "resync_seconds": "HEADRACE_RESYNC_SECONDS",
    "leader_election": "HEADRACE_LEADER_ELECTION",
    "lease_namespace": "HEADRACE_LEADER_ELECTION_NAMESPACE",
    "lease_name": "HEADRACE_LEADER_ELECTION_LEASE",
    "identity": "POD_NAME",
    "lease_seconds": "HEADRACE_LEASE_DURATION_SECONDS",
    "renew_deadline_seconds": "HEADRACE_RENEW_DEADLINE_SECONDS",
    "retry_seconds": "HEADRACE_RETRY_PERIOD_SECONDS",
}
"""Setting -> the variable that sets it as it is (an unset or empty variable leaves the setting's default)."""

NAMESPACE_LISTS = {
    "namespaces": "HEADRACE_NAMESPACES",
    "metrics_namespaces": "HEADRACE_METRICS_NAMESPACES",
    "ui_namespaces": "HEADRACE_UI_NAMESPACES",
}
"""Setting -> the variable that sets it as a comma-separated list of namespaces."""


def _json(name: str, text: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{name} is not JSON ({error}); set it to an object such as {{}}") from error
