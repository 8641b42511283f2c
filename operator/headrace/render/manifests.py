"""Manifests of one attempt: driver Pod, headless Service, ConfigMap, RBAC, control Secret, driver Lease."""

from __future__ import annotations

import json
import posixpath
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Final

import yaml

from headrace.api import names, spark_defaults
from headrace.api import runtime_contract as contract
from headrace.api.models import API_VERSION, APP_KIND, StreamingAppSpec
from headrace.core.builder import spec_hash
from headrace.core.plan import EnsureDriver
from headrace.core.quantities import DRIVER_OVERHEAD_FACTOR, EXECUTOR_OVERHEAD_FACTOR
from headrace.core.validation import (
    AZURE_PREFIX,
    azure_account_owner,
    azure_accounts,
    spark_conf_problem,
    spark_key_problem,
)
from headrace.render import control_tls, identity, scheduling, security
from headrace.render.merge import merge

CONF_DIR = "/opt/headrace/conf"
SPARK_DEFAULTS = "spark-defaults.conf"
EXECUTOR_TEMPLATE = "executor-pod-template.yaml"
DRIVER_CONTAINER = "driver"
EXECUTOR_CONTAINER = "executor"
TOKEN_KEY = "token"
COORDINATION = "coordination.k8s.io"
S3A_PREFIX = "spark.hadoop.fs.s3a."


@dataclass(frozen=True)
class Attempt:
    """Identity of the attempt being rendered."""

    app: str
    namespace: str
    app_uid: str
    run: int
    attempt: int
    spec: StreamingAppSpec
    spec_hash: str
    checkpoint_dir: str
    restore_from: str | None = None
    allow_repartition: bool = False
    expected_commits: tuple[tuple[str, int], ...] = ()  # (query key, batch) earlier attempts of the run committed
    operator_namespace: str | None = None  # where the operator's pods run (the NetworkPolicy admits them there)
    peers: security.Peers = security.NO_PEERS  # namespaces the NetworkPolicy admits to the metrics and UI ports
    standby: bool = False  # a warm standby driver: it waits at its first query start until promoted
    compare_checkpoint: str | None = None  # a pre-warmed upgrade's: the running driver's checkpoint (gate check)

    @classmethod
    def of(
        cls,
        action: EnsureDriver,
        *,
        app: str,
        namespace: str,
        app_uid: str,
        operator_namespace: str | None,
        peers: security.Peers = security.NO_PEERS,
    ) -> Attempt:
        """The attempt `action` creates in the app `namespace`/`app`: every field of the action but how the
        controller goes about it (`HOW_ONLY`) is taken by name, so a field added to EnsureDriver and not here fails
        at once (TypeError) instead of being dropped."""
        what = {field.name: getattr(action, field.name) for field in fields(action) if field.name not in HOW_ONLY}
        return cls(
            app=app,
            namespace=namespace,
            app_uid=app_uid,
            spec_hash=spec_hash(action.spec),
            operator_namespace=operator_namespace,
            peers=peers,
            **what,
        )


HOW_ONLY: Final = frozenset({"check_only", "keep", "after_ran"})
"""Fields of EnsureDriver that say how the controller creates an attempt, not what it renders."""


def owner_reference(app: str, uid: str) -> dict[str, Any]:
    """The StreamingApp as controlling owner (deleting it deletes everything below)."""
    return {
        "apiVersion": API_VERSION,
        "kind": APP_KIND,
        "name": app,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _metadata(name: str, attempt: Attempt, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": attempt.namespace,
        "labels": labels,
        "ownerReferences": [owner_reference(attempt.app, attempt.app_uid)],
    }


def _attempt_metadata(name: Callable[[str, int, int], str], attempt: Attempt) -> dict[str, Any]:
    """Metadata of one of the attempt's own objects: `name`(app, run, attempt), labelled with the attempt."""
    coordinates = (attempt.app, attempt.run, attempt.attempt)
    return _metadata(name(*coordinates), attempt, names.attempt_labels(*coordinates))


def _service_account_name(attempt: Attempt) -> str:
    return identity.driver_service_account(attempt.app, attempt.spec)


# Defaults for checkpoints and state on S3, each replaceable in spec.sparkConf (docs/concepts.md, "Where state
# lives"). Every checkpoint file Spark writes (offsets, commits, each state store's changelog or delta) is a temp
# file renamed into place. Through Spark's default FileContext-based manager one such file cost 22 S3 requests
# (HEAD/LIST probes of the file system layers, then S3A's own copy and delete); through the FileSystem-based one,
# 8, with the same outcome on S3, where neither rename is atomic (an existing file is refused for the offset and
# commit logs either way; a state file already written for that version by an attempt that died before its
# commit is kept rather than replaced: the replay computes the same version from the same offsets). S3A's
# `mkdir` performance flag skips the walk up the parents of each directory it creates (7 -> 3 requests). The
# files written, and so the checkpoint's format, are unchanged: existing checkpoints keep working either way.
# Measured by bench/first_batch.py (issue 26).
S3A_CHECKPOINT_DEFAULTS = {
    "spark.sql.streaming.checkpointFileManagerClass": (
        "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
    ),
    f"{S3A_PREFIX}performance.flags": "mkdir",
}


def s3a_conf(spec: StreamingAppSpec) -> dict[str, str]:
    """The S3A connector's non-secret settings from spec.state.s3, the provider chain of its credentials mode
    (credentials travel as env vars or a projected token only) and the checkpoint defaults for S3."""
    s3 = spec.state.s3
    if s3 is None:
        return {}
    conf = {
        **S3A_CHECKPOINT_DEFAULTS,
        f"{S3A_PREFIX}endpoint.region": s3.region,
        f"{S3A_PREFIX}path.style.access": "true" if s3.pathStyleAccess else "false",
    }
    if s3.endpoint:
        conf[f"{S3A_PREFIX}endpoint"] = s3.endpoint
        conf[f"{S3A_PREFIX}connection.ssl.enabled"] = "true" if s3.endpoint.startswith("https://") else "false"
    return {**conf, **identity.s3_provider_conf(spec)}


# Hadoop 3.5's core-default.xml (inside pyspark 4.3.0's hadoop-client-api) names its own GCS module for gs://
# (org.apache.hadoop.fs.gs.*, not in the image) and gives some fs.gs.* sizes as "64m", "8m", which Google's
# connector reads as plain numbers (GoogleHadoopFileSystem.initialize failed with NumberFormatException: "64m"). So
# the image's connector is named for both file system APIs, and those sizes are given in bytes, each the value
# Hadoop's file states. All replaceable in spec.sparkConf.
GCS_FILE_SYSTEMS = {
    "spark.hadoop.fs.gs.impl": "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFileSystem",
    "spark.hadoop.fs.AbstractFileSystem.gs.impl": "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFS",
}
_MIB = 1024 * 1024
GCS_SIZES = {
    "spark.hadoop.fs.gs.block.size": str(64 * _MIB),
    "spark.hadoop.fs.gs.rewrite.max.chunk.size": str(512 * _MIB),
    "spark.hadoop.fs.gs.outputstream.buffer.size": str(8 * _MIB),
    "spark.hadoop.fs.gs.inputstream.inplace.seek.limit": str(8 * _MIB),
    "spark.hadoop.fs.gs.inputstream.min.range.request.size": str(2 * _MIB),
}
# Of S3A_CHECKPOINT_DEFAULTS, the FileSystem-based checkpoint file manager applies to Cloud Storage as well: a rename
# there is a copy and a delete too (not atomic either way), and the FileContext layers add probes of their own
# (not measured on GCS; the files written, and so the checkpoint's format, are the same).
GCS_CHECKPOINT_DEFAULTS = {
    "spark.sql.streaming.checkpointFileManagerClass": S3A_CHECKPOINT_DEFAULTS[
        "spark.sql.streaming.checkpointFileManagerClass"
    ],
}


GCS_MOVE_SETTING = "spark.hadoop.fs.gs.operation.move.enable"


def gcs_conf(spec: StreamingAppSpec) -> dict[str, str]:
    """The Cloud Storage connector's settings from spec.state.gcs (or its defaults, for gs:// state without it):
    file systems, endpoint, project, authentication type of its credentials mode, checkpoint defaults."""
    gcs = identity.gcs_spec(spec)
    if gcs is None:
        return {}
    conf = {**GCS_CHECKPOINT_DEFAULTS, **GCS_FILE_SYSTEMS, **GCS_SIZES}
    if gcs.endpoint:
        conf[f"{identity.GCS_PREFIX}storage.root.url"] = gcs.endpoint
    if gcs.projectId:
        conf[f"{identity.GCS_PREFIX}project.id"] = gcs.projectId
    if gcs.credentials() == "unauthenticatedEmulator":
        # fake-gcs-server (1.56) has no objects.moveTo, which the connector's rename uses by default; a rename is
        # then a rewrite and a delete, as on buckets where the move API is off.
        conf[GCS_MOVE_SETTING] = "false"
    return {**conf, **identity.gcs_auth_conf(spec)}


# The FileSystem-based checkpoint file manager for ABFS too, as for S3 and GCS: on a flat namespace a rename is a
# server-side copy and a delete (not atomic either way); on a hierarchical one it is atomic through both APIs.
AZURE_CHECKPOINT_DEFAULTS = GCS_CHECKPOINT_DEFAULTS


def azure_conf(spec: StreamingAppSpec) -> dict[str, str]:
    """The ABFS connector's settings from spec.state.azure (or its defaults, for abfs(s):// state without it), per
    state account: namespace and service endpoint, an emulator's address, the credentials mode's authentication;
    and the checkpoint defaults."""
    azure = identity.azure_spec(spec)
    if azure is None:
        return {}
    https: dict[str, str] = {}
    options = {"account.hns.enabled": str(azure.namespace == "hierarchical").lower()}
    if azure.namespace == "flat":
        options["fns.account.service.type"] = "BLOB"  # the Blob endpoint: ABFS serves flat accounts only there
    if azure.endpoint:
        options["abfs.endpoint"] = azure.endpoint.split("://", 1)[1].rstrip("/")  # host:port, no scheme
        if azure.endpoint.startswith("http://"):
            https = {f"{AZURE_PREFIX}always.use.https": "false"}  # read for every account alike (no per-account key)
            # ABFS 3.5's Apache HTTP client cannot start without TLS (its socket factory is set up for https only:
            # "SSL socket factory may not be null"), so a plain HTTP emulator is reached through the JDK's client.
            options["networking.library"] = "JDK_HTTP_URL_CONNECTION"
    conf = {**AZURE_CHECKPOINT_DEFAULTS, **https}
    for account in azure_accounts(spec):
        conf.update({f"{AZURE_PREFIX}{option}.{account}": value for option, value in options.items()})
    return {**conf, **identity.azure_auth_conf(spec)}


def spark_conf(attempt: Attempt) -> dict[str, str]:
    """spark-defaults.conf of the attempt: what the operator owns, then the user's extra settings."""
    spec = attempt.spec
    conf = {
        "spark.submit.deployMode": "client",
        "spark.app.name": f"{attempt.namespace}.{attempt.app}",
        "spark.kubernetes.namespace": attempt.namespace,
        "spark.kubernetes.container.image": spec.image,
        "spark.kubernetes.container.image.pullPolicy": spec.imagePullPolicy,
        "spark.kubernetes.authenticate.driver.serviceAccountName": _service_account_name(attempt),
        "spark.kubernetes.authenticate.executor.serviceAccountName": identity.executor_service_account(
            attempt.app, spec
        ),
        "spark.kubernetes.executor.podNamePrefix": names.executor_prefix(attempt.app, attempt.run, attempt.attempt),
        "spark.kubernetes.executor.podTemplateFile": f"{CONF_DIR}/{EXECUTOR_TEMPLATE}",
        "spark.kubernetes.executor.podTemplateContainerName": EXECUTOR_CONTAINER,
        "spark.kubernetes.executor.deleteOnTermination": "true",
        "spark.executor.instances": str(spec.executor.instances),
        "spark.executor.cores": str(spec.executor.cores),
        "spark.executor.memory": spec.executor.memory,
        "spark.driver.cores": str(spec.driver.cores),
        "spark.driver.memory": spec.driver.memory,
        "spark.driver.port": str(contract.DRIVER_PORT),
        "spark.blockManager.port": str(contract.BLOCK_MANAGER_PORT),
        "spark.ui.port": str(contract.SPARK_UI_PORT),
    }
    conf.update(security.spark_conf(attempt.app))
    for key, value in names.executor_labels(attempt.app, attempt.run, attempt.attempt).items():
        conf[f"spark.kubernetes.executor.label.{key}"] = value
    # Python code the script imports from its own directory (or, as the example apps do, its parent) must be
    # importable on executors too, where pickled functions are resolved; the user's sparkConf may override it.
    script_dir = posixpath.dirname(spec.application.file.removeprefix("local://"))
    conf["spark.executorEnv.PYTHONPATH"] = f"{script_dir}:{posixpath.dirname(script_dir)}"
    conf.update(gcs_conf(spec))
    conf.update(azure_conf(spec))
    conf.update(s3a_conf(spec))
    if spec.executor.coreRequest:
        conf["spark.kubernetes.executor.request.cores"] = spec.executor.coreRequest
    if spec.executor.memoryOverhead:
        conf["spark.executor.memoryOverhead"] = spec.executor.memoryOverhead  # Spark sizes the executor pods
    if spec.imagePullSecrets:  # Spark adds them to every executor pod
        conf["spark.kubernetes.container.image.pullSecrets"] = ",".join(ref.name for ref in spec.imagePullSecrets)
    if spec.application.packages:
        conf["spark.jars.packages"] = ",".join(spec.application.packages)
    if spec.application.pyFiles:
        conf["spark.submit.pyFiles"] = ",".join(spec.application.pyFiles)
    # Validation refuses owned or malformed keys before anything is rendered; dropping them here too keeps a
    # spec that bypassed it (an old status.lastReconciledSpec) from rewriting what the operator owns.
    accounts = azure_accounts(spec)
    user = {
        key: value
        for key, value in spec.sparkConf.items()
        if spark_conf_problem(key, value) is None and azure_account_owner(key, accounts) is None
    }
    return {**conf, **user}


def spark_conf_from_secrets_env(spec: StreamingAppSpec) -> list[dict[str, Any]]:
    """spec.sparkConfFromSecrets as driver environment: one secretKeyRef variable per setting (the value stays
    in the Secret) and a map from Spark key to variable name, which the runtime applies to the SparkConf.
    Executors need none: they receive the driver's settings over Spark's authenticated, encrypted RPC."""
    keys = sorted(key for key in spec.sparkConfFromSecrets if spark_key_problem(key) is None)
    if not keys:
        return []
    variables = {key: f"{contract.ENV_SPARK_CONF_SECRET_PREFIX}{index}" for index, key in enumerate(keys)}
    env: list[dict[str, Any]] = [
        {"name": contract.ENV_SPARK_CONF_SECRETS, "value": json.dumps(variables, sort_keys=True)},
    ]
    for key, variable in variables.items():
        ref = spec.sparkConfFromSecrets[key]
        env.append({"name": variable, "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}})
    return env


def render_spark_defaults(conf: dict[str, str]) -> str:
    """The text of spark-defaults.conf (escaped as Spark reads it: `headrace.api.spark_defaults`)."""
    return spark_defaults.render(conf)


def executor_pod_template(attempt: Attempt) -> dict[str, Any]:
    """The pod template Spark uses for executors: volumes and mounts, typed scheduling and resources, merged with
    the user's template. (Spark sets the memory and CPU request itself, from spark.executor.*, and the image pull
    secrets, from spark.kubernetes.container.image.pullSecrets.)"""
    spec = attempt.spec
    ours: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"labels": names.executor_labels(attempt.app, attempt.run, attempt.attempt)},
        "spec": {
            "enableServiceLinks": False,
            "automountServiceAccountToken": False,  # executors never talk to the API server
            "securityContext": security.pod_security_context(),
            **scheduling.pod_fields(spec.executor),
            "containers": [
                {
                    "name": EXECUTOR_CONTAINER,
                    "securityContext": security.container_security_context(),
                    "env": [*security.executor_env(attempt.app), *identity.credentials_env(spec)],
                    "volumeMounts": [
                        *security.volume_mounts(),
                        *identity.volume_mounts(spec),
                        *[mount.model_dump() for mount in spec.volumeMounts],
                    ],
                    "resources": scheduling.resources(
                        spec.executor, spec.executor.memory, None, EXECUTOR_OVERHEAD_FACTOR
                    ),
                }
            ],
            "volumes": [
                *security.volumes(attempt.app),
                *identity.volumes(spec),
                *[volume.model_dump() for volume in spec.volumes],
            ],
        },
    }
    result: dict[str, Any] = merge(ours, spec.executor.podTemplate.model_dump())
    return result


def config_map(attempt: Attempt) -> dict[str, Any]:
    """The ConfigMap mounted at SPARK_CONF_DIR in the driver."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _attempt_metadata(names.config_map, attempt),
        "data": {
            SPARK_DEFAULTS: render_spark_defaults(spark_conf(attempt)),
            EXECUTOR_TEMPLATE: yaml.safe_dump(executor_pod_template(attempt), sort_keys=False),
        },
    }


def _ports() -> list[dict[str, Any]]:
    return [
        {"name": "driver-rpc", "containerPort": contract.DRIVER_PORT},
        {"name": "blockmanager", "containerPort": contract.BLOCK_MANAGER_PORT},
        {"name": "spark-ui", "containerPort": contract.SPARK_UI_PORT},
        {"name": "control", "containerPort": contract.DEFAULT_CONTROL_PORT},
        {"name": "metrics", "containerPort": contract.DEFAULT_METRICS_PORT},
    ]


def _driver_env(attempt: Attempt) -> list[dict[str, Any]]:
    spec = attempt.spec
    plain = {
        contract.ENV_APP_NAME: attempt.app,
        contract.ENV_APP_NAMESPACE: attempt.namespace,
        contract.ENV_RUN_ID: f"r{attempt.run}",
        contract.ENV_ATTEMPT: str(attempt.attempt),
        contract.ENV_CHECKPOINT_DIR: attempt.checkpoint_dir,
        contract.ENV_STATE_BACKEND: spec.state.backend,
        contract.ENV_STATE_PARTITIONS: str(spec.state.partitions),
        contract.ENV_MODE: spec.mode,
        contract.ENV_CONTROL_PORT: str(contract.DEFAULT_CONTROL_PORT),
        contract.ENV_CONTROL_TLS_DIR: control_tls.MOUNT_DIR,
        contract.ENV_METRICS_PORT: str(contract.DEFAULT_METRICS_PORT),
        "SPARK_CONF_DIR": CONF_DIR,
    }
    if spec.state.savepointDir:
        plain[contract.ENV_SAVEPOINT_DIR] = names.savepoint_dir(
            spec.state.savepointDir, attempt.namespace, attempt.app, ""
        ).rstrip("/")
    if attempt.restore_from:
        plain[contract.ENV_RESTORE_FROM] = attempt.restore_from
        plain[contract.ENV_ALLOW_REPARTITION] = "true" if attempt.allow_repartition else "false"
    if attempt.standby:
        plain[contract.ENV_STANDBY] = "true"
    if attempt.standby and not spec.standby.warmup:
        plain[contract.ENV_WARMUP] = "false"
    if attempt.standby and attempt.compare_checkpoint:
        plain[contract.ENV_PREWARM_CHECKPOINT] = attempt.compare_checkpoint
    plain[contract.ENV_DRIVER_LEASE] = names.driver_lease(attempt.app)  # every driver writes only while holding it
    if attempt.expected_commits:
        plain[contract.ENV_EXPECTED_COMMITS] = json.dumps(dict(attempt.expected_commits), sort_keys=True)
    env: list[dict[str, Any]] = [{"name": key, "value": value} for key, value in plain.items()]
    env += [
        *security.env(),
        {"name": contract.ENV_POD_IP, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": contract.ENV_POD_NAME, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {
            "name": contract.ENV_CONTROL_TOKEN,
            "valueFrom": {"secretKeyRef": {"name": names.control_secret(attempt.app), "key": TOKEN_KEY}},
        },
        *identity.credentials_env(spec),
        *spark_conf_from_secrets_env(spec),
    ]
    return env + [variable.model_dump() for variable in spec.driver.env]


def _script_args(attempt: Attempt) -> list[str]:
    application = attempt.spec.application
    return [application.file.removeprefix("local://"), *application.args]


def _image_pull_secrets(spec: StreamingAppSpec) -> dict[str, Any]:
    if not spec.imagePullSecrets:
        return {}
    return {"imagePullSecrets": [ref.model_dump() for ref in spec.imagePullSecrets]}


def driver_pod_manifest(attempt: Attempt) -> dict[str, Any]:
    """The driver pod: Spark in client mode under the Headrace runtime (restartPolicy Never)."""
    spec = attempt.spec
    name = names.driver_pod(attempt.app, attempt.run, attempt.attempt)
    labels = {**names.driver_labels(attempt.app, attempt.run, attempt.attempt), names.SPEC_HASH: attempt.spec_hash}
    if attempt.standby:
        labels[names.STANDBY] = "true"
    ours: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _metadata(name, attempt, labels),
        "spec": {
            "restartPolicy": "Never",
            "serviceAccountName": _service_account_name(attempt),
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": 30,
            "securityContext": security.pod_security_context(),
            **scheduling.spread(scheduling.pod_fields(spec.driver), names.driver_selector_labels(attempt.app)),
            **_image_pull_secrets(spec),
            "containers": [
                {
                    "name": DRIVER_CONTAINER,
                    "image": spec.image,
                    "imagePullPolicy": spec.imagePullPolicy,
                    "args": _script_args(attempt),
                    "env": _driver_env(attempt),
                    "securityContext": security.container_security_context(),
                    "ports": _ports(),
                    "resources": scheduling.resources(
                        spec.driver,
                        spec.driver.memory,
                        spec.driver.coreRequest or str(spec.driver.cores),
                        DRIVER_OVERHEAD_FACTOR,
                    ),
                    "volumeMounts": [
                        {"name": "spark-conf", "mountPath": CONF_DIR, "readOnly": True},
                        *security.volume_mounts(),
                        *identity.volume_mounts(spec),
                        control_tls.volume_mount(),
                        *[mount.model_dump() for mount in spec.volumeMounts],
                    ],
                    "terminationMessagePath": contract.TERMINATION_MESSAGE_PATH,
                    "terminationMessagePolicy": "FallbackToLogsOnError",
                }
            ],
            "volumes": [
                {
                    "name": "spark-conf",
                    "configMap": {"name": names.config_map(attempt.app, attempt.run, attempt.attempt)},
                },
                *security.volumes(attempt.app),
                *identity.volumes(spec),
                control_tls.volume(attempt.app),
                *[volume.model_dump() for volume in spec.volumes],
            ],
        },
    }
    result: dict[str, Any] = merge(ours, spec.driver.podTemplate.model_dump())
    return result


def driver_service(attempt: Attempt) -> dict[str, Any]:
    """A headless Service selecting only this attempt's driver pod (executors connect through it)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _attempt_metadata(names.driver_service, attempt),
        "spec": {
            "clusterIP": "None",
            "selector": names.driver_labels(attempt.app, attempt.run, attempt.attempt),
            "ports": [
                {"name": port["name"], "port": port["containerPort"], "targetPort": port["containerPort"]}
                for port in _ports()
            ],
        },
    }


UI_PORTS: Final = frozenset({"spark-ui", "metrics"})  # the driver ports the app's UI Service serves


def ui_service(attempt: Attempt) -> dict[str, Any]:
    """The app's Service for the Spark UI and the driver's metrics (docs/operations.md, "Spark UI"): its name and
    address stay the same across attempts and runs; it selects the driver pod labelled writer (the one running the
    queries: never a warm standby nor a pre-warmed upgrade's driver), so it has no endpoint until a driver writes."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(names.ui_service(attempt.app), attempt, names.app_labels(attempt.app)),
        "spec": {
            "type": "ClusterIP",
            "selector": {names.APP: attempt.app, names.ROLE: names.ROLE_DRIVER, names.WRITER: "true"},
            "ports": [
                {"name": port["name"], "port": port["containerPort"], "targetPort": port["name"], "protocol": "TCP"}
                for port in _ports()
                if port["name"] in UI_PORTS
            ],
        },
    }


DRIVER_LOG_MAX_CHARS: Final = 256 * 1024  # the kept tail of an ended driver's log (a ConfigMap holds at most 1 MiB)
DRIVER_LOG_KEYS: Final = ("pod", "savedAt", "log")


def driver_log_config_map(
    app: str, namespace: str, app_uid: str, *, pod: str, log: str, saved_at: str
) -> dict[str, Any]:
    """The app's driver-log ConfigMap: the last `DRIVER_LOG_MAX_CHARS` of the log of its driver `pod`, which ended,
    saved at `saved_at`; owned by the app (deleted with it), replaced by the next driver that ends. No run label, so
    never pruned with an attempt's objects."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": names.driver_log(app),
            "namespace": namespace,
            "labels": names.app_labels(app),
            "ownerReferences": [owner_reference(app, app_uid)],
        },
        "data": dict(zip(DRIVER_LOG_KEYS, (pod, saved_at, log[-DRIVER_LOG_MAX_CHARS:]), strict=True)),
    }


def rbac(app: str, namespace: str, app_uid: str, attempt: Attempt) -> list[dict[str, Any]]:
    """ServiceAccounts (the driver's and the executors', unless the spec names one for both), and the Role and
    RoleBinding letting the driver manage its executor pods and the ConfigMap Spark makes for them;
    nothing else (no Services, Secrets or PersistentVolumeClaims)."""
    name = names.service_account(app)
    labels = names.app_labels(app)
    rules = [
        {
            "apiGroups": [""],
            "resources": ["pods"],
            "verbs": ["create", "get", "list", "watch", "delete", "deletecollection", "patch"],
        },
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create", "get", "list", "delete"]},
    ]
    objects: list[dict[str, Any]] = [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": _metadata(name, attempt, labels),
            "rules": rules,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": _metadata(name, attempt, labels),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": _service_account_name(attempt), "namespace": namespace}],
        },
    ]
    if attempt.spec.own_service_account() is None:
        metadata = identity.service_account_metadata(attempt.spec, _metadata(name, attempt, labels))
        objects[:0] = [
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": metadata},
            security.executor_service_account(app, metadata),
        ]
    objects += _driver_lease_rbac(attempt)
    del app_uid
    return objects


def _driver_lease_rbac(attempt: Attempt) -> list[dict[str, Any]]:
    """A Role and RoleBinding of their own (so apps made by an older operator get them on their next attempt)
    letting the app's driver read and renew its one Lease: not create, list or touch any other Lease."""
    name = names.driver_lease(attempt.app)
    labels = names.app_labels(attempt.app)
    rule = {"apiGroups": [COORDINATION], "resources": ["leases"], "resourceNames": [name], "verbs": ["get", "update"]}
    subject = {"kind": "ServiceAccount", "name": _service_account_name(attempt), "namespace": attempt.namespace}
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": _metadata(name, attempt, labels),
            "rules": [rule],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": _metadata(name, attempt, labels),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [subject],
        },
    ]


def driver_lease(attempt: Attempt) -> dict[str, Any]:
    """The app's driver Lease, held by nobody yet (the drivers take it; owned by the app, deleted with it)."""
    return {
        "apiVersion": f"{COORDINATION}/v1",
        "kind": "Lease",
        "metadata": _metadata(names.driver_lease(attempt.app), attempt, names.app_labels(attempt.app)),
        "spec": {"leaseDurationSeconds": contract.DRIVER_LEASE_SECONDS},
    }


def driver_disruption_budget(attempt: Attempt) -> dict[str, Any]:
    """The app's PodDisruptionBudget over its writing driver (label headrace.dev/writer, which the operator puts on
    the driver once it runs the queries): no eviction of it (`kubectl drain`, a cluster autoscaler's or Karpenter's
    consolidation), so a drain waits for the operator's handover (the driver moves through a pre-warmed driver on
    another node, `headrace.core.drain`), after which the pod is gone. A standby or a pre-warmed driver (never
    labelled before its promotion) may be evicted, and so may a writer that is not ready (AlwaysAllow). minAvailable
    as a number (not maxUnavailable, nor a percentage): the budget then counts the pods it selects, and never asks
    the pods' owner, the StreamingApp, for a scale (its scale subresource counts executors)."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _metadata(names.driver_disruption_budget(attempt.app), attempt, names.app_labels(attempt.app)),
        "spec": {
            "minAvailable": 1,
            "selector": {"matchLabels": {names.APP: attempt.app, names.ROLE: names.ROLE_DRIVER, names.WRITER: "true"}},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def executor_disruption_budget(
    app: str, namespace: str, app_uid: str, run: int, attempt: int, *, executors: int
) -> dict[str, Any]:
    """The app's PodDisruptionBudget over the executors of its writing attempt (run, attempt: the writer's, and only
    its: a standby's or a pre-warmed driver's executors carry their own attempt's labels, so they are neither protected
    nor counted, and cannot make one of the writer's evictable). Created, or reshaped for the next writer, when the
    operator labels a driver its writer (`MarkWriter`), so a drain evicts none of the executors the old driver keeps
    processing with until the handover, after which the operator deletes that driver and Spark its executors (not
    evicted: no budget applies).

    minAvailable is the writer's executor count (`executors`: status.executors, what the scale subresource reports),
    as a number: a percentage or maxUnavailable would make the disruption controller ask the executors' owner, the
    driver pod, for a scale it has not. No healthy executor of the attempt is then evictable while it has at most
    that many (`kubectl get pdb` shows the count it keeps); after a rescale in place or the autoscaler's the operator
    puts the budget again with the new count (the writer's label EXECUTOR_BUDGET records the count it was made for),
    so only executors beyond the count (a scale-down Spark has not finished) may be evicted meanwhile, and a
    scale-up holds every eviction until the new executors are counted. An executor that is not Ready may be evicted
    (AlwaysAllow, as the driver's budget): a broken one never holds a drain. A budget of its own, not the drivers'
    reshaped: that one is among the app's shared objects sent with every attempt (`app_objects`, whose digest must
    not follow the writer), and keeps guarding a writer whose executors an older operator made without their
    attempt's labels."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": names.executor_disruption_budget(app),
            "namespace": namespace,
            "labels": names.app_labels(app),
            "ownerReferences": [owner_reference(app, app_uid)],
        },
        "spec": {
            "minAvailable": executors,
            "selector": {"matchLabels": names.executor_labels(app, run, attempt)},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def control_secret(attempt: Attempt, token: str, certificate: control_tls.ControlCertificate) -> dict[str, Any]:
    """The Secret with the driver control endpoint's bearer token and TLS certificate (with its key)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": _metadata(names.control_secret(attempt.app), attempt, names.app_labels(attempt.app)),
        "stringData": {**control_secret_values(token), **certificate.secret_values()},
    }


def control_secret_values(token: str) -> dict[str, str]:
    """The control Secret's keys: the token and what is derived from it (Spark's authentication secret)."""
    return {
        TOKEN_KEY: token,
        security.SPARK_AUTH_KEY: security.spark_auth_secret(token),
        security.SPARK_AUTH_ENV_KEY: security.spark_auth_secret_env(token),
    }


def missing_control_secret_values(
    existing: dict[str, str], token: str, certificate: Callable[[], control_tls.ControlCertificate]
) -> dict[str, str]:
    """What an existing control Secret (made by an older operator) lacks: the keys derived from its token, and a
    certificate with its key from `certificate()` (both, when either is missing: one cannot serve without the other)."""
    missing = {key: value for key, value in control_secret_values(token).items() if key not in existing}
    if not {control_tls.CERT_KEY, control_tls.KEY_KEY} <= existing.keys():
        missing.update(certificate().secret_values())
    return missing


def app_objects(attempt: Attempt) -> list[dict[str, Any]]:
    """The objects every attempt of the app shares (named after the app, not the attempt): ServiceAccounts,
    Roles and RoleBindings, the driver Lease, the NetworkPolicy, the drivers' PodDisruptionBudget, the UI Service.
    Not the control Secret, made apart because its token is made at the edge."""
    network = _metadata(names.service_account(attempt.app), attempt, names.app_labels(attempt.app))
    return [
        *rbac(attempt.app, attempt.namespace, attempt.app_uid, attempt),
        driver_lease(attempt),
        security.network_policy(attempt.app, network, _ports(), attempt.operator_namespace, attempt.peers),
        driver_disruption_budget(attempt),
        ui_service(attempt),
    ]


def attempt_objects(attempt: Attempt) -> list[dict[str, Any]]:
    """Everything one attempt needs, in creation order (the pod last: what it mounts exists first): the app's
    shared objects (`app_objects`), then the attempt's own ConfigMap, Service and pod.
    The control Secret is separate because its token is made at the edge."""
    return [
        *app_objects(attempt),
        config_map(attempt),
        driver_service(attempt),
        driver_pod_manifest(attempt),
    ]
