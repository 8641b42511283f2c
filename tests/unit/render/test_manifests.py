"""Rendering: the driver pod, its configuration and RBAC for one attempt."""

from __future__ import annotations

import dataclasses

import pytest

from headrace.api import runtime_contract as contract
from headrace.core.builder import spec_hash
from headrace.core.plan import EnsureDriver
from headrace.render import manifests
from tests.unit.builders import attempt, spec


def _attempt(**overrides: object) -> manifests.Attempt:
    return attempt(run=2, number=3, **overrides)


def test_driver_pod_runs_the_script_under_the_runtime_with_the_contract_env() -> None:
    pod = manifests.driver_pod_manifest(_attempt(application={"file": "local:///opt/app/job.py", "args": ["--x", "1"]}))
    container = pod["spec"]["containers"][0]
    assert pod["metadata"]["name"] == "clicks-r2-a3-driver"
    assert pod["spec"]["restartPolicy"] == "Never"
    assert container["args"] == ["/opt/app/job.py", "--x", "1"]
    assert "command" not in container  # the image's entrypoint runs the runtime
    env = {item["name"]: item for item in container["env"]}
    assert env[contract.ENV_CHECKPOINT_DIR]["value"] == "s3a://bucket/checkpoints/analytics/clicks/r2"
    assert env[contract.ENV_POD_IP]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert env[contract.ENV_CONTROL_TOKEN]["valueFrom"]["secretKeyRef"]["name"] == "clicks-control"
    assert pod["metadata"]["ownerReferences"][0]["uid"] == "uid-1"


def test_spark_conf_owns_networking_and_lets_user_settings_through() -> None:
    conf = manifests.spark_conf(_attempt(sparkConf={"spark.sql.session.timeZone": "UTC"}))
    assert conf["spark.kubernetes.executor.podNamePrefix"] == "clicks-r2a3"
    assert conf["spark.driver.port"] == str(contract.DRIVER_PORT)
    assert "spark.driver.bindAddress" not in conf  # the runtime binds to the pod IP
    assert conf["spark.sql.session.timeZone"] == "UTC"
    assert conf["spark.executorEnv.PYTHONPATH"] == "/opt/headrace/apps/windowed-counts:/opt/headrace/apps"


def test_pod_template_merges_containers_by_name() -> None:
    template = {
        "spec": {
            "containers": [{"name": "driver", "env": [{"name": "EXTRA", "value": "1"}]}],
            "tolerations": [{"key": "k"}],
        }
    }
    pod = manifests.driver_pod_manifest(_attempt(driver={"podTemplate": template}))
    container = pod["spec"]["containers"][0]
    assert {item["name"] for item in container["env"]} >= {"EXTRA", contract.ENV_APP_NAME}
    assert pod["spec"]["tolerations"] == [{"key": "k"}]
    assert container["image"] == "localhost/headrace/spark:0.1.0"


def test_restore_env_only_when_restoring() -> None:
    plain = manifests.driver_pod_manifest(_attempt())
    assert contract.ENV_RESTORE_FROM not in {item["name"] for item in plain["spec"]["containers"][0]["env"]}
    restoring = manifests.Attempt(**{**_attempt().__dict__, "restore_from": "s3a://sp/1", "allow_repartition": True})
    env = {
        item["name"]: item.get("value")
        for item in manifests.driver_pod_manifest(restoring)["spec"]["containers"][0]["env"]
    }
    assert env[contract.ENV_RESTORE_FROM] == "s3a://sp/1"
    assert env[contract.ENV_ALLOW_REPARTITION] == "true"


def test_only_a_pre_warmed_upgrades_driver_is_told_the_running_checkpoint_to_compare_at_its_gate() -> None:
    def env(**changes: object) -> dict[str, str | None]:
        rendered = manifests.Attempt(**{**_attempt().__dict__, **changes})
        container = manifests.driver_pod_manifest(rendered)["spec"]["containers"][0]
        return {item["name"]: item.get("value") for item in container["env"]}

    running = "s3a://bucket/checkpoints/analytics/clicks/r1"
    assert env(standby=True, compare_checkpoint=running)[contract.ENV_PREWARM_CHECKPOINT] == running
    assert contract.ENV_PREWARM_CHECKPOINT not in env(standby=True)  # a warm standby of the same spec
    assert contract.ENV_PREWARM_CHECKPOINT not in env(compare_checkpoint=running)  # not a standby: nothing to wait for


def test_a_standby_warms_up_unless_its_spec_says_warmup_false() -> None:
    def env(warmup: bool, standby: bool) -> dict[str, str | None]:
        rendered = manifests.Attempt(**{**attempt(standby__warmup=warmup).__dict__, "standby": standby})
        container = manifests.driver_pod_manifest(rendered)["spec"]["containers"][0]
        return {item["name"]: item.get("value") for item in container["env"]}

    assert contract.ENV_WARMUP not in env(warmup=True, standby=True)  # the default: no variable, the pod unchanged
    assert env(warmup=False, standby=True)[contract.ENV_WARMUP] == "false"
    assert contract.ENV_WARMUP not in env(warmup=False, standby=False)  # nothing waits: nothing to warm


@pytest.mark.parametrize("standby", [False, True])
def test_every_driver_gets_the_driver_lease_and_the_right_to_renew_it_alone(standby: bool) -> None:
    """Every app (issue 23; before, only apps with a warm standby): a driver whose node is lost or partitioned away
    stops itself when it cannot renew the Lease, which is what lets the operator replace it (core/fence.py)."""
    warm = manifests.attempt_objects(_attempt(standby={"enabled": standby}))
    (lease,) = [obj for obj in warm if obj["kind"] == "Lease"]
    assert lease["metadata"]["name"] == "clicks-driver-lease" and "holderIdentity" not in lease["spec"]
    assert lease["metadata"]["ownerReferences"][0]["uid"] == "uid-1"  # deleted with the app
    (role,) = [obj for obj in warm if obj["kind"] == "Role" and obj["metadata"]["name"] == "clicks-driver-lease"]
    assert role["rules"] == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["clicks-driver-lease"],  # its own Lease only; no create, list or watch
            "verbs": ["get", "update"],
        }
    ]
    named = [obj for obj in warm if obj["metadata"]["name"] == "clicks-driver-lease"]
    (binding,) = [obj for obj in named if obj["kind"] == "RoleBinding"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "clicks-spark", "namespace": "analytics"}]
    assert warm[-1]["kind"] == "Pod"  # created last, once its Lease and rights exist
    env = {item["name"]: item.get("value") for item in warm[-1]["spec"]["containers"][0]["env"]}
    assert env[contract.ENV_DRIVER_LEASE] == "clicks-driver-lease"
    bounded = manifests.driver_pod_manifest(_attempt(standby={"enabled": standby}, mode="bounded"))
    variable = {"name": contract.ENV_DRIVER_LEASE, "value": "clicks-driver-lease"}
    assert variable in bounded["spec"]["containers"][0]["env"]


def test_every_app_has_a_disruption_budget_that_lets_only_its_writing_driver_wait_for_a_handover() -> None:
    """A drain waits for the operator's handover (issue 23): minAvailable 1 over the app's driver labelled as its
    writer only (a standby or a pre-warmed driver may go), and a writer that is not ready may go too (a Pending or
    failing one must not block a drain forever)."""
    objects = manifests.app_objects(_attempt())
    (budget,) = [obj for obj in objects if obj["kind"] == "PodDisruptionBudget"]
    assert budget["metadata"]["name"] == "clicks-driver" and budget["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    selector = {"headrace.dev/app": "clicks", "headrace.dev/role": "driver", "headrace.dev/writer": "true"}
    assert budget["spec"] == {
        "minAvailable": 1,  # a number: the budget never asks the StreamingApp's scale (which counts executors)
        "selector": {"matchLabels": selector},
        "unhealthyPodEvictionPolicy": "AlwaysAllow",
    }
    driver = manifests.driver_pod_manifest(_attempt())
    assert {**driver["metadata"]["labels"], "headrace.dev/writer": "true"}.items() >= selector.items()
    assert "headrace.dev/writer" not in driver["metadata"]["labels"]  # the operator labels it once it writes


def test_the_writing_attempts_executors_have_a_budget_no_other_attempts_executor_counts_in() -> None:
    """A drain evicts none of the writer's executors until the handover (issue 23): every executor carries its
    attempt's labels (Spark's conf and the pod template), the budget selects the writer's attempt only (a pre-warmed
    or standby attempt's executors are neither protected nor counted, so they cannot make one of the writer's
    evictable), and its minAvailable is the writer's executor count, a number (`kubectl get pdb` shows it)."""
    writer, prewarmed = _attempt(), attempt(run=2, number=4)
    labels = {
        "app.kubernetes.io/managed-by": "headrace",
        "app.kubernetes.io/instance": "clicks",
        "headrace.dev/app": "clicks",
        "headrace.dev/run": "2",
        "headrace.dev/attempt": "3",
        "headrace.dev/role": "executor",
    }
    conf = manifests.spark_conf(writer)
    prefix = "spark.kubernetes.executor.label."
    assert {key.removeprefix(prefix): value for key, value in conf.items() if key.startswith(prefix)} == labels
    assert manifests.executor_pod_template(writer)["metadata"]["labels"] == labels
    budget = manifests.executor_disruption_budget("clicks", "analytics", "uid-1", 2, 3, executors=4)
    assert budget["metadata"]["name"] == "clicks-executors"
    assert budget["metadata"]["ownerReferences"][0]["uid"] == "uid-1"  # deleted with the app
    assert "headrace.dev/run" not in budget["metadata"]["labels"]  # never pruned with an attempt's objects
    assert budget["spec"] == {
        "minAvailable": 4,
        "selector": {"matchLabels": labels},
        "unhealthyPodEvictionPolicy": "AlwaysAllow",  # a broken executor never holds a drain
    }
    other = manifests.executor_pod_template(prewarmed)["metadata"]["labels"]
    assert not other.items() >= budget["spec"]["selector"]["matchLabels"].items()


def test_every_app_has_one_ui_service_whose_name_and_selector_outlive_its_attempts() -> None:
    """The Spark UI and the driver's metrics behind one name for the app (not per attempt, so not pruned with an
    attempt's objects: it has no run label), selecting the writing driver only."""
    first = [obj for obj in manifests.app_objects(attempt(run=1, number=1)) if obj["kind"] == "Service"]
    later = [obj for obj in manifests.app_objects(_attempt()) if obj["kind"] == "Service"]
    assert first == later
    (service,) = later
    assert service["metadata"]["name"] == "clicks-ui" and "headrace.dev/run" not in service["metadata"]["labels"]
    assert service["spec"]["type"] == "ClusterIP"
    selector = {"headrace.dev/app": "clicks", "headrace.dev/role": "driver", "headrace.dev/writer": "true"}
    assert service["spec"]["selector"] == selector
    ports = {port["name"]: (port["port"], port["targetPort"]) for port in service["spec"]["ports"]}
    ui, metrics = (contract.SPARK_UI_PORT, "spark-ui"), (contract.DEFAULT_METRICS_PORT, "metrics")
    assert ports == {"spark-ui": ui, "metrics": metrics}
    (container,) = manifests.driver_pod_manifest(_attempt())["spec"]["containers"]
    container_ports = {port["name"] for port in container["ports"]}
    assert set(ports) <= container_ports


def test_an_attempt_is_what_its_ensure_driver_action_says() -> None:
    """Every field of EnsureDriver is rendered or says how the controller works (HOW_ONLY): none is dropped."""
    ensure_fields = {field.name for field in dataclasses.fields(EnsureDriver)}
    attempt_fields = {field.name for field in dataclasses.fields(manifests.Attempt)}
    assert ensure_fields - manifests.HOW_ONLY <= attempt_fields
    assert ensure_fields >= manifests.HOW_ONLY and not manifests.HOW_ONLY & attempt_fields
    action = EnsureDriver(
        run=2,
        attempt=3,
        spec=spec(),
        checkpoint_dir="s3a://bucket/checkpoints/analytics/clicks/r2",
        restore_from="s3a://bucket/savepoints/sp",
        allow_repartition=True,
        expected_commits=(("q0", 7),),
        standby=True,
        compare_checkpoint="s3a://bucket/checkpoints/analytics/clicks/r1",
    )
    made = manifests.Attempt.of(action, app="clicks", namespace="analytics", app_uid="uid-1", operator_namespace="ops")
    for name in ensure_fields - manifests.HOW_ONLY:
        assert getattr(made, name) == getattr(action, name), name
    assert (made.app, made.namespace, made.app_uid, made.operator_namespace) == ("clicks", "analytics", "uid-1", "ops")
    assert made.spec_hash == spec_hash(action.spec)
