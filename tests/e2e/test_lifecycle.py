"""Stateful lifecycle on a real cluster, each step ending with the sink exactly-once.

One app, in steps, with input arriving throughout: a savepoint while running (the job goes on),
in-place rescale up and down (no restart), a savepoint upgrade to new args, a state partition
change (stop-with-savepoint, offline repartition, restore), a last-state upgrade, a broken upgrade
rolled back to the last stable spec, suspend then resume (restored from the suspend savepoint), a
redeploy (spec.redeployNonce) from a savepoint taken batches earlier into a new output; the sink
(both outputs: each window once, the same count where both hold it) is then checked against the
input. Then a stateless upgrade to a new output: the new run starts with empty state and re-reads the
file source from its start, so the new output holds every input event exactly once on its own (the
documented stateless behaviour for a file source). Last, the app is deleted with a final savepoint, and nothing
it owned is left.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from headrace.api import models, names
from headrace.runtime import checkpoint_files
from testbed import scenario
from testbed.environment import deployed_example
from testbed.sink import read_tumbling, wait_for_every_window

from .conftest import E2E

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def app(e2e: E2E) -> Iterator[scenario.AppHandle]:
    with deployed_example(e2e, 4, upgradeMode="savepoint") as handle:
        handle.wait(handle.commits, 600, "the first committed batch")
        yield handle


def _driver_names(app: scenario.AppHandle) -> list[str]:
    return [pod.metadata.name for pod in app.running(names.ROLE_DRIVER)]


def _run_of(app: scenario.AppHandle) -> tuple[int, int]:
    run = app.status().get("run") or {}
    return int(run.get("number", 0)), int(run.get("attempt", 0))


def _events(app: scenario.AppHandle) -> list[str]:
    return [event.reason for event in app.core.list_namespaced_event(app.namespace).items]


def _change_and_wait_for(app: scenario.AppHandle, spec: dict[str, object], run: tuple[int, int], what: str) -> float:
    """Patch the spec with input arriving, wait until driver `run` (number, attempt) commits a batch; the
    seconds from the change to that first batch (the downtime)."""
    clock = time.monotonic()
    with scenario.Writer(app.input):
        changed = time.time()
        app.patch_spec(spec)
        app.wait(lambda: _run_of(app) == run and app.status().get("phase") == "Running", 400, what)
        commits = app.wait(app.driver_commits, 300, f"a batch committed by {what}")
        downtime = min(path.stat().st_mtime for path in commits) - changed
    print(f"{what}: downtime {downtime:.1f}s (step took {time.monotonic() - clock:.1f}s)")
    return downtime


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
    number, _ = _run_of(app)
    args = [*app.app()["spec"]["application"]["args"], "--trigger-seconds", "3"]
    _change_and_wait_for(app, {"application": {"args": args}}, (number + 1, 1), "the savepoint upgrade")
    status = app.status()
    assert status["run"]["restoredFrom"], "a savepoint upgrade restores the new run from the savepoint"
    assert status["run"]["restoredFrom"] == status["latestSavepoint"]["path"]


def test_partition_change_goes_through_savepoint_and_repartition(app: scenario.AppHandle) -> None:
    number, _ = _run_of(app)
    assert app.app()["spec"]["state"]["partitions"] == 8
    _change_and_wait_for(app, {"state": {"partitions": 12}}, (number + 1, 1), "the repartitioned run")
    assert "RescalingThroughSavepoint" in (reasons := _events(app)), reasons
    checkpoint = app.run_checkpoint()
    assert checkpoint is not None
    # Queries start one after another and each is repartitioned just before its start, so the first
    # query may commit while the second is still being repartitioned: wait for both.
    app.wait(lambda: _pinned_partitions(checkpoint) == {12}, 300, "every query's offsets pinning 12 partitions")


def _pinned_partitions(checkpoint: Path) -> set[int | None]:
    """The state partitions each query of a run's checkpoint pins in its newest offsets entry."""
    newest: dict[str, Path] = {}
    for entry in scenario.query_log(checkpoint, "offsets"):
        newest[entry.parents[1].name] = entry  # query_log is in batch order: the last one wins
    return {checkpoint_files.partitions_from_offsets(entry.read_text()) for entry in newest.values()} or {None}


def test_last_state_upgrade_keeps_the_checkpoint(app: scenario.AppHandle) -> None:
    number, attempt = _run_of(app)
    before = app.status()["run"]
    spec = app.app()["spec"]
    args = [*spec["application"]["args"], "--trigger-seconds", "2"]
    _change_and_wait_for(
        app, {"upgradeMode": "last-state", "application": {"args": args}}, (number, attempt + 1), "last-state upgrade"
    )
    after = app.status()["run"]
    assert after["checkpointDir"] == before["checkpointDir"], "last-state keeps the run's checkpoint"
    assert "LastStateUpgrade" in (reasons := _events(app)), reasons


def test_broken_upgrade_is_rolled_back_to_the_last_stable_spec(app: scenario.AppHandle) -> None:
    app.patch_spec({"rollback": {"enabled": True, "stableAfter": "10s"}})
    app.wait(
        lambda: (s := app.status()).get("lastStableSpec") and s["lastStableSpec"] == s.get("lastReconciledSpec"),
        120,
        "the running spec to count as stable",
    )
    good = app.app()["spec"]["application"]["args"]
    number, attempt = _run_of(app)
    with scenario.Writer(app.input):
        app.patch_spec({"application": {"args": [*good, "--no-such-option"]}})
        status = app.wait(lambda: (s := app.status()).get("phase") == "RolledBack" and s, 400, "phase RolledBack")
        assert status["run"]["number"] == number and status["run"]["attempt"] >= attempt + 2
        assert status["restarts"]["lastFailureReason"]
        app.wait(app.driver_commits, 300, "a batch committed by the rolled-back driver")
    assert "RollingBack" in (reasons := _events(app)), reasons
    running = json.loads(app.status()["lastReconciledSpec"])
    assert running["application"]["args"] == good
    # Fixing the spec (here: going back to the good args) clears the rolled-back state.
    app.patch_spec({"application": {"args": good}})
    app.wait(lambda: app.status().get("phase") == "Running", 120, "phase Running after the fix")
    assert _run_of(app)[0] == number


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


REDEPLOYED_OUTPUT = "output-redeploy"


def _with_output(app: scenario.AppHandle, output: str) -> list[str]:
    args = list(app.app()["spec"]["application"]["args"])
    at = args.index("--output") + 1
    return [*args[:at], f"file://{app.data}/{output}", *args[at + 1 :]]


def test_redeploy_from_a_chosen_savepoint_into_a_new_output(app: scenario.AppHandle) -> None:
    """A savepoint, batches after it, then a redeploy from it: run n+1 restores its state and offsets. The old
    output already holds the windows closed after the savepoint: the new run writes a new output (the same one
    would hold batches its checkpoint never planned: SinkAhead), which the next test checks with the old one."""
    number, _ = _run_of(app)
    spec = app.app()["spec"]
    before = (app.status().get("latestSavepoint") or {}).get("name")
    clock = time.monotonic()
    with scenario.Writer(app.input):
        app.patch_spec({"savepoints": {"triggerNonce": spec["savepoints"].get("triggerNonce", 0) + 1}})
        chosen = app.wait(
            lambda: (saved := app.status().get("latestSavepoint")) and saved["name"] != before and saved,
            300,
            "the savepoint to redeploy from",
        )
        saved_at = time.time()
        app.wait(lambda: app.commits_after(saved_at + 2), 120, "batches after the savepoint")
        redeploy = {"restoreFrom": {"savepoint": chosen["name"]}, "redeployNonce": spec.get("redeployNonce", 0) + 1}
        _change_and_wait_for(
            app,
            {**redeploy, "application": {"args": _with_output(app, REDEPLOYED_OUTPUT)}},
            (number + 1, 1),
            "redeploy",
        )
    status = app.status()
    assert status["run"]["restoredFrom"] == chosen["path"]
    assert "Redeploying" in (reasons := _events(app)), reasons
    print(f"redeploy from a chosen savepoint: {time.monotonic() - clock:.1f}s")


def test_sink_is_exactly_once_after_the_whole_lifecycle(app: scenario.AppHandle) -> None:
    expected = scenario.expected_tumbling_counts(app.input.counted())
    app.input.flush()

    if not (app.data / REDEPLOYED_OUTPUT).exists():  # the redeploy step did not run (e.g. -k)
        result = wait_for_every_window(app, expected, timeout=300)
        assert {key: result[key] for key in expected} == dict(expected)
        return
    merged = app.wait(lambda: _both_outputs(app, expected), 300, "every expected window in the two outputs")
    assert {key: merged[key] for key in expected} == dict(expected)


def _both_outputs(app: scenario.AppHandle, expected: dict[tuple[str, str], int]) -> dict[tuple[str, str], int] | None:
    """The windows of the output before the redeploy and after it, once they hold every expected one; a window both
    hold (closed between the savepoint and the redeploy, written again by the new run) has the same count in each."""
    old = read_tumbling(app.data / "output" / "tumbling")
    new = read_tumbling(app.data / REDEPLOYED_OUTPUT / "tumbling")
    assert all(old[key] == new[key] for key in set(old) & set(new)), "a window counted differently after the redeploy"
    merged = {**old, **new}
    return merged if set(merged) >= set(expected) else None


def test_stateless_upgrade_starts_from_empty_state_into_a_new_output(app: scenario.AppHandle) -> None:
    number, _ = _run_of(app)
    args = app.app()["spec"]["application"]["args"]
    output = args.index("--output") + 1
    fresh = [*args[:output], f"file://{app.data}/output-stateless", *args[output + 1 :]]
    app.patch_spec({"upgradeMode": "stateless", "application": {"args": fresh}})
    status = app.wait(
        lambda: _run_of(app) == (number + 1, 1) and (s := app.status()).get("phase") == "Running" and s,
        400,
        "the stateless run",
    )
    assert not status["run"].get("restoredFrom"), "a stateless upgrade restores nothing"
    assert "StatelessUpgrade" in (reasons := _events(app)), reasons
    expected = scenario.expected_tumbling_counts(app.input.counted())

    result = wait_for_every_window(app, expected, "output-stateless", timeout=400)
    assert {key: result[key] for key in expected} == dict(expected)


def test_deletion_takes_a_final_savepoint(e2e: E2E, app: scenario.AppHandle) -> None:
    """spec.savepoints.onDeletion: deleting the app waits for a final savepoint of its running driver, which
    outlives it; the deletion then completes (kubectl delete --wait returns)."""
    app.patch_spec({"savepoints": {"onDeletion": True, "onDeletionTimeout": "3m"}})
    app.wait(
        lambda: names.FINAL_SAVEPOINT_FINALIZER in (app.app()["metadata"].get("finalizers") or []), 60, "the finalizer"
    )
    app.wait(lambda: app.status().get("phase") == "Running", 300, "Running")
    clock = time.monotonic()
    e2e.kubectl("delete", "sapp", scenario.APP, "-n", app.namespace, "--wait=true", "--timeout=240s")
    print(f"deletion with a final savepoint: {time.monotonic() - clock:.1f}s")
    saved = client.CustomObjectsApi(app.core.api_client).list_namespaced_custom_object(
        models.GROUP, models.VERSION, app.namespace, models.SAVEPOINT_PLURAL
    )["items"]
    final = [item for item in saved if item["spec"]["reason"] == "deletion"]
    assert [item["status"]["phase"] for item in final] == ["Succeeded"], final
    assert app.local_path(final[0]["status"]["path"]).is_dir()
    # posted right after the finalizer is released: kubectl may return first
    app.wait(lambda: "FinalSavepoint" in _events(app), 30, "the FinalSavepoint event")
    app.wait(lambda: not _owned_leftovers(app), 180, "the app's pods, services and configmaps to be collected")


def _owned_leftovers(app: scenario.AppHandle) -> list[str]:
    """What is left of the deleted app in its namespace: any pod, and its labelled services and configmaps."""
    core, namespace, selector = app.core, app.namespace, f"{names.APP}={scenario.APP}"
    found = [pod.metadata.name for pod in core.list_namespaced_pod(namespace).items]
    found += [item.metadata.name for item in core.list_namespaced_service(namespace, label_selector=selector).items]
    found += [item.metadata.name for item in core.list_namespaced_config_map(namespace, label_selector=selector).items]
    return found
