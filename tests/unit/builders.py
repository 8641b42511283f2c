"""Builders of specs, statuses and observations for the unit tables."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec

from headrace.api.models import StreamingAppSpec, StreamingAppStatus
from headrace.core.observation import DriverPod, DriverProgress, Observation
from headrace.core.planner import AppView
from headrace.render.control_tls import ControlCertificate, control_certificate
from headrace.render.manifests import Attempt

T0 = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)


def spec(**overrides: Any) -> StreamingAppSpec:
    base: dict[str, Any] = {
        "image": "localhost/headrace/spark:0.1.0",
        "application": {"file": "local:///opt/headrace/apps/windowed-counts/app.py"},
        "state": {"checkpointDir": "s3a://bucket/checkpoints", "savepointDir": "s3a://bucket/savepoints"},
        "restartPolicy": {"backoff": {"initialSeconds": 2, "maxSeconds": 30}, "maxRestartsInWindow": 3},
    }
    for key, value in overrides.items():
        target = base
        *parents, leaf = key.split("__")
        for parent in parents:
            target = target.setdefault(parent, {})
        target[leaf] = value
    return StreamingAppSpec.model_validate(base)


def view(
    app_spec: StreamingAppSpec | None = None, status: StreamingAppStatus | None = None, generation: int = 1
) -> AppView:
    return AppView(
        name="clicks",
        namespace="analytics",
        generation=generation,
        spec=app_spec if app_spec is not None else spec(),
        status=status or StreamingAppStatus(),
    )


def pod(run: int = 1, attempt: int = 1, phase: str = "Running", **fields: Any) -> DriverPod:
    defaults: dict[str, Any] = {
        "running_since": T0 if phase == "Running" else None,
        "ip": "10.244.0.9",
        "writer": phase == "Running" and not fields.get("standby"),  # labelled once it writes (core/drain.py)
        "executor_budget": 1 if phase == "Running" and not fields.get("standby") else None,  # ... for spec()'s 1
    }
    return DriverPod(
        name=f"clicks-r{run}-a{attempt}-driver", run=run, attempt=attempt, phase=phase, **{**defaults, **fields}
    )  # type: ignore[arg-type]


READY = DriverProgress(ready=True)


def seen(*pods: DriverPod) -> Observation:
    """What the observer sees; a running driver answers its control endpoint with running queries."""
    running = any(pod.phase == "Running" for pod in pods)
    return Observation(drivers=pods, progress=READY if running else None)


def later(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def attempt(run: int = 1, number: int = 1, **overrides: Any) -> Attempt:
    """Attempt `number` of run `run` of analytics/clicks, with the spec's fields overridden (see `spec`)."""
    return Attempt(
        app="clicks",
        namespace="analytics",
        app_uid="uid-1",
        run=run,
        attempt=number,
        spec=spec(**overrides),
        spec_hash="h",
        checkpoint_dir=f"s3a://bucket/checkpoints/analytics/clicks/r{run}",
    )


def certificate(app: str = "clicks", namespace: str = "analytics") -> ControlCertificate:
    """A control certificate for `app` with a new key, made at T0."""
    return control_certificate(app, namespace, ec.generate_private_key(ec.SECP256R1()), T0)
