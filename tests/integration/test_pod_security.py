"""The real API server's PodSecurity admission judges the pods the operator renders: in a namespace that
enforces the `restricted` standard, the driver pod and an executor pod made from the rendered template
are admitted (server-side dry run); a pod without the operator's settings is refused there, so the
namespace really enforces."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from headrace.adapters.kube import KubeClient
from headrace.api.models import StreamingAppSpec
from headrace.render import identity, manifests

RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}


def _attempt(namespace: str, **extra: Any) -> manifests.Attempt:
    spec = StreamingAppSpec.model_validate(
        {
            "image": "localhost/headrace/spark:0.1.0",
            "application": {"file": "local:///opt/headrace/apps/windowed-counts/app.py"},
            "state": {"checkpointDir": "file:///var/lib/headrace/state"},
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
            "volumeMounts": [{"name": "data", "mountPath": "/var/lib/headrace"}],
            "executor": {"podTemplate": {"spec": {"securityContext": {"fsGroup": 185}}}},
            **extra,
        }
    )
    return manifests.Attempt(
        app="clicks",
        namespace=namespace,
        app_uid="0a0a0a0a-0000-0000-0000-000000000000",
        run=1,
        attempt=1,
        spec=spec,
        spec_hash="0123456789ab",
        checkpoint_dir="file:///var/lib/headrace/state/r1",
        operator_namespace="headrace-system",
    )


def _executor_pod(attempt: manifests.Attempt) -> dict[str, Any]:
    """What Spark makes of the template: the template with a name, the image and the executor's args."""
    pod = copy.deepcopy(manifests.executor_pod_template(attempt))
    pod["metadata"]["name"] = "clicks-r1a1-exec-1"
    pod["spec"]["serviceAccountName"] = manifests.spark_conf(attempt)[
        "spark.kubernetes.authenticate.executor.serviceAccountName"
    ]
    pod["spec"]["restartPolicy"] = "Never"
    pod["spec"]["containers"][0].update({"image": attempt.spec.image, "args": ["executor"]})
    return pod


def _unowned(obj: dict[str, Any]) -> dict[str, Any]:
    """Without the owner reference: no StreamingApp owns these here (the garbage collector would delete them)."""
    return {**obj, "metadata": {key: value for key, value in obj["metadata"].items() if key != "ownerReferences"}}


@pytest.fixture
def restricted(kube_api: ApiClient, namespace: str) -> str:
    client.CoreV1Api(kube_api).patch_namespace(namespace, {"metadata": {"labels": RESTRICTED}})
    return namespace


def test_rendered_pods_are_admitted_where_restricted_is_enforced(kube_api: ApiClient, restricted: str) -> None:
    attempt = _attempt(restricted)
    kube = KubeClient(kube_api)
    for obj in manifests.rbac(attempt.app, restricted, attempt.app_uid, attempt):
        if obj["kind"] == "ServiceAccount":  # the ServiceAccount admission needs them to exist
            kube.create(_unowned(obj))
    (network_policy,) = [obj for obj in manifests.attempt_objects(attempt) if obj["kind"] == "NetworkPolicy"]
    kube.create(_unowned(network_policy), dry_run=True)  # the API server takes the app's NetworkPolicy
    core = client.CoreV1Api(kube_api)
    for pod in (manifests.driver_pod_manifest(attempt), _executor_pod(attempt)):
        core.create_namespaced_pod(restricted, _unowned(pod), dry_run="All")

    bare = _executor_pod(attempt)
    bare["metadata"] = {"name": "bare"}
    del bare["spec"]["securityContext"], bare["spec"]["containers"][0]["securityContext"]
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod(restricted, bare, dry_run="All")
    assert refused.value.status == 403 and "violates PodSecurity" in str(refused.value.body)


ARBITRARY_UID = {"spec": {"securityContext": {"runAsUser": 1000870000, "fsGroup": 1000870000}}}
PLACEMENT = {
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}},
    "topologySpreadConstraints": [
        {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway"}
    ],
    "memoryOverhead": "512m",
    "ephemeralStorage": "2Gi",
    "extendedResources": {"example.com/dongle": "1"},
    "podTemplate": ARBITRARY_UID,
}


def test_every_typed_field_renders_pods_the_api_server_admits_where_restricted_is_enforced(
    kube_api: ApiClient, restricted: str
) -> None:
    """Web identity's projected token, image pull secrets, typed scheduling and resources, an arbitrary uid: the
    driver pod and an executor pod pass the API server's validation and the restricted standard (dry run)."""
    web = {"s3": {"webIdentity": {"roleArn": "arn:aws:iam::123456789012:role/clicks", "stsEndpoint": "http://sts"}}}
    attempt = _attempt(
        restricted,
        state={"checkpointDir": "s3a://bucket/state", **web},
        volumes=[],
        volumeMounts=[],
        imagePullSecrets=[{"name": "registry"}],
        serviceAccount={"annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/clicks"}},
        driver=PLACEMENT,
        executor=PLACEMENT,
    )
    kube = KubeClient(kube_api)
    for obj in manifests.rbac(attempt.app, restricted, attempt.app_uid, attempt):
        if obj["kind"] == "ServiceAccount":
            kube.create(_unowned(obj))
    core = client.CoreV1Api(kube_api)
    for pod in (manifests.driver_pod_manifest(attempt), _executor_pod(attempt)):
        created = core.create_namespaced_pod(restricted, _unowned(pod), dry_run="All")
        assert created.spec.security_context.run_as_user == 1000870000
        assert created.spec.tolerations[0].key == "nvidia.com/gpu"
        (token,) = [volume for volume in created.spec.volumes if volume.name == identity.TOKEN_VOLUME]
        assert token.projected.sources[0].service_account_token.audience == "sts.amazonaws.com"
        limits = created.spec.containers[0].resources.limits
        assert limits["example.com/dongle"] == "1" and limits["ephemeral-storage"] == "2Gi"
    account = core.read_namespaced_service_account("clicks-spark", restricted)
    assert account.metadata.annotations["eks.amazonaws.com/role-arn"].endswith("role/clicks")
