"""Keyless object storage on the cluster (issue 24): the windowed-counts example keeps its state on MinIO with
``spec.state.s3.credentialsMode: webIdentity`` and no key anywhere. MinIO (`testbed.sts`, on the node's bridge
gateway) trusts the cluster's own ServiceAccount issuer as its OpenID provider; the operator projects a token for
the STS's audience into the driver and the executors, whose AWS SDK exchanges it through AssumeRoleWithWebIdentity
for temporary credentials. The app commits batches to the bucket, its executors write their state files there
(they hold no other credentials), a force-deleted driver's successor recovers from the checkpoint on S3, a
savepoint upgrade writes its savepoint there and restores it into a new run, and the sink holds every event
exactly once; no pod, ConfigMap, Secret or StreamingApp of the app holds an access key.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from headrace.api import names
from headrace.render import identity
from testbed import objectstore, scenario, sts
from testbed.controlplane import create_namespace, delete_namespace

from . import store_cases
from .conftest import E2E

pytestmark = pytest.mark.e2e

AUDIENCE = "sts.headrace.test"
STATIC_KEYS = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"}
EXECUTOR_STATE = re.compile(r"/state/\d+/\d+/")  # a stateful operator's files, written by the executors


@pytest.fixture(scope="module")
def minio(e2e: E2E) -> Iterator[sts.MinioSts]:
    plane = e2e.control_plane
    if plane is None or plane.advertise_address is None:
        pytest.skip("the target cluster is not the testbed's (HEADRACE_E2E_KUBECONFIG): no issuer to trust")
    with e2e.api_client() as api:
        sts.allow_anonymous_discovery(api)
    with sts.MinioSts(sts.ClusterIssuer.of(plane), AUDIENCE, address=plane.advertise_address) as store:
        yield store


@pytest.fixture(scope="module")
def app(e2e: E2E, minio: sts.MinioSts) -> Iterator[scenario.AppHandle]:
    with e2e.api_client() as api:
        namespace = create_namespace(api)
        try:
            data = scenario.prepare_data_dir(e2e.data_root, namespace)
            handle = scenario.AppHandle(api, namespace, data)
            for _ in range(4):
                handle.input.next_file()
            manifest = scenario.windowed_counts_manifest(data, upgradeMode="savepoint")
            manifest["spec"]["state"] = {
                "partitions": store_cases.STATE_PARTITIONS,
                "checkpointDir": f"s3a://{minio.bucket}/{namespace}/state",
                "savepointDir": f"s3a://{minio.bucket}/{namespace}/savepoints",
                "s3": {
                    "endpoint": minio.endpoint,
                    "region": objectstore.REGION,
                    "pathStyleAccess": True,
                    "credentialsMode": "webIdentity",
                    "webIdentity": {"roleArn": minio.role_arn, "audience": AUDIENCE, "stsEndpoint": minio.endpoint},
                },
            }
            e2e.apply(namespace, data / "streamingapp.yaml", manifest)
            yield handle
        finally:
            delete_namespace(api, namespace)


def test_commits_batches_to_the_bucket_with_credentials_from_its_web_identity(
    minio: sts.MinioSts, app: scenario.AppHandle
) -> None:
    started = time.monotonic()
    app.wait(lambda: store_cases.commits(minio.keys, app), 420, f"a batch committed to MinIO\n{app.diagnostics()}")
    print(f"apply -> first batch committed through web identity: {time.monotonic() - started:.1f}s")
    executor_state = [key for key in minio.keys(f"{app.namespace}/state/") if EXECUTOR_STATE.search(key)]
    assert executor_state, "no state file of the executors on MinIO"


def _env_names(pod: Any) -> set[str]:
    return {variable.name for container in pod.spec.containers for variable in container.env or []}


def test_driver_and_executors_read_the_projected_token_and_hold_no_static_key(
    minio: sts.MinioSts, app: scenario.AppHandle
) -> None:
    app.wait(lambda: app.running(names.ROLE_EXECUTOR), 300, "a running executor")
    pods = {role: app.running(role)[0] for role in (names.ROLE_DRIVER, names.ROLE_EXECUTOR)}
    for role, pod in pods.items():
        (volume,) = [item for item in pod.spec.volumes if item.name == identity.TOKEN_VOLUME]
        (source,) = volume.projected.sources
        assert source.service_account_token.audience == AUDIENCE, role
        env = {item.name: item.value for container in pod.spec.containers for item in container.env or []}
        assert env[identity.AWS_WEB_IDENTITY_TOKEN_FILE] == identity.TOKEN_FILE, role
        assert env[identity.AWS_ROLE_ARN] == minio.role_arn, role
        assert not STATIC_KEYS & _env_names(pod), role
        assert not [c.env_from for c in pod.spec.containers if c.env_from], role
    assert pods[names.ROLE_EXECUTOR].spec.service_account_name == names.executor_service_account(app.name)
    texts = [yaml.safe_dump(app.app())]
    texts += [yaml.safe_dump(item.data) for item in app.core.list_namespaced_config_map(app.namespace).items]
    texts += [str(item.data) for item in app.core.list_namespaced_secret(app.namespace).items]
    texts += [json.dumps(pod.to_dict(), default=str) for pod in app.pods(names.ROLE_DRIVER)]
    texts += [json.dumps(pod.to_dict(), default=str) for pod in app.pods(names.ROLE_EXECUTOR)]
    assert not [text[:200] for text in texts if minio.access_key in text or minio.secret_key in text]
    assert not [text[:200] for text in texts if "fs.s3a.access.key" in text or "fs.s3a.secret.key" in text]


def test_driver_deleted_recovers_from_the_checkpoint_through_web_identity(
    minio: sts.MinioSts, app: scenario.AppHandle
) -> None:
    store_cases.driver_deleted_recovers_from_the_checkpoint(minio.keys, app, "MinIO")


def test_savepoint_through_web_identity_restores_into_a_new_run(minio: sts.MinioSts, app: scenario.AppHandle) -> None:
    store_cases.savepoint_restores_into_a_new_run(minio.keys, app, f"s3a://{minio.bucket}/")


def test_sink_holds_every_event_exactly_once(app: scenario.AppHandle) -> None:
    store_cases.sink_holds_every_event_exactly_once(app)
