"""State on Google Cloud Storage (issue 24): the windowed-counts example keeps its checkpoints and savepoints on
gs:// through the image's Cloud Storage connector, against fake-gcs-server (`testbed.gcs`, a GCS JSON API server
built from its Go module, on the node's bridge gateway), with ``spec.state.gcs.credentialsMode:
serviceAccountKeySecret``: a Secret holds a service account JSON key whose token endpoint is the testbed's
stand-in of Google's (`testbed.gcs.GoogleTokens`, on the bridge too, verifying each grant's signature). Driver and
executors mount the key and exchange it for tokens, commit batches and write their state files to the bucket, a
force-deleted driver's successor recovers from the checkpoint on GCS, a savepoint upgrade writes its savepoint
there and restores it into a new run, and the sink holds every event exactly once; the key is in no ConfigMap,
pod spec or StreamingApp. (The emulator has no objects.moveTo: the app turns the connector's move API off in
sparkConf, as `unauthenticatedEmulator` does by itself.)
"""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Iterator

import pytest
from kubernetes import client

from headrace.api import names
from headrace.render import identity, manifests
from testbed import gcs, scenario
from testbed.controlplane import create_namespace, delete_namespace

from . import store_cases
from .conftest import E2E

pytestmark = pytest.mark.e2e

EXECUTOR_STATE = re.compile(r"/state/\d+/\d+/")  # a stateful operator's files, written by the executors


KEY_SECRET = "gcs-key"


@pytest.fixture(scope="module")
def server(e2e: E2E) -> Iterator[gcs.FakeGcs]:
    plane = e2e.control_plane
    if plane is None or plane.advertise_address is None:
        pytest.skip("the target cluster is not the testbed's (HEADRACE_E2E_KUBECONFIG): no bridge to serve GCS on")
    with gcs.FakeGcs(address=plane.advertise_address) as store:
        yield store


@pytest.fixture(scope="module")
def tokens(server: gcs.FakeGcs) -> Iterator[gcs.GoogleTokens]:
    with gcs.GoogleTokens(address=server.address) as stand_in:
        yield stand_in


@pytest.fixture(scope="module")
def app(e2e: E2E, server: gcs.FakeGcs, tokens: gcs.GoogleTokens) -> Iterator[scenario.AppHandle]:
    with e2e.api_client() as api:
        namespace = create_namespace(api)
        try:
            key = json.dumps(tokens.service_account_key()).encode()
            secret = client.V1Secret(
                metadata=client.V1ObjectMeta(name=KEY_SECRET), data={"key.json": base64.b64encode(key).decode()}
            )
            client.CoreV1Api(api).create_namespaced_secret(namespace, secret)
            data = scenario.prepare_data_dir(e2e.data_root, namespace)
            handle = scenario.AppHandle(api, namespace, data)
            for _ in range(4):
                handle.input.next_file()
            manifest = scenario.windowed_counts_manifest(data, upgradeMode="savepoint")
            manifest["spec"]["state"] = {
                "partitions": store_cases.STATE_PARTITIONS,
                "checkpointDir": f"gs://{server.bucket}/{namespace}/state",
                "savepointDir": f"gs://{server.bucket}/{namespace}/savepoints",
                "gcs": {"endpoint": server.endpoint, "serviceAccountKeySecret": {"name": KEY_SECRET}},
            }
            manifest["spec"].setdefault("sparkConf", {})[manifests.GCS_MOVE_SETTING] = "false"
            e2e.apply(namespace, data / "streamingapp.yaml", manifest)
            yield handle
        finally:
            delete_namespace(api, namespace)


def test_commits_batches_and_executor_state_to_the_bucket(server: gcs.FakeGcs, app: scenario.AppHandle) -> None:
    started = time.monotonic()
    app.wait(lambda: store_cases.commits(server.names, app), 420, f"a batch committed to GCS\n{app.diagnostics()}")
    print(f"apply -> first batch committed to gs://: {time.monotonic() - started:.1f}s")
    executor_state = [name for name in server.names(f"{app.namespace}/state/") if EXECUTOR_STATE.search(name)]
    assert executor_state, "no state file of the executors on GCS"


def test_driver_and_executors_exchange_the_mounted_key_for_tokens(
    tokens: gcs.GoogleTokens, app: scenario.AppHandle
) -> None:
    app.wait(lambda: app.running(names.ROLE_EXECUTOR), 300, "a running executor")
    pods = {role: app.running(role)[0] for role in (names.ROLE_DRIVER, names.ROLE_EXECUTOR)}
    for role, pod in pods.items():
        (volume,) = [item for item in pod.spec.volumes if item.name == identity.GCS_KEY_VOLUME]
        assert volume.secret.secret_name == KEY_SECRET, role
        mounts = {mount.name: mount for container in pod.spec.containers for mount in container.volume_mounts or []}
        assert mounts[identity.GCS_KEY_VOLUME].mount_path == identity.GCS_KEY_DIR, role
        app.wait(lambda pod=pod: pod.status.pod_ip in tokens.sources, 120, f"a token grant from the {role}")
    assert set(tokens.grants) == {f"jwt-bearer {gcs.SERVICE_ACCOUNT}"}
    assert tokens.refused == []
    private_key = tokens.service_account_key()["private_key"].splitlines()[1]
    texts = [json.dumps(app.app())]
    texts += [json.dumps(item.data) for item in app.core.list_namespaced_config_map(app.namespace).items]
    texts += [json.dumps(pod.to_dict(), default=str) for pod in app.pods(names.ROLE_DRIVER)]
    texts += [json.dumps(pod.to_dict(), default=str) for pod in app.pods(names.ROLE_EXECUTOR)]
    assert not [text[:200] for text in texts if private_key in text]


def test_driver_deleted_recovers_from_the_checkpoint_on_gcs(server: gcs.FakeGcs, app: scenario.AppHandle) -> None:
    store_cases.driver_deleted_recovers_from_the_checkpoint(server.names, app, "GCS")


def test_savepoint_on_gcs_restores_into_a_new_run(server: gcs.FakeGcs, app: scenario.AppHandle) -> None:
    store_cases.savepoint_restores_into_a_new_run(server.names, app, f"gs://{server.bucket}/")


def test_sink_holds_every_event_exactly_once(app: scenario.AppHandle) -> None:
    store_cases.sink_holds_every_event_exactly_once(app)
