"""Object storage settings through the real operator and API server: node-local state refused naming the
field and the fix, and S3 credentials reaching the driver only by Secret reference."""

from __future__ import annotations

import yaml
from kubernetes import client
from kubernetes.client import ApiClient

from testbed.operator_process import OperatorProcess

from .kube import (
    app_manifest,
    container_env,
    create_app,
    driver_pods,
    events_for,
    get_app,
    mounted_spark_defaults,
    wait_for,
)

SECRET_KEY = "not-in-any-configmap-7f3a9c"
EMPTY_DIR = {
    "volumes": [{"name": "scratch", "emptyDir": {}}],
    "volumeMounts": [{"name": "scratch", "mountPath": "/mnt/scratch"}],
}


def test_node_local_checkpoint_is_refused_naming_the_field_and_the_fix(
    operator: OperatorProcess, api: ApiClient, namespace: str
) -> None:
    state = {"checkpointDir": "file:///mnt/scratch/checkpoints"}
    create_app(api, namespace, app_manifest("local", state=state, **EMPTY_DIR))
    status = wait_for(lambda: (s := get_app(api, namespace, "local").get("status") or {}).get("error") and s)
    assert "spec.state.checkpointDir" in status["error"], status["error"]
    assert "emptyDir" in status["error"]
    assert "s3a://" in status["error"] and "spec.state.allowNodeLocal: true" in status["error"]
    assert status["phase"] == "Failed"
    assert driver_pods(api, namespace, "local") == []
    wait_for(lambda: any(e.reason == "InvalidSpec" for e in events_for(api, namespace, "local")), what="an event")

    create_app(api, namespace, app_manifest("single-node", state={**state, "allowNodeLocal": True}, **EMPTY_DIR))
    wait_for(lambda: driver_pods(api, namespace, "single-node"), what="the allowed app's driver pod")


def test_s3_credentials_reach_the_driver_only_by_secret_reference(
    operator: OperatorProcess, api: ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(api)
    secret = {"metadata": {"name": "keys"}, "stringData": {"id": "AKIDEXAMPLE", "key": SECRET_KEY}}
    core.create_namespaced_secret(namespace, secret)
    s3 = {
        "endpoint": "http://s3.s3.svc:9000",
        "pathStyleAccess": True,
        "credentialsSecret": {"name": "keys", "accessKeyIdKey": "id", "secretAccessKeyKey": "key"},
    }
    state = {"checkpointDir": "s3a://bucket/checkpoints", "s3": s3}
    create_app(api, namespace, app_manifest("s3", state=state))
    pod = wait_for(lambda: driver_pods(api, namespace, "s3"), what="the driver pod")[0]
    env = container_env(api, namespace, pod)
    assert env["AWS_ACCESS_KEY_ID"] == "AKIDEXAMPLE"
    assert env["AWS_SECRET_ACCESS_KEY"] == SECRET_KEY  # resolved from the Secret by reference...
    assert all(item.value is None for item in pod.spec.containers[0].env if item.name.startswith("AWS_"))
    conf = mounted_spark_defaults(api, namespace, pod)
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://s3.s3.svc:9000"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    configmaps = yaml.safe_dump([item.data for item in core.list_namespaced_config_map(namespace).items])
    assert SECRET_KEY not in configmaps  # ...and never as a value in a ConfigMap
    assert SECRET_KEY not in yaml.safe_dump(get_app(api, namespace, "s3"))
    assert SECRET_KEY not in operator.log_path.read_text()
