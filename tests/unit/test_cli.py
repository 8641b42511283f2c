"""`headrace suspend|resume|rescale --wait`: when each has taken effect (`cli.outcome`), as a table."""

from __future__ import annotations

from typing import Any

import pytest

from headrace import cli


def app(phase: str, *, observed: int = 2, ready: str = "True", executors: int = 2, registered: int | None = 2,
        degraded: str = "") -> dict[str, Any]:  # fmt: skip
    conditions = [{"type": "Ready", "status": ready}, {"type": "Degraded", "status": "True", "message": degraded}]
    progress = {"registeredExecutors": registered} if registered is not None else {}
    status = {"observedGeneration": observed, "phase": phase, "conditions": conditions, "executors": executors,
              "progress": progress}  # fmt: skip
    return {"metadata": {"generation": 2}, "status": status}


CASES: list[tuple[str, dict[str, Any], int | None, tuple[bool, str | None]]] = [
    ("suspend", app("Savepointing"), None, (False, None)),
    ("suspend", app("Suspended", ready="False"), None, (True, None)),
    ("suspend", app("Suspended", observed=1), None, (False, None)),  # the change not observed yet
    ("resume", app("Deploying", ready="False"), None, (False, None)),
    ("resume", app("Running", ready="False"), None, (False, None)),
    ("resume", app("Running"), None, (True, None)),
    ("resume", app("Failed", ready="False", degraded="boom"), None, (False, "the app is Failed: boom")),
    ("rescale", app("Running", executors=2, registered=1), 2, (False, None)),  # asked, not registered yet
    ("rescale", app("Running", executors=2, registered=2), 2, (True, None)),
    ("rescale", app("Running", executors=2, registered=None), 2, (True, None)),  # no progress reported
    ("rescale", app("Running", executors=1, registered=1), 2, (False, None)),
]


@pytest.mark.parametrize(("verb", "resource", "executors", "expected"), CASES)
def test_outcome(verb: str, resource: dict[str, Any], executors: int | None, expected: tuple[bool, str | None]) -> None:
    assert cli.outcome(verb, resource, executors) == expected


def _with_run(attempt: int | None) -> dict[str, Any]:
    run = {"number": 2, "attempt": attempt, "driverPod": f"clicks-r2-a{attempt}-driver"} if attempt else None
    restarts = {"lastFailureReason": "ScriptExited", "lastFailureMessage": "the script exited with 2"}
    return {"metadata": {"name": "clicks"}, "status": {"run": run, "restarts": restarts}}


def test_which_pods_log() -> None:
    assert cli.log_source(_with_run(3), previous=False) == ("clicks-r2-a3-driver", "driver", "run 2, attempt 3")
    pod, container, about = cli.log_source(_with_run(3), previous=True)
    assert (pod, container) == ("clicks-r2-a2-driver", "driver") and "ScriptExited: the script exited with 2" in about
    assert cli.log_source(_with_run(1), previous=True)[0] is None  # none in this run: the kept log tail is read
    assert cli.log_source(_with_run(None), previous=False)[::2] == (None, "no driver has been started yet")
    # Spark names executor pods <spark.kubernetes.executor.podNamePrefix>-exec-<id>; their container is "executor".
    assert cli.log_source(_with_run(3), previous=False, executor=4)[:2] == ("clicks-r2a3-exec-4", "executor")
