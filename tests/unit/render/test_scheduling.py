"""Typed scheduling and resources: spec.driver's into the driver pod, spec.executor's into the executor pod
template (each its own), a podTemplate merging over them."""

from __future__ import annotations

import dataclasses
from typing import Any

import yaml

from headrace.core.validation import app_memory_mib
from headrace.render import manifests
from tests.unit.builders import attempt

GPU_NODES = {
    "nodeSelector": {"node.kubernetes.io/instance-type": "g5.xlarge"},
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "affinity": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}]}
                ]
            }
        }
    },
    "topologySpreadConstraints": [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"headrace.dev/app": "clicks", "headrace.dev/role": "executor"}},
        }
    ],
    "priorityClassName": "streaming",
}


def _template(**overrides: Any) -> dict[str, Any]:
    text = manifests.config_map(attempt(**overrides))["data"][manifests.EXECUTOR_TEMPLATE]
    template: dict[str, Any] = yaml.safe_load(text)
    return template


def test_each_pod_gets_its_own_scheduling() -> None:
    executor = _template(executor=GPU_NODES)["spec"]
    driver = manifests.driver_pod_manifest(attempt(executor=GPU_NODES))["spec"]
    assert executor["nodeSelector"] == GPU_NODES["nodeSelector"]
    assert executor["tolerations"] == GPU_NODES["tolerations"]
    assert executor["affinity"] == GPU_NODES["affinity"]
    assert executor["topologySpreadConstraints"] == GPU_NODES["topologySpreadConstraints"]
    assert executor["priorityClassName"] == "streaming"
    assert not {"nodeSelector", "tolerations", "topologySpreadConstraints", "priorityClassName"} & set(driver)
    assert set(driver["affinity"]) == {"podAntiAffinity"}  # only the drivers' own spread (below)
    driver = manifests.driver_pod_manifest(
        attempt(driver={"priorityClassName": "critical", "tolerations": [{"key": "a"}]})
    )
    assert driver["spec"]["priorityClassName"] == "critical"
    assert driver["spec"]["tolerations"] == [{"key": "a", "operator": "Equal"}]  # unset fields left out
    assert "priorityClassName" not in _template(driver={"priorityClassName": "critical"})["spec"]


def test_a_pod_template_merges_over_the_typed_fields_which_win_on_conflict() -> None:
    template = {"spec": {"nodeSelector": {"pool": "x", "disk": "ssd"}, "tolerations": [{"key": "t"}]}}
    pod = manifests.driver_pod_manifest(
        attempt(driver={"nodeSelector": {"pool": "y"}, "tolerations": [{"key": "u"}], "podTemplate": template})
    )
    assert pod["spec"]["nodeSelector"] == {"pool": "y", "disk": "ssd"}
    assert {item["key"] for item in pod["spec"]["tolerations"]} == {"t", "u"}


def test_memory_overhead_sizes_the_driver_pod_and_spark_sizes_the_executors_with_it() -> None:
    default = manifests.driver_pod_manifest(attempt(driver={"memory": "2g"}))["spec"]["containers"][0]["resources"]
    assert default == {"requests": {"cpu": "1", "memory": "2867Mi"}, "limits": {"memory": "2867Mi"}}  # +40%
    sized = manifests.driver_pod_manifest(
        attempt(driver={"memory": "2g", "memoryOverhead": "512m", "coreRequest": "500m"})
    )
    assert sized["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "500m", "memory": "2560Mi"},
        "limits": {"memory": "2560Mi"},
    }
    app = attempt(executor={"memory": "4g", "memoryOverhead": "3g"})
    assert manifests.spark_conf(app)["spark.executor.memoryOverhead"] == "3g"
    resources = _template(executor={"memory": "4g", "memoryOverhead": "3g"})["spec"]["containers"][0]["resources"]
    assert resources["limits"]["memory"] == "7168Mi"
    assert "spark.executor.memoryOverhead" not in manifests.spark_conf(attempt())


def test_ephemeral_storage_and_extended_resources_are_requested_and_limited() -> None:
    executor = {"ephemeralStorage": "20Gi", "extendedResources": {"nvidia.com/gpu": "1"}}
    resources = _template(executor=executor)["spec"]["containers"][0]["resources"]
    for bound in ("requests", "limits"):
        assert resources[bound]["ephemeral-storage"] == "20Gi"
        assert resources[bound]["nvidia.com/gpu"] == "1"
    driver = manifests.driver_pod_manifest(attempt(driver={"ephemeralStorage": "5Gi"}))["spec"]["containers"][0]
    assert driver["resources"]["requests"]["ephemeral-storage"] == "5Gi"
    assert driver["resources"]["limits"]["ephemeral-storage"] == "5Gi"
    assert "nvidia.com/gpu" not in driver["resources"]["limits"]


def test_the_autoscalers_memory_quota_counts_the_memory_the_pods_request() -> None:
    sized = {"driver": {"memory": "2g", "memoryOverhead": "1g"}, "executor": {"memory": "4g", "memoryOverhead": "3g"}}
    for overrides in ({}, sized):
        app = attempt(**overrides)
        driver = manifests.driver_pod_manifest(app)["spec"]["containers"][0]["resources"]["limits"]["memory"]
        executor = _template(**overrides)["spec"]["containers"][0]["resources"]["limits"]["memory"]
        mib = [int(quantity.removesuffix("Mi")) for quantity in (driver, executor)]
        assert app_memory_mib(app.spec, 3) == mib[0] + 3 * mib[1]


SPREAD_TERM = {
    "weight": 100,
    "podAffinityTerm": {
        "labelSelector": {"matchLabels": {"headrace.dev/app": "clicks", "headrace.dev/role": "driver"}},
        "topologyKey": "kubernetes.io/hostname",
    },
}


def test_an_apps_driver_pods_prefer_nodes_without_another_of_its_drivers() -> None:
    """The running driver and its warm standby (or pre-warmed successor) on different nodes where the cluster has
    them, so that one lost node does not take both; added to the user's own affinity, never replacing it."""
    for standby in (False, True):
        pod = manifests.driver_pod_manifest(dataclasses.replace(attempt(), standby=standby))
        anti = pod["spec"]["affinity"]["podAntiAffinity"]
        assert anti == {"preferredDuringSchedulingIgnoredDuringExecution": [SPREAD_TERM]}
        assert "requiredDuringSchedulingIgnoredDuringExecution" not in anti  # one schedulable node still runs both
    own = {
        "nodeAffinity": GPU_NODES["affinity"]["nodeAffinity"],  # type: ignore[index]
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 5, "podAffinityTerm": {"labelSelector": {}, "topologyKey": "zone"}}
            ],
            "requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {}, "topologyKey": "rack"}],
        },
    }
    spec = manifests.driver_pod_manifest(attempt(driver={"affinity": own}))["spec"]
    assert spec["affinity"]["nodeAffinity"] == own["nodeAffinity"]
    anti = spec["affinity"]["podAntiAffinity"]
    assert anti["requiredDuringSchedulingIgnoredDuringExecution"] == [{"labelSelector": {}, "topologyKey": "rack"}]
    assert anti["preferredDuringSchedulingIgnoredDuringExecution"] == [
        {"weight": 5, "podAffinityTerm": {"labelSelector": {}, "topologyKey": "zone"}},
        SPREAD_TERM,
    ]
    assert "affinity" not in _template()["spec"]  # executors: only what the user asks
