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

from pydantic import BaseModel, ConfigDict, Field, model_validator

from headrace.core.validation import RESTRICTED_VOLUME_TYPES, TenantPolicy
from headrace.render.security import Peers


class TenantPolicySettings(BaseModel):
    """The chart's `tenantPolicy` (docs/security.md): what a StreamingApp may ask of its pods. Every
    default refuses; an admin widens one field at a time."""

    model_config = ConfigDict(extra="forbid")

    allowHostNamespaces: bool = False
    allowHostPorts: bool = False
    allowPrivileged: bool = False
    allowPrivilegeEscalation: bool = False
    allowRunAsRoot: bool = False
    allowedCapabilities: list[str] = Field(default_factory=list)
    allowedVolumeTypes: list[str] = Field(default_factory=lambda: list(RESTRICTED_VOLUME_TYPES))
    serviceAccounts: list[str] = Field(default_factory=list)

    def policy(self) -> TenantPolicy:
        """The policy the validation applies."""
        return TenantPolicy(
            allow_host_namespaces=self.allowHostNamespaces,
            allow_host_ports=self.allowHostPorts,
            allow_privileged=self.allowPrivileged,
            allow_privilege_escalation=self.allowPrivilegeEscalation,
            allow_run_as_root=self.allowRunAsRoot,
            allowed_capabilities=frozenset(self.allowedCapabilities),
            allowed_volume_types=frozenset(self.allowedVolumeTypes),
            service_accounts=frozenset(self.serviceAccounts),
        )


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
    tenant_policy: TenantPolicySettings = Field(default_factory=TenantPolicySettings)
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
        """Settings from environment variables (see the module docstring)."""
        raw = {
            "namespaces": _names(environ.get("HEADRACE_NAMESPACES", "")),
            "metrics_namespaces": _names(environ.get("HEADRACE_METRICS_NAMESPACES", "")),
            "ui_namespaces": _names(environ.get("HEADRACE_UI_NAMESPACES", "")),
            "workers": environ.get("HEADRACE_WORKERS", 16),
            "metrics_port": environ.get("HEADRACE_METRICS_PORT", 8080),
            "health_port": environ.get("HEADRACE_HEALTH_PORT", 8081),
            "resync_seconds": environ.get("HEADRACE_RESYNC_SECONDS", 300),
            "leader_election": environ.get("HEADRACE_LEADER_ELECTION") or False,
            "lease_namespace": environ.get("HEADRACE_LEADER_ELECTION_NAMESPACE") or environ.get("POD_NAMESPACE"),
            "lease_name": environ.get("HEADRACE_LEADER_ELECTION_LEASE") or "headrace",
            "identity": environ.get("POD_NAME") or None,
            "lease_seconds": environ.get("HEADRACE_LEASE_DURATION_SECONDS", 15),
            "renew_deadline_seconds": environ.get("HEADRACE_RENEW_DEADLINE_SECONDS", 10),
            "retry_seconds": environ.get("HEADRACE_RETRY_PERIOD_SECONDS", 2),
            "operator_namespace": environ.get("POD_NAMESPACE") or None,
            "tenant_policy": _json("HEADRACE_TENANT_POLICY", environ.get("HEADRACE_TENANT_POLICY") or "{}"),
        }
        return cls.model_validate(raw)


def _names(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _json(name: str, text: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{name} is not JSON ({error}); set it to an object such as {{}}") from error
