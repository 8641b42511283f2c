"""One owner per Spark key: the state store keys are the runtime's alone (the operator passes the spec's
values in the driver's environment), and the ConfigMap's spark-defaults reads back as rendered."""

from __future__ import annotations

from headrace.api import runtime_contract as contract
from headrace.api import spark_defaults
from headrace.render import manifests
from headrace.runtime.settings import settings_from_env
from headrace.runtime.sparkconf import state_store_conf
from tests.unit.builders import attempt as build_attempt


def test_the_state_keys_are_set_by_the_runtime_only() -> None:
    attempt = build_attempt(
        state__partitions=12, state__backend="hdfs", sparkConf={"spark.sql.session.timeZone": "UTC"}
    )
    env = {
        item["name"]: item.get("value")
        for item in manifests.driver_pod_manifest(attempt)["spec"]["containers"][0]["env"]
    }
    runtime_keys = state_store_conf(settings_from_env({key: value for key, value in env.items() if value}))
    assert runtime_keys["spark.sql.shuffle.partitions"] == "12"
    assert runtime_keys["spark.sql.streaming.stateStore.providerClass"].endswith("HDFSBackedStateStoreProvider")
    assert env[contract.ENV_STATE_PARTITIONS] == "12"
    assert not set(runtime_keys) & set(manifests.spark_conf(attempt))


def test_the_config_maps_spark_defaults_reads_back_as_rendered() -> None:
    attempt = build_attempt(
        state__partitions=12, state__backend="hdfs", sparkConf={"spark.sql.session.timeZone": "UTC"}
    )
    text = manifests.config_map(attempt)["data"][manifests.SPARK_DEFAULTS]
    assert spark_defaults.parse(text) == manifests.spark_conf(attempt)
