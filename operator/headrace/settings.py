"""Operator settings, read once at start from the environment (the Helm chart sets them).

| variable | default | meaning |
|---|---|---|
| HEADRACE_NAMESPACES | (empty: all) | comma-separated namespaces to watch |
| HEADRACE_WORKERS | 16 | apps reconciled concurrently |
| HEADRACE_METRICS_PORT | 8080 | port of /metrics |
| HEADRACE_HEALTH_PORT | 8081 | port of /healthz (kopf liveness) |
| HEADRACE_RESYNC_SECONDS | 300 | reconcile every app at least this often |
| HEADRACE_PEERING | (empty) | kopf peering name for running several replicas; empty: standalone |
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, Field


class OperatorSettings(BaseModel):
    """How this operator process runs."""

    namespaces: list[str] = Field(default_factory=list)
    workers: int = Field(default=16, ge=1, le=256)
    metrics_port: int = Field(default=8080, ge=0, le=65535)
    health_port: int = Field(default=8081, ge=0, le=65535)
    resync_seconds: float = Field(default=300.0, gt=0)
    peering: str | None = None

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> OperatorSettings:
        """Settings from environment variables (see the module docstring)."""
        raw = {
            "namespaces": [item.strip() for item in environ.get("HEADRACE_NAMESPACES", "").split(",") if item.strip()],
            "workers": environ.get("HEADRACE_WORKERS", 16),
            "metrics_port": environ.get("HEADRACE_METRICS_PORT", 8080),
            "health_port": environ.get("HEADRACE_HEALTH_PORT", 8081),
            "resync_seconds": environ.get("HEADRACE_RESYNC_SECONDS", 300),
            "peering": environ.get("HEADRACE_PEERING") or None,
        }
        return cls.model_validate(raw)
