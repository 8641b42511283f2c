"""Stateful lifecycle on a real cluster, each step ending with the sink exactly-once.

One app, in steps: a savepoint while running (the job goes on), in-place rescale up and down
(no restart), a savepoint upgrade to new args, suspend then resume (restored from the suspend
savepoint), and the sink checked against the input at the end.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator

import pytest
from kubernetes import client

from headrace.api import models, names
from headrace.testbed import scenario
from headrace.testbed.environment import deployed_example

from .conftest import E2E
from .sink import read_tumbling

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def app(e2e: E2E) -> Iterator[scenario.AppHandle]:
    with deployed_example(e2e, 4, upgradeMode="savepoint") as handle:
        handle.wait(handle.commits, 600, "the first committed batch")
        yield handle


def _driver_names(app: scenario.AppHandle) -> list[str]:
    return [pod.metadata.name for pod in app.running(names.ROLE_DRIVER)]


def test_savepoint_while_running_does_not_stop_the_job(app: scenario.AppHandle) -> None:
    drivers = _driver_names(app)
    with scenario.Writer(app.input):
        taken = time.time()
        app.patch_spec({"savepoints": {"triggerNonce": 1, "retain": 3}})
        status = app.wait(lambda: (s := app.status()).get("latestSavepoint") and s, 300, "a completed savepoint")
        app.wait(lambda: app.commits_after(taken + 1), 120, "batches after the savepoint")
    assert _driver_names(app) == drivers, "a savepoint must not restart the driver"
    saved = client.CustomObjectsApi(app.core.api_client).list_namespaced_custom_object(
        models.GROUP, models.VERSION, app.namespace, models.SAVEPOINT_PLURAL
    )["items"]
    assert [item["status"]["phase"] for item in saved] == ["Succeeded"]
    assert (app.data / "savepoints").exists()
    print(f"savepoint: {status['latestSavepoint']}")


def test_rescale_in_place_up_and_down_without_restart(e2e: E2E, app: scenario.AppHandle) -> None:
    drivers = _driver_names(app)
    clock = time.monotonic()
    e2e.kubectl("scale", "sapp", scenario.APP, "-n", app.namespace, "--replicas=2")
    app.wait(lambda: len(app.running(names.ROLE_EXECUTOR)) == 2, 300, "two executors")
    print(f"in-place scale 1 -> 2: {time.monotonic() - clock:.1f}s")
    clock = time.monotonic()
    e2e.kubectl("scale", "sapp", scenario.APP, "-n", app.namespace, "--replicas=1")
    app.wait(lambda: len(app.running(names.ROLE_EXECUTOR)) == 1, 300, "back to one executor")
    print(f"in-place scale 2 -> 1: {time.monotonic() - clock:.1f}s")
    assert _driver_names(app) == drivers, "an in-place rescale must not restart the driver"
    assert app.status()["executors"] == 1


def test_savepoint_upgrade_to_new_args(app: scenario.AppHandle) -> None:
    run = app.status()["run"]["number"]
    spec = app.app()["spec"]
    args = [*spec["application"]["args"], "--trigger-seconds", "3"]
    clock = time.monotonic()
    with scenario.Writer(app.input):
        app.patch_spec({"application": {**spec["application"], "args": args}})
        app.wait(lambda: (app.status().get("run") or {}).get("number") == run + 1, 300, "a new run")
        status = app.wait(lambda: (s := app.status()).get("phase") == "Running" and s, 300, "the new run running")
        assert status["run"]["restoredFrom"], "a savepoint upgrade restores the new run from the savepoint"
        started = time.time()
        app.wait(lambda: app.commits_after(started), 300, "a batch committed by the upgraded job")
    print(f"savepoint upgrade downtime (spec change -> new run committing): {time.monotonic() - clock:.1f}s")


def test_suspend_then_resume(e2e: E2E, app: scenario.AppHandle) -> None:
    clock = time.monotonic()
    app.patch_spec({"job": {"state": "suspended"}})
    status = app.wait(lambda: (s := app.status()).get("phase") == "Suspended" and s, 300, "Suspended")
    app.wait(lambda: not app.pods(names.ROLE_DRIVER), 120, "no driver pod")
    assert status["suspendedSavepoint"]
    app.input.next_file()  # arrives while suspended: must be processed after resume
    app.patch_spec({"job": {"state": "running"}})
    resumed_at = time.time()
    app.wait(lambda: app.commits_after(resumed_at), 600, "a batch after resume")
    print(f"suspend -> resume -> first batch: {time.monotonic() - clock:.1f}s")
    assert app.status()["run"]["restoredFrom"] == status["suspendedSavepoint"]


def test_sink_is_exactly_once_after_the_whole_lifecycle(app: scenario.AppHandle) -> None:
    expected = scenario.expected_tumbling_counts(app.input.counted())
    app.input.flush()

    def complete() -> Counter[tuple[str, str]] | None:
        seen = read_tumbling(app.data / "output" / "tumbling")
        return seen if set(seen) >= set(expected) else None

    result = app.wait(complete, 300, "every window in the sink")
    assert {key: result[key] for key in expected} == dict(expected)
