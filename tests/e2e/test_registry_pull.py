"""Images pulled from an authenticated registry with `spec.imagePullSecrets`, on the real cluster.

The local cluster's node pulls every ``localhost/...`` image from the testbed registry (htpasswd over TLS,
`testbed.registry`), holding node-wide credentials for ``localhost/headrace/...`` only, as a cloud node holds
them for its platform's registry: the operator (installed from the chart the registry serves as an OCI
artifact) and every other e2e app are pulled that way. Here a third-party app image, built as docs/app-image.md
says (examples/app-image: a Dockerfile FROM the Spark image), is pushed to another path of the same registry,
``localhost/tenant/page-counts``, which only an image pull Secret opens: an app without one waits with the pull
failure named in its Ready condition; an app naming the Secret in `spec.imagePullSecrets` pulls (its driver and
its executors carry the Secret) and commits batches. The app without the Secret runs first, while no pod of the
node has pulled that image yet, so its failure is the registry's refusal.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiClient

from headrace.api import names
from testbed import REPOSITORY, images, registry, scenario
from testbed.cluster import REGISTRY_NAME
from testbed.controlplane import create_namespace, delete_namespace
from testbed.scenario import OPERATOR_NAMESPACE, AppHandle

from .conftest import E2E

pytestmark = pytest.mark.e2e

TENANT_IMAGE = "tenant/page-counts:1"  # under a path of the registry the node holds no credentials for
APP_IMAGE_EXAMPLE = REPOSITORY / "examples" / "app-image"
PULL_SECRET = "tenant-registry"
PULL_TIMEOUT = 240


@pytest.fixture(scope="module")
def tenant_image(e2e: E2E) -> str:
    """The example third-party app (examples/app-image: a Dockerfile FROM the Spark image), built and pushed to
    the registry's tenant path as docs/app-image.md says; its name as pods give it."""
    if e2e.registry is None:
        pytest.skip("needs the local cluster's registry (HEADRACE_E2E_KUBECONFIG names another cluster)")
    local = images.build_app_image(APP_IMAGE_EXAMPLE, f"{REGISTRY_NAME}/{TENANT_IMAGE}")
    access = e2e.registry.access
    images.push(local, access.reference(TENANT_IMAGE), creds=access.credentials, cert_dir=e2e.registry.cert_dir)
    return local


def _page_counts(data: Path) -> dict[str, Any]:
    """The third-party app's `spec.application`: its script in its image, files in and parquet out on the
    shared directory."""
    return {
        "file": "local:///opt/app/page_counts.py",
        "args": ["--input", f"{data}/input", "--output", f"file://{data}/output", "--trigger-seconds", "2"],
    }


def _create_pull_secret(e2e: E2E, api: ApiClient, namespace: str) -> None:
    assert e2e.registry is not None
    secret = registry.pull_secret(PULL_SECRET, REGISTRY_NAME, e2e.registry.access)
    client.CoreV1Api(api).create_namespaced_secret(namespace, secret)


@contextlib.contextmanager
def _tenant_app(e2e: E2E, image: str, *, pull_secret: bool) -> Iterator[AppHandle]:
    """The third-party app in a fresh namespace (with the pull Secret, named in spec.imagePullSecrets, or
    without), three click files written; the namespace is deleted afterwards."""
    with e2e.api_client() as api:
        namespace = create_namespace(api)
        try:
            overrides: dict[str, Any] = {"image": image}
            if pull_secret:
                _create_pull_secret(e2e, api, namespace)
                overrides["imagePullSecrets"] = [{"name": PULL_SECRET}]
            data = scenario.prepare_data_dir(e2e.data_root, namespace)
            app = AppHandle(api, namespace, data)
            for _ in range(3):
                app.input.next_file()
            manifest = scenario.windowed_counts_manifest(data, **overrides)
            manifest["spec"]["application"] = _page_counts(data)
            e2e.apply(namespace, data / "streamingapp.yaml", manifest)
            yield app
        finally:
            delete_namespace(api, namespace)


def _pull_failure(app: AppHandle) -> dict[str, Any] | None:
    ready = next((c for c in app.status().get("conditions") or [] if c["type"] == "Ready"), None)
    if ready and ready["reason"] == "DriverPending" and "Pull" in ready["message"]:
        return dict(ready)
    return None


def test_0_the_operator_chart_and_image_came_from_the_registry(e2e: E2E) -> None:
    if e2e.registry is None:
        pytest.skip("needs the local cluster's registry (HEADRACE_E2E_KUBECONFIG names another cluster)")
    assert e2e.chart == f"oci://{e2e.registry.address}/charts/headrace"
    assert "name: headrace" in e2e.helm("show", "chart", e2e.chart, *e2e._helm_registry())
    with e2e.api_client() as api:
        events = client.CoreV1Api(api).list_namespaced_event(OPERATOR_NAMESPACE, field_selector="reason=Pulled")
    pulled = [event.message or "" for event in events.items]
    assert any(text.startswith('Successfully pulled image "localhost/headrace/operator:') for text in pulled), pulled


@pytest.fixture
def without_secret(e2e: E2E, tenant_image: str) -> Iterator[AppHandle]:
    with _tenant_app(e2e, tenant_image, pull_secret=False) as app:
        yield app


def test_1_an_app_without_the_pull_secret_says_the_node_cannot_pull(without_secret: AppHandle) -> None:
    app = without_secret
    ready = app.wait(lambda: _pull_failure(app), PULL_TIMEOUT, "the pull failure in the Ready condition")
    message = ready["message"]
    assert "ErrImagePull" in message or "ImagePullBackOff" in message, message
    assert "spec.imagePullSecrets" in message, message
    (driver,) = app.pods(names.ROLE_DRIVER)
    waiting = driver.status.container_statuses[0].state.waiting
    assert waiting is not None and waiting.reason in ("ErrImagePull", "ImagePullBackOff"), waiting
    assert not app.running(names.ROLE_DRIVER)
    events = app.core.list_namespaced_event(app.namespace, field_selector=f"involvedObject.name={driver.metadata.name}")
    refusals = [event.message or "" for event in events.items if event.reason == "Failed"]
    # containerd words the registry's 401 as "unauthorized", "authorization failed" or "no basic auth credentials"
    assert any(word in text.lower() for text in refusals for word in ("401", "authoriz", "auth credentials")), refusals


def test_2_an_app_with_the_pull_secret_pulls_and_commits(e2e: E2E, tenant_image: str) -> None:
    with _tenant_app(e2e, tenant_image, pull_secret=True) as app:
        app.wait(app.commits, 600, "a committed batch of the app pulled with its pull secret")
        (driver,) = app.running(names.ROLE_DRIVER)
        assert driver.spec.containers[0].image == tenant_image
        assert [ref.name for ref in driver.spec.image_pull_secrets] == [PULL_SECRET]
        executors = app.wait(lambda: app.running(names.ROLE_EXECUTOR), 300, "a running executor")
        for executor in executors:
            assert executor.spec.containers[0].image == tenant_image
            assert [ref.name for ref in executor.spec.image_pull_secrets or []] == [PULL_SECRET]
