"""The chart's Argo CD health check on statuses recorded from real apps on the test cluster (recorded/README.md)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from headrace.api.models import StreamingAppStatus
from headrace.core.timefmt import parse_time

from .lua import INTERPRETERS, assess

CHART = Path(__file__).resolve().parents[2] / "charts" / "headrace"
RECORDED = sorted((Path(__file__).parent / "recorded").glob("*.json"))


def test_statuses_were_recorded_while_restarting_and_while_the_next_driver_runs() -> None:
    phases = {path.stem.rsplit("-", 1)[1] for path in RECORDED}
    assert {"restarting", "running"} <= phases, RECORDED


@pytest.mark.parametrize("interpreter", INTERPRETERS)
@pytest.mark.parametrize("path", RECORDED, ids=[path.stem for path in RECORDED])
def test_a_real_app_failing_at_start_is_degraded(path: Path, interpreter: str, tmp_path: Path) -> None:
    resource: dict[str, Any] = json.loads(path.read_text())
    status = StreamingAppStatus.model_validate(resource["status"])  # the shape the operator writes
    degraded = next(condition for condition in status.conditions if condition.type == "Degraded")
    assert degraded.reason == "StartupFailing", degraded
    just_after = parse_time(degraded.lastTransitionTime) + timedelta(seconds=5)  # well within the grace period
    health, message = assess(CHART / "argocd" / "streamingapp.lua", resource, tmp_path, interpreter, now=just_after)
    assert health == "Degraded" and "StartupFailing" in message, (health, message)
