"""The generated CRDs in a real API server: accepted specs, and invalid ones refused with field-naming messages."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from headrace.api import models

from .kube import app_manifest, create_app, get_app


def test_valid_app_is_accepted_and_defaulted(api: ApiClient, namespace: str) -> None:
    create_app(api, namespace, app_manifest("ok"))
    stored = get_app(api, namespace, "ok")
    assert stored["spec"]["upgradeMode"] == "last-state"
    assert stored["spec"]["mode"] == "continuous"


INVALID: list[tuple[str, dict[str, Any], list[str]]] = [
    ("no-image", {"image": None}, ["spec.image", "Required value"]),
    ("empty-image", {"image": ""}, ["spec.image"]),
    ("no-file", {"application": {"args": []}}, ["spec.application.file", "Required value"]),
    ("not-python", {"application": {"file": "local:///opt/app.jar"}}, ["spec.application.file", "should match"]),
    ("negative-executors", {"executor": {"instances": -1}}, ["spec.executor.instances", "greater than or equal to 0"]),
    ("bad-mode", {"upgradeMode": "fast"}, ["spec.upgradeMode", "Unsupported value", "last-state"]),
    (
        "bad-backend",
        {"state": {"checkpointDir": "s3a://b/c", "backend": "memory"}},
        ["spec.state.backend", "Unsupported value"],
    ),
    ("zero-partitions", {"state": {"checkpointDir": "s3a://b/c", "partitions": 0}}, ["spec.state.partitions"]),
    ("relative-checkpoints", {"state": {"checkpointDir": "checkpoints"}}, ["spec.state.checkpointDir", "should match"]),
    (
        "savepoint-mode-without-dir",
        {"upgradeMode": "savepoint", "state": {"checkpointDir": "s3a://b/c"}},
        ["spec.state.savepointDir", "required when spec.upgradeMode is savepoint"],
    ),
    (
        "suspend-without-dir",
        {"job": {"state": "suspended"}, "state": {"checkpointDir": "s3a://b/c"}},
        ["spec.state.savepointDir", "suspend"],
    ),
    (
        "backoff-inverted",
        {"restartPolicy": {"backoff": {"initialSeconds": 60, "maxSeconds": 5}}},
        ["spec.restartPolicy.backoff.maxSeconds", "at least backoff.initialSeconds"],
    ),
    (
        "restore-both",
        {"restoreFrom": {"savepoint": "sp-1", "path": "s3a://b/sp"}},
        ["spec.restoreFrom", "exactly one of savepoint"],
    ),
    ("bad-window", {"restartPolicy": {"window": "forever"}}, ["spec.restartPolicy.window", "should match"]),
    ("bad-memory", {"driver": {"memory": "lots"}}, ["spec.driver.memory", "should match"]),
    ("unknown-field", {"paralelism": 4}, ['unknown field "spec.paralelism"']),
    ("autoscaler-mode", {"autoscaler": {"mode": "on"}}, ["spec.autoscaler.mode", "Unsupported value", "passive"]),
    (
        "autoscaler-bounds-inverted",
        {"autoscaler": {"minExecutors": 5, "maxExecutors": 2}},
        ["spec.autoscaler.minExecutors", "at most autoscaler.maxExecutors"],
    ),
    (
        "autoscaler-band-below-zero",
        {"autoscaler": {"targetUtilization": 0.3, "utilizationBoundary": 0.4}},
        ["spec.autoscaler.utilizationBoundary", "below autoscaler.targetUtilization"],
    ),
    ("autoscaler-window", {"autoscaler": {"metricsWindow": "3 minutes"}}, ["spec.autoscaler.metricsWindow"]),
    ("autoscaler-quota", {"autoscaler": {"quota": {"maxMemory": "lots"}}}, ["spec.autoscaler.quota.maxMemory"]),
]


@pytest.mark.parametrize(("name", "overrides", "expected"), INVALID, ids=[case[0] for case in INVALID])
def test_invalid_app_is_refused_naming_the_field(
    api: ApiClient, namespace: str, name: str, overrides: dict[str, Any], expected: list[str]
) -> None:
    manifest = app_manifest(name, **overrides)
    manifest["spec"] = {key: value for key, value in manifest["spec"].items() if value is not None}
    with pytest.raises(ApiException) as raised:
        create_app(api, namespace, manifest)
    body = json.loads(raised.value.body)["message"]
    for fragment in expected:
        assert fragment in body, f"{fragment!r} not in {body}"


def test_scale_subresource_sets_executor_instances(api: ApiClient, namespace: str) -> None:
    create_app(api, namespace, app_manifest("scaled"))
    custom = client.CustomObjectsApi(api)
    custom.patch_namespaced_custom_object_scale(
        models.GROUP, models.VERSION, namespace, models.APP_PLURAL, "scaled", {"spec": {"replicas": 5}}
    )
    assert get_app(api, namespace, "scaled")["spec"]["executor"]["instances"] == 5


def test_savepoint_crd_accepts_and_refuses(api: ApiClient, namespace: str) -> None:
    custom = client.CustomObjectsApi(api)
    body = {"apiVersion": models.API_VERSION, "kind": models.SAVEPOINT_KIND, "metadata": {"name": "sp"}}
    custom.create_namespaced_custom_object(
        models.GROUP, models.VERSION, namespace, models.SAVEPOINT_PLURAL, {**body, "spec": {"appName": "clicks"}}
    )
    with pytest.raises(ApiException) as raised:
        custom.create_namespaced_custom_object(
            models.GROUP,
            models.VERSION,
            namespace,
            models.SAVEPOINT_PLURAL,
            {**body, "metadata": {"name": "sp2"}, "spec": {"appName": "clicks", "reason": "whim"}},
        )
    assert "spec.reason" in str(raised.value.body)
