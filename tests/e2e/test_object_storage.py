"""Checkpoints and savepoints on the cluster's S3 server (versitygw, ``http://s3.s3.svc:9000``), in steps.

The windowed-counts example keeps its state in ``s3a://headrace/<namespace>/...`` with the access key pair
from a Secret it references (spec.state.s3.credentialsSecret): it commits batches to the bucket, the sink holds
every event exactly once, and the secret key is in no ConfigMap, no StreamingApp and no log. A checkpoint on a
hostPath is refused with a message naming the field and the fix. Recovery from a checkpoint on S3 and a savepoint
restored from S3 are proven by tests/e2e/test_web_identity.py (the same flow, keyless), and with this Secret mode
by the chaos suite on the quick start's app (tests/e2e/test_chaos.py: driver deleted, operator restarted during a
savepoint): this module's own copies of both were retired to keep CI under its limit.
The bucket is a directory on this machine, so the checkpoint's commit files are read there directly.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import yaml
from kubernetes import client

from headrace.api import names
from testbed import objectstore, scenario
from testbed.controlplane import create_namespace, delete_namespace
from testbed.sink import wait_for_every_window

from . import store_cases
from .conftest import E2E

pytestmark = pytest.mark.e2e


def _store(e2e: E2E) -> objectstore.ClusterObjectStore:
    if e2e.object_store is None:
        pytest.skip("the target cluster has no testbed S3 server (HEADRACE_E2E_KUBECONFIG)")
    return e2e.object_store


@pytest.fixture(scope="module")
def app(e2e: E2E) -> Iterator[scenario.AppHandle]:
    _store(e2e)
    with e2e.api_client() as api:
        namespace = create_namespace(api)
        try:
            storage = objectstore.storage_for(api, namespace)  # copies the credentials Secret into it
            assert storage is not None, "the cluster publishes no S3 server (ConfigMap s3/s3-testbed)"
            data = scenario.prepare_data_dir(e2e.data_root, namespace)
            # The bucket is a local directory: data/state shows the checkpoints where AppHandle looks for them.
            bucket_state = storage.host_path(storage.state["checkpointDir"])
            bucket_state.mkdir(parents=True)
            (data / "state").rmdir()
            (data / "state").symlink_to(bucket_state)
            handle = scenario.AppHandle(api, namespace, data)
            for _ in range(4):
                handle.input.next_file()
            manifest = scenario.windowed_counts_manifest(data, upgradeMode="savepoint")
            manifest["spec"]["state"] = {**storage.state, "partitions": store_cases.STATE_PARTITIONS}
            e2e.apply(namespace, data / "streamingapp.yaml", manifest)
            yield handle
        finally:
            delete_namespace(api, namespace)


def test_commits_batches_to_the_bucket(app: scenario.AppHandle) -> None:
    started = time.monotonic()
    app.wait(app.commits, 420, f"the first batch committed to S3\n{app.diagnostics()}")
    print(f"apply -> first batch committed to S3: {time.monotonic() - started:.1f}s")
    assert app.status()["run"]["checkpointDir"].startswith("s3a://")


def test_sink_holds_every_event_exactly_once(app: scenario.AppHandle) -> None:
    expected = scenario.expected_tumbling_counts(app.input.counted())
    app.input.flush()

    result = wait_for_every_window(app, expected, timeout=300)
    assert {key: result[key] for key in expected} == dict(expected)


def test_the_secret_key_is_in_no_configmap_app_or_log(e2e: E2E, app: scenario.AppHandle) -> None:
    secret_key = _store(e2e).secret_for(app.namespace)["stringData"][objectstore.SECRET_ACCESS_KEY_KEY]
    texts = [yaml.safe_dump(app.app())]
    texts += [yaml.safe_dump(item.data) for item in app.core.list_namespaced_config_map(app.namespace).items]
    pods = [(pod, app.namespace) for pod in app.pods(names.ROLE_DRIVER) + app.pods(names.ROLE_EXECUTOR)]
    pods += [
        (pod, scenario.OPERATOR_NAMESPACE) for pod in app.core.list_namespaced_pod(scenario.OPERATOR_NAMESPACE).items
    ]
    for pod, namespace in pods:
        try:
            texts.append(app.core.read_namespaced_pod_log(pod.metadata.name, namespace))
        except client.ApiException as error:  # a pod not started (yet) has no log
            if error.status != 400:
                raise
    assert len(texts) >= 4
    assert not [text[:200] for text in texts if secret_key in text]


def test_a_checkpoint_on_a_hostpath_is_refused_naming_the_field_and_the_fix(e2e: E2E) -> None:
    with e2e.api_client() as api:
        namespace = create_namespace(api)
        try:
            data = scenario.prepare_data_dir(e2e.data_root, namespace)
            manifest = scenario.windowed_counts_manifest(data)
            manifest["spec"]["state"].pop("allowNodeLocal")
            e2e.apply(namespace, data / "streamingapp.yaml", manifest)
            handle = scenario.AppHandle(api, namespace, data)
            ready = handle.wait(
                lambda: next(
                    (c for c in handle.status().get("conditions", []) if c.get("reason") == "InvalidSpec"), None
                ),
                120,
                "the InvalidSpec condition",
            )
            assert "spec.state.checkpointDir" in ready["message"]
            assert "hostPath" in ready["message"]
            assert "spec.state.allowNodeLocal: true" in ready["message"]
            assert "s3a://" in ready["message"]
            assert not handle.pods(names.ROLE_DRIVER)
        finally:
            delete_namespace(api, namespace)
