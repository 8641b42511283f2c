"""The windowed-counts example on a real cluster: real Spark drivers and executors in real pods.

One app run, in steps: it runs its driver and executors as pods and commits batches; its driver pod
is deleted and it recovers from the checkpoint; an executor pod is deleted and the job carries on;
the sink then holds every input event exactly once; deleting the app removes everything it owned.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from headrace.api import names
from testbed import scenario
from testbed.environment import deployed_example
from testbed.sink import wait_for_every_window

from .conftest import E2E

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def deployed(e2e: E2E) -> Iterator[scenario.AppHandle]:
    with deployed_example(e2e, 5) as handle:
        yield handle


def test_driver_and_executors_run_as_pods_and_commit_batches(e2e: E2E, deployed: scenario.AppHandle) -> None:
    started = time.monotonic()
    deployed.wait(lambda: deployed.running(names.ROLE_DRIVER), 300, "the driver pod to run")
    deployed.wait(lambda: deployed.status().get("phase") == "Running", 60, "phase Running")
    deployed.wait(lambda: deployed.running(names.ROLE_EXECUTOR), 300, "an executor pod to run")
    deployed.wait(deployed.commits, 300, "the first committed batch")
    print(f"apply -> first committed batch: {time.monotonic() - started:.1f}s")
    assert "Running" in e2e.kubectl("get", "sapp", "-n", deployed.namespace)


def test_driver_deleted_recovers_from_checkpoint(deployed: scenario.AppHandle) -> None:
    with scenario.Writer(deployed.input):
        old = deployed.wait(lambda: deployed.running(names.ROLE_DRIVER), 120, "the driver")[0]
        deleted_at, clock = time.time(), time.monotonic()
        deployed.core.delete_namespaced_pod(old.metadata.name, deployed.namespace)
        new = deployed.wait(
            lambda: [pod for pod in deployed.running(names.ROLE_DRIVER) if pod.metadata.name != old.metadata.name],
            300,
            "a new driver attempt",
        )[0]
        assert new.metadata.labels[names.ATTEMPT] == str(int(old.metadata.labels[names.ATTEMPT]) + 1)
        assert new.metadata.labels[names.RUN] == old.metadata.labels[names.RUN]
        deployed.wait(lambda: deployed.commits_after(deleted_at + 1), 300, "a batch committed by the new driver")
        print(f"driver deleted -> first batch committed by the new driver: {time.monotonic() - clock:.1f}s")
    assert deployed.status()["restarts"]["total"] >= 1

    def explained() -> list[str]:  # the operator's account of where the recovery's seconds went
        events = deployed.core.list_namespaced_event(deployed.namespace, field_selector="reason=FirstBatch").items
        return [str(event.message) for event in events if str(event.message).startswith(f"driver {new.metadata.name} ")]

    [message] = deployed.wait(explained, 60, "the FirstBatch event of the new driver")
    print(message)
    assert "after the failure at" in message
    for step in ("pod created", "container started", "JVM", "SparkContext", "queries started", "first batch"):
        assert f"{step} +" in message


def test_executor_deleted_job_carries_on(deployed: scenario.AppHandle) -> None:
    executor = deployed.wait(lambda: deployed.running(names.ROLE_EXECUTOR), 300, "an executor")[0]
    deleted_at = time.time()
    deployed.core.delete_namespaced_pod(executor.metadata.name, deployed.namespace)
    deployed.wait(
        lambda: [pod for pod in deployed.running(names.ROLE_EXECUTOR) if pod.metadata.name != executor.metadata.name],
        300,
        "a replacement executor",
    )
    deployed.input.next_file()
    deployed.wait(lambda: deployed.commits_after(deleted_at + 1), 300, "a batch after the executor loss")
    assert deployed.running(names.ROLE_DRIVER), "the driver must survive an executor loss"


def test_sink_holds_every_event_exactly_once(deployed: scenario.AppHandle) -> None:
    expected = scenario.expected_tumbling_counts(deployed.input.counted())
    deployed.input.flush()

    result = wait_for_every_window(deployed, expected, timeout=300)
    assert {key: result[key] for key in expected} == dict(expected)
    assert sum(expected.values()) == len(deployed.input.counted())


def test_deleting_the_app_removes_everything_it_owned(e2e: E2E, deployed: scenario.AppHandle) -> None:
    e2e.kubectl("delete", "sapp", scenario.APP, "-n", deployed.namespace, "--wait=true")
    selector = f"{names.APP}={scenario.APP}"

    def leftovers() -> list[str]:
        core, namespace = deployed.core, deployed.namespace
        found = [pod.metadata.name for pod in core.list_namespaced_pod(namespace).items]
        found += [item.metadata.name for item in core.list_namespaced_service(namespace, label_selector=selector).items]
        found += [
            item.metadata.name for item in core.list_namespaced_config_map(namespace, label_selector=selector).items
        ]
        return found

    deployed.wait(lambda: not leftovers(), 180, "pods, services and configmaps to be collected")
