"""Checks of a StreamingApp spec that the CRD schema cannot express, and the tenant policy.

Owns: the Spark settings the operator owns (and which spec field sets each), the environment names
it reserves, the tenant policy a cluster admin configures (what a pod template, a volume or a
ServiceAccount may ask for), and checks that span the spec. Every problem names the field and the
fix (for a policy refusal: the chart value that allows it).
Never: I/O.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import ConfigDict
from pydantic.alias_generators import to_camel

from headrace.api.models import PodScheduling, StreamingAppSpec
from headrace.api.runtime_contract import USER_SETTABLE_ENV
from headrace.core.quantities import DRIVER_OVERHEAD_FACTOR, EXECUTOR_OVERHEAD_FACTOR, pod_memory_mib, spark_memory_mib

# Spark settings the operator sets itself (render/manifests.py and the runtime in the driver):
# key -> where the user sets it instead. tests/unit/core/test_validation.py checks that every key the
# operator renders or the runtime adds is owned here (or is a default the user may override).
OWNED_SPARK_CONF: dict[str, str] = {
    "spark.master": "the operator (the driver runs in client mode against this cluster)",
    "spark.submit.deployMode": "the operator (always client mode inside the driver pod)",
    "spark.kubernetes.namespace": "metadata.namespace",
    "spark.kubernetes.container.image": "spec.image",
    "spark.kubernetes.container.image.pullPolicy": "spec.imagePullPolicy",
    "spark.executor.instances": "spec.executor.instances",
    "spark.executor.cores": "spec.executor.cores",
    "spark.executor.memory": "spec.executor.memory",
    "spark.driver.cores": "spec.driver.cores",
    "spark.driver.memory": "spec.driver.memory",
    "spark.kubernetes.executor.request.cores": "spec.executor.coreRequest",
    "spark.sql.shuffle.partitions": "spec.state.partitions",
    "spark.sql.streaming.checkpointLocation": "spec.state.checkpointDir",
    "spark.sql.streaming.stateStore.providerClass": "spec.state.backend",
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "spec.state.backend",
    "spark.driver.host": "the operator (the driver pod's IP)",
    "spark.driver.bindAddress": "the operator",
    "spark.driver.port": "the operator",
    "spark.blockManager.port": "the operator",
    "spark.ui.port": "the operator",
    "spark.ui.killEnabled": "the operator (the UI never kills jobs)",
    "spark.kubernetes.driver.pod.name": "the operator (the driver pod owns its executors)",
    "spark.kubernetes.executor.podNamePrefix": "the operator (names are per run and attempt)",
    "spark.kubernetes.executor.deleteOnTermination": "the operator",
    "spark.kubernetes.driver.ownPersistentVolumeClaim": "the operator (the driver's Role grants no PVCs)",
    "spark.kubernetes.driver.reusePersistentVolumeClaim": "the operator (the driver's Role grants no PVCs)",
    "spark.dynamicAllocation.enabled": "spec.executor.instances (Headrace scales executors itself)",
    "spark.jars.packages": "spec.application.packages",
    "spark.submit.pyFiles": "spec.application.pyFiles",
    "spark.network.crypto.enabled": "the operator (RPC encryption is always on)",
    "spark.hadoop.fs.s3a.endpoint": "spec.state.s3.endpoint",
    "spark.hadoop.fs.s3a.endpoint.region": "spec.state.s3.region",
    "spark.hadoop.fs.s3a.path.style.access": "spec.state.s3.pathStyleAccess",
    "spark.hadoop.fs.s3a.connection.ssl.enabled": "spec.state.s3.endpoint (https:// or http://)",
    "spark.hadoop.fs.s3a.aws.credentials.provider": "spec.state.s3.credentialsMode",
    "spark.hadoop.fs.gs.storage.root.url": "spec.state.gcs.endpoint",
    "spark.hadoop.fs.gs.project.id": "spec.state.gcs.projectId",
    "spark.hadoop.fs.gs.auth.type": "spec.state.gcs.credentialsMode",
    "spark.hadoop.fs.gs.auth.service.account.json.keyfile": "spec.state.gcs.serviceAccountKeySecret",
    "spark.hadoop.fs.azure.always.use.https": "spec.state.azure.endpoint (https:// or http://)",
    "spark.executor.memoryOverhead": "spec.executor.memoryOverhead",
    "spark.driver.memoryOverhead": "spec.driver.memoryOverhead (the driver pod's memory is the operator's)",
    "spark.kubernetes.container.image.pullSecrets": "spec.imagePullSecrets",
}
# The ABFS options spec.state.azure sets for each account of the state URIs, as the connector's per-account keys
# (spark.hadoop.fs.azure.<option>.<account host>, which win over spark.hadoop.fs.azure.<option>): the user's settings
# of those options for a state account are refused, those of other accounts (an input's) and the global ones are
# theirs. render/identity.py renders them.
AZURE_PREFIX = "spark.hadoop.fs.azure."
AZURE_OWNED_OPTIONS: dict[str, str] = {
    "abfs.endpoint": "spec.state.azure.endpoint",
    "networking.library": "spec.state.azure.endpoint (an http:// emulator)",
    "account.hns.enabled": "spec.state.azure.namespace",
    "fns.account.service.type": "spec.state.azure.namespace",
    "account.auth.type": "spec.state.azure.credentialsMode",
    "account.oauth.provider.type": "spec.state.azure.credentialsMode",
    "account.keyprovider": "spec.state.azure.accountKeySecret",
    "shellkeyprovider.script": "spec.state.azure.accountKeySecret",
    "account.key": "spec.state.azure.accountKeySecret",
    "account.oauth2.client.id": "spec.state.azure.workloadIdentity.clientId or managedIdentity.clientId",
    "account.oauth2.msi.tenant": "spec.state.azure.workloadIdentity.tenantId",
    "account.oauth2.msi.authority": "spec.state.azure.workloadIdentity.authority",
    "account.oauth2.token.file": "spec.state.azure.workloadIdentity",
}
AZURE_SCHEMES = ("abfs", "abfss")
S3A_BUCKET_PREFIX = "spark.hadoop.fs.s3a.bucket."  # per-bucket S3A settings: <prefix><bucket>.<option>
# Suffixes of S3A keys that carry credentials: sparkConf is stored in a ConfigMap, so they are refused
# (also per bucket, spark.hadoop.fs.s3a.bucket.<name>.<suffix>).
S3A_SECRET_SUFFIXES = (".access.key", ".secret.key", ".session.token", ".encryption.key", ".server-side-encryption.key")
# Settings that carry secrets, by the end of the (normalised) key: S3A's above; Azure storage account keys
# (fs.azure.account.key[.<account>...]) and OAuth client secrets; GCS service account private keys; Kafka's
# JAAS configuration (it holds the password); and any last segment naming a password, secret, token or
# credential (spark.ssl.keyStorePassword, Kafka's ssl.*.password, Hive's javax.jdo.option.ConnectionPassword,
# Iceberg catalogs' credential and token, ...). They belong in sparkConfFromSecrets.
SECRET_KEY_SUFFIXES = (*S3A_SECRET_SUFFIXES, ".private.key", ".sasl.jaas.config", ".account.key", ".client.secret")
SECRET_KEY_INFIXES = (".account.key.",)  # fs.azure.account.key.<account>.dfs.core.windows.net
SECRET_LAST_SEGMENTS = ("password", "passwd", "secret", "secretkey", "token", "credential", "credentials", "apikey")
CONF_FROM_SECRETS = "spec.sparkConfFromSecrets"
# The environment each S3 credentials mode sets on driver and executors (render/identity.py renders it).
S3_MODE_ENV: dict[str, frozenset[str]] = {
    "secret": frozenset({"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"}),
    "webIdentity": frozenset({"AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ENDPOINT_URL_STS", "AWS_REGION"}),
}
# Label keys of the operator's own (on the ServiceAccounts it creates too): a user's labels may not set them.
OWN_LABEL_PREFIXES = ("headrace.dev/", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance")
# Resources with a typed field of their own, not extendedResources.
TYPED_RESOURCES = {
    "cpu": "cores and coreRequest",
    "memory": "memory and memoryOverhead",
    "ephemeral-storage": "ephemeralStorage",
}
_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_QUALIFIED_NAME = re.compile(rf"^([a-z0-9]([-a-z0-9.]{{0,251}}[a-z0-9])?/)?{_NAME}$")
_LABEL_VALUE = re.compile(rf"^({_NAME})?$")
NODE_LOCAL_VOLUME_TYPES = frozenset({"hostPath", "emptyDir"})
# Whole families of keys the operator owns: prefix -> where the user sets it instead.
OWNED_SPARK_CONF_PREFIXES: dict[str, str] = {
    "spark.kubernetes.authenticate.": "spec.serviceAccount.name",
    "spark.kubernetes.executor.podtemplate": "spec.executor.podTemplate",
    "spark.kubernetes.executor.label.": "the operator (executor labels select an app's pods)",
    "spark.kubernetes.executor.volumes.": "spec.volumes (checked against the cluster's tenant policy)",
    "spark.kubernetes.driver.volumes.": "spec.volumes (checked against the cluster's tenant policy)",
    "spark.kubernetes.executor.secrets.": "spec.volumes (checked against the cluster's tenant policy)",
    "spark.kubernetes.driver.secrets.": "spec.volumes (checked against the cluster's tenant policy)",
    "spark.authenticate": "the operator (Spark authentication with a per-app secret is always on)",
    "spark.executorenv.headrace_": "the operator (HEADRACE_* variables are reserved)",
    "spark.executorenv._spark_auth_secret": "the operator (the per-app Spark secret)",
}
# Defaults the operator renders that a user's sparkConf may replace.
USER_OVERRIDABLE_SPARK_CONF = frozenset(
    {
        "spark.app.name",
        "spark.executorEnv.PYTHONPATH",
        "spark.ui.showConsoleProgress",
        "spark.sql.warehouse.dir",
        "spark.scheduler.minRegisteredResourcesRatio",  # the runtime's cold-start default
        "spark.hadoop.fs.file.impl",  # the runtime's java.nio local file system, when the image has it
        "spark.hadoop.fs.AbstractFileSystem.file.impl",
        "spark.sql.streaming.checkpointFileManagerClass",  # the checkpoint defaults for state on S3 and GCS
        "spark.hadoop.fs.s3a.performance.flags",
        "spark.hadoop.fs.gs.impl",  # the Cloud Storage connector's file systems, for state on gs://
        "spark.hadoop.fs.AbstractFileSystem.gs.impl",
        "spark.hadoop.fs.gs.block.size",  # and sizes in bytes (render/manifests.py, GCS_SIZES)
        "spark.hadoop.fs.gs.rewrite.max.chunk.size",
        "spark.hadoop.fs.gs.outputstream.buffer.size",
        "spark.hadoop.fs.gs.inputstream.inplace.seek.limit",
        "spark.hadoop.fs.gs.inputstream.min.range.request.size",
        "spark.hadoop.fs.gs.operation.move.enable",  # off for an emulator (credentialsMode unauthenticatedEmulator)
    }
)
# Environment variables the operator sets on its containers; a user's env may not set them.
RESERVED_ENV_PREFIX = "HEADRACE_"
RESERVED_ENV_NAMES = frozenset({"SPARK_CONF_DIR", "_SPARK_AUTH_SECRET", "SPARK_LOCAL_DIRS"})
# Characters that would end or split a spark-defaults line or key (Java properties separators).
_KEY_PATTERN = re.compile(r"^[A-Za-z0-9_.\-*\[\]/@+]+$")

# Volume types of the `restricted` Pod Security Standard.
RESTRICTED_VOLUME_TYPES = (
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
)
POLICY_VALUE = "tenantPolicy"  # the chart value (and HEADRACE_TENANT_POLICY) that configures the policy


@dataclass(frozen=True)
class TenantPolicy:
    """What a StreamingApp may ask of its pods; a cluster admin widens it in the chart's `tenantPolicy`.
    The defaults refuse everything the `baseline` Pod Security Standard forbids, root and added
    capabilities, and any ServiceAccount but the one the operator creates for the app. The operator's settings
    read it from the chart's JSON by its camelCase names (allowRunAsRoot, ...); an unknown name is refused."""

    __pydantic_config__ = ConfigDict(alias_generator=to_camel, extra="forbid")

    allow_host_namespaces: bool = False  # hostNetwork, hostPID, hostIPC
    allow_host_ports: bool = False
    allow_privileged: bool = False  # privileged, Unconfined seccomp/AppArmor, Unmasked procMount, hostProcess
    allow_privilege_escalation: bool = False
    allow_run_as_root: bool = False  # runAsUser 0
    allowed_capabilities: frozenset[str] = frozenset()
    allowed_volume_types: frozenset[str] = frozenset(RESTRICTED_VOLUME_TYPES)
    service_accounts: frozenset[str] = frozenset()


DEFAULT_POLICY = TenantPolicy()


@dataclass(frozen=True)
class Problem:
    """One reason a spec cannot be applied."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


# ----------------------------------------------------------------------------------- sparkConf --


def normalize_key(key: str) -> str:
    """A Spark key as compared with the owned ones: surrounding whitespace dropped, lower case."""
    return unicodedata.normalize("NFKC", key).strip().lower()


def spark_conf_owner(key: str) -> str | None:
    """Where an owned Spark key is set instead, or None when the user may set it."""
    normal = normalize_key(key)
    if normal in {k.lower() for k in USER_OVERRIDABLE_SPARK_CONF}:
        return None
    for owned, owner in OWNED_SPARK_CONF.items():
        if normal == owned.lower():
            return owner
    for prefix, owner in OWNED_SPARK_CONF_PREFIXES.items():
        if normal.startswith(prefix):
            return owner
    return None


def _has_control(text: str) -> bool:
    return any(unicodedata.category(char) in {"Cc", "Cf", "Zl", "Zp"} for char in text)


def carries_secret(key: str) -> bool:
    """Whether a Spark key evidently holds a secret (a password, key, token or credential)."""
    normal = normalize_key(key)
    last = normal.rsplit(".", 1)[-1]
    return (
        normal.endswith(SECRET_KEY_SUFFIXES)
        or any(infix in normal for infix in SECRET_KEY_INFIXES)
        or last.endswith(SECRET_LAST_SEGMENTS)
    )


def spark_key_problem(key: str) -> str | None:
    """Why a Spark key may not be set by the user at all (malformed, or owned by the operator)."""
    if not _KEY_PATTERN.match(key):
        return (
            f"{key!r} is not a Spark key: keys are letters, digits and . _ - * [ ] / @ + (no whitespace, "
            "'=', ':' or control characters); fix the key"
        )
    owner = spark_conf_owner(key)
    if owner is not None:
        fix = f"set {owner} instead" if owner.startswith(("spec.", "metadata.")) else "remove it"
        return f"{key} is owned by {owner}; {fix}"
    return None


def spark_conf_problem(key: str, value: str) -> str | None:
    """Why a user's sparkConf entry is refused (None: it may be set)."""
    if not _KEY_PATTERN.match(key):
        return spark_key_problem(key)
    normal = normalize_key(key)
    if normal.startswith(("spark.hadoop.fs.s3a.", "spark.hadoop.fs.s3.")) and normal.endswith(S3A_SECRET_SUFFIXES):
        return (
            f"{key} would put a credential in the app's ConfigMap and status; reference the Secret with "
            f"spec.state.s3.credentialsSecret or {CONF_FROM_SECRETS}"
        )
    why = spark_key_problem(key)
    if why is not None:
        return why
    if carries_secret(key):
        return (
            f"{key} carries a secret, and sparkConf is stored in the app's ConfigMap and status; move it to "
            f'{CONF_FROM_SECRETS}["{key}"] as {{name, key}} of a Secret'
        )
    if _has_control(value) or value != value.strip():
        return "the value has control characters (such as a newline) or surrounding whitespace; remove them"
    return None


def state_buckets(spec: StreamingAppSpec) -> list[str]:
    """The buckets of s3a:// checkpointDir and savepointDir (lower case), whose S3A settings spec.state.s3 owns."""
    uris = (spec.state.checkpointDir, spec.state.savepointDir)
    found = (uri.split("://", 1)[1].split("/", 1)[0] for uri in uris if uri and uri.lower().startswith("s3a://"))
    return sorted({bucket.lower() for bucket in found if bucket})


def state_bucket_owner(key: str, buckets: list[str]) -> str | None:
    """Where an S3A per-bucket key for a state bucket is set instead (S3A's spark.hadoop.fs.s3a.bucket.<bucket>.<option>
    overrides spark.hadoop.fs.s3a.<option> for that bucket: an owned option would silently replace the typed field),
    or None: per-bucket settings of other buckets (an input's, another account's) are the user's."""
    normal = normalize_key(key)
    for bucket in buckets:
        prefix = f"{S3A_BUCKET_PREFIX}{bucket}."
        if normal.startswith(prefix):
            return spark_conf_owner(f"spark.hadoop.fs.s3a.{normal.removeprefix(prefix)}")
    return None


def _state_bucket_problem(key: str, buckets: list[str]) -> str | None:
    """Why a per-bucket S3A key of a state bucket is refused (it would replace a field spec.state.s3 owns), or None."""
    owner = state_bucket_owner(key, buckets)
    if owner is None:
        return None
    return (
        f"{key} would replace {owner} for the state's bucket (spec.state.checkpointDir, savepointDir); set {owner} "
        "instead, or remove it"
    )


def _spark_conf_problems(spec: StreamingAppSpec) -> list[Problem]:
    problems = []
    buckets = state_buckets(spec)
    accounts = azure_accounts(spec)
    for key in sorted(spec.sparkConf):
        why = (
            spark_conf_problem(key, spec.sparkConf[key])
            or _state_bucket_problem(key, buckets)
            or _azure_account_problem(key, accounts)
        )
        if why is not None:
            problems.append(Problem(f'spec.sparkConf["{key}"]', why))
    plain = {normalize_key(key) for key in spec.sparkConf}
    for key in sorted(spec.sparkConfFromSecrets):
        why = spark_key_problem(key) or _state_bucket_problem(key, buckets) or _azure_account_problem(key, accounts)
        if why is None and normalize_key(key) in plain:
            why = f"{key} is also set in spec.sparkConf; keep one of the two"
        if why is not None:
            problems.append(Problem(f'{CONF_FROM_SECRETS}["{key}"]', why))
    return problems


# ------------------------------------------------------------------------------------ env vars --


def _env_problems(entries: list[Any], where: str) -> list[Problem]:
    problems = []
    for index, entry in enumerate(entries):
        name = entry.get("name") if isinstance(entry, dict) else None
        if not isinstance(name, str):
            continue
        if name.strip() in USER_SETTABLE_ENV:
            continue
        if name.strip().upper().startswith(RESERVED_ENV_PREFIX) or name.strip() in RESERVED_ENV_NAMES:
            problems.append(
                Problem(
                    f"{where}[{index}].name",
                    f"{name} is reserved for the operator (HEADRACE_* and {', '.join(sorted(RESERVED_ENV_NAMES))}); "
                    "use another name",
                )
            )
        elif name != name.strip() or _has_control(name):
            problems.append(
                Problem(f"{where}[{index}].name", "the name has whitespace or control characters; remove them")
            )
    return problems


# ----------------------------------------------------------------------------------- pod policy --


def _allow(setting: str) -> str:
    return (
        "refused by the cluster's tenant policy; a cluster admin allows it with the chart value "
        f"{POLICY_VALUE}.{setting}"
    )


def _containers(pod_spec: dict[str, Any], where: str) -> Iterator[tuple[dict[str, Any], str]]:
    for kind in ("initContainers", "containers", "ephemeralContainers"):
        items = pod_spec.get(kind)
        if isinstance(items, list):
            for index, container in enumerate(items):
                if isinstance(container, dict):
                    yield container, f"{where}.{kind}[{index}]"


def _context_flags(context: dict[str, Any], policy: TenantPolicy, *, pod: bool) -> Iterator[tuple[str, str]]:
    """(field below the securityContext, why) for each flag the policy refuses."""
    root = not policy.allow_run_as_root
    privileged = not policy.allow_privileged
    if context.get("runAsUser") == 0 and root:
        yield "runAsUser", "running as root (0) is " + _allow("allowRunAsRoot")
    if context.get("runAsNonRoot") is False and root:
        yield "runAsNonRoot", "false is " + _allow("allowRunAsRoot")
    for profile in ("seccompProfile", "appArmorProfile"):
        value = context.get(profile)
        if isinstance(value, dict) and value.get("type") == "Unconfined" and privileged:
            yield f"{profile}.type", "Unconfined is " + _allow("allowPrivileged")
    windows = context.get("windowsOptions")
    if isinstance(windows, dict) and windows.get("hostProcess") is True and privileged:
        yield "windowsOptions.hostProcess", _allow("allowPrivileged")
    if pod:
        return
    if context.get("privileged") is True and privileged:
        yield "privileged", _allow("allowPrivileged")
    if context.get("allowPrivilegeEscalation") is True and not policy.allow_privilege_escalation:
        yield "allowPrivilegeEscalation", _allow("allowPrivilegeEscalation")
    if context.get("procMount") not in (None, "Default") and privileged:
        yield "procMount", _allow("allowPrivileged")
    capabilities = context.get("capabilities")
    added = capabilities.get("add") if isinstance(capabilities, dict) else None
    allowed = {capability.upper().removeprefix("CAP_") for capability in policy.allowed_capabilities}
    for index, capability in enumerate(added if isinstance(added, list) else []):
        if str(capability).upper().removeprefix("CAP_") not in allowed:
            yield f"capabilities.add[{index}]", f"{capability} is " + _allow("allowedCapabilities")


def _security_context_problems(context: Any, where: str, policy: TenantPolicy, *, pod: bool) -> list[Problem]:
    if not isinstance(context, dict):
        return []
    return [Problem(f"{where}.{name}", why) for name, why in _context_flags(context, policy, pod=pod)]


def volume_type(volume: dict[str, Any]) -> str | None:
    """The source type of a Volume (its one key besides `name`)."""
    kinds = [key for key in volume if key != "name"]
    return kinds[0] if len(kinds) == 1 else None


def _volume_policy_problems(volumes: Any, where: str, policy: TenantPolicy) -> list[Problem]:
    if not isinstance(volumes, list):
        return []
    problems = []
    for index, volume in enumerate(volumes):
        if not isinstance(volume, dict):
            continue
        kinds = [key for key in volume if key != "name"]
        for kind in kinds:
            if kind not in policy.allowed_volume_types:
                problems.append(
                    Problem(f"{where}[{index}].{kind}", f"{kind} volumes are " + _allow("allowedVolumeTypes"))
                )
    return problems


def _container_problems(container: dict[str, Any], where: str, policy: TenantPolicy) -> list[Problem]:
    problems = _security_context_problems(
        container.get("securityContext"), f"{where}.securityContext", policy, pod=False
    )
    env = container.get("env")
    if isinstance(env, list):
        problems += _env_problems(env, f"{where}.env")
    ports = container.get("ports")
    if isinstance(ports, list) and not policy.allow_host_ports:
        for index, port in enumerate(ports):
            if isinstance(port, dict) and port.get("hostPort"):
                problems.append(Problem(f"{where}.ports[{index}].hostPort", _allow("allowHostPorts")))
    return problems


def _pod_template_problems(template: dict[str, Any], where: str, policy: TenantPolicy) -> list[Problem]:
    pod_spec = template.get("spec")
    if not isinstance(pod_spec, dict):
        return []
    where = f"{where}.spec"
    problems = []
    if not policy.allow_host_namespaces:
        for key in ("hostNetwork", "hostPID", "hostIPC"):
            if pod_spec.get(key) is True:
                problems.append(Problem(f"{where}.{key}", _allow("allowHostNamespaces")))
    for key in ("serviceAccountName", "serviceAccount", "automountServiceAccountToken"):
        if key in pod_spec:
            problems.append(
                Problem(f"{where}.{key}", "the operator sets the pods' ServiceAccount; set spec.serviceAccount.name")
            )
    if "nodeName" in pod_spec:
        problems.append(Problem(f"{where}.nodeName", "pods are scheduled; use nodeSelector or affinity instead"))
    problems += _security_context_problems(
        pod_spec.get("securityContext"), f"{where}.securityContext", policy, pod=True
    )
    problems += _volume_policy_problems(pod_spec.get("volumes"), f"{where}.volumes", policy)
    for container, at in _containers(pod_spec, where):
        problems += _container_problems(container, at, policy)
    return problems


def _policy_problems(spec: StreamingAppSpec, policy: TenantPolicy) -> list[Problem]:
    problems = _volume_policy_problems([volume.model_dump() for volume in spec.volumes], "spec.volumes", policy)
    problems += _env_problems([variable.model_dump() for variable in spec.driver.env], "spec.driver.env")
    problems += _pod_template_problems(spec.driver.podTemplate.model_dump(), "spec.driver.podTemplate", policy)
    problems += _pod_template_problems(spec.executor.podTemplate.model_dump(), "spec.executor.podTemplate", policy)
    account = spec.own_service_account()
    if account is not None and account not in policy.service_accounts:
        problems.append(
            Problem(
                "spec.serviceAccount.name" if spec.serviceAccount.name else "spec.serviceAccountName",
                f"{account} is {_allow('serviceAccounts')}; leave it unset to use the ServiceAccount Headrace "
                "creates for the app",
            )
        )
    return problems


# -------------------------------------------------------------------------------------- volumes --


def _volume_problems(spec: StreamingAppSpec) -> list[Problem]:
    problems = []
    volume_names = {str(volume.model_extra.get("name")) for volume in spec.volumes if volume.model_extra}
    for index, mount in enumerate(spec.volumeMounts):
        name = (mount.model_extra or {}).get("name")
        if name not in volume_names:
            problems.append(
                Problem(
                    f"spec.volumeMounts[{index}].name",
                    f"no volume named {name!r} in spec.volumes; add it there or fix the name",
                )
            )
    problems += _state_location_problem(spec, "checkpointDir", spec.state.checkpointDir, "checkpoints")
    if spec.state.savepointDir is not None:
        problems += _state_location_problem(spec, "savepointDir", spec.state.savepointDir, "savepoints")
    return problems


def _mount_volume(spec: StreamingAppSpec, path: str) -> dict[str, Any] | None:
    """The volume mounted at the deepest parent of `path` (None: the path is on the container's own disk)."""
    volumes = {str(volume.model_extra.get("name")): volume.model_extra for volume in spec.volumes if volume.model_extra}
    best: tuple[int, dict[str, Any]] | None = None
    for mount in spec.volumeMounts:
        extra = mount.model_extra or {}
        mount_path = str(extra.get("mountPath", "")).rstrip("/")
        if mount_path and (path == mount_path or path.startswith(mount_path + "/")):
            volume = volumes.get(str(extra.get("name")))
            if volume is not None and (best is None or len(mount_path) > best[0]):
                best = (len(mount_path), volume)
    return best[1] if best else None


def _state_location_problem(spec: StreamingAppSpec, field: str, uri: str, what: str) -> list[Problem]:
    """A file:// state directory must be on a volume, and on a node-local one only with allowNodeLocal."""
    if not uri.startswith("file://"):
        return []
    where = f"spec.state.{field}"
    volume = _mount_volume(spec, uri.removeprefix("file://"))
    if volume is None:
        return [
            Problem(
                where,
                f"{uri} is not on a volume: {what} would die with the pod; use object storage (s3a:// with "
                "spec.state.s3, gs:// with spec.state.gcs, abfss:// with spec.state.azure) or mount a persistent "
                "volume (spec.volumes and spec.volumeMounts) at a parent of this path",
            )
        ]
    kind = volume_type(volume)
    if kind in NODE_LOCAL_VOLUME_TYPES and not spec.state.allowNodeLocal:
        return [
            Problem(
                where,
                f"{uri} is on a {kind} volume, which stays on one node: a driver rescheduled elsewhere would not "
                f"find its {what}; use object storage (s3a:// with spec.state.s3, gs:// with spec.state.gcs, abfss:// "
                "with spec.state.azure) or a "
                "persistentVolumeClaim, "
                "or set spec.state.allowNodeLocal: true on a single-node cluster",
            )
        ]
    return []


def _s3_problems(spec: StreamingAppSpec) -> list[Problem]:
    """The credentials mode agrees with the blocks it uses, and no driver env entry silently replaces what the
    mode sets."""
    s3 = spec.state.s3
    if s3 is None:
        return []
    where = "spec.state.s3"
    mode = s3.credentials()
    problems = []
    if s3.credentialsMode is None and s3.credentialsSecret is not None and s3.webIdentity is not None:
        problems.append(
            Problem(
                f"{where}.credentialsMode",
                "both credentialsSecret and webIdentity are set; set credentialsMode "
                "to the one to use and remove the other",
            )
        )
    elif mode == "secret" and s3.credentialsSecret is None:
        problems.append(Problem(f"{where}.credentialsSecret", "credentialsMode secret needs credentialsSecret; set it"))
    elif mode == "webIdentity" and s3.webIdentity is None:
        problems.append(
            Problem(f"{where}.webIdentity", "credentialsMode webIdentity needs webIdentity.roleArn; set it")
        )
    for block, used_by in (("credentialsSecret", "secret"), ("webIdentity", "webIdentity")):
        if getattr(s3, block) is not None and s3.credentialsMode not in (None, used_by):
            problems.append(
                Problem(
                    f"{where}.{block}",
                    f"credentialsMode {s3.credentialsMode} does not use {block}; remove it or set credentialsMode "
                    f"{used_by}",
                )
            )
    owned = S3_MODE_ENV.get(mode or "", frozenset())
    problems += [
        Problem(
            f"spec.driver.env[{index}].name",
            f"{variable.model_extra.get('name')} is set by {where}.credentialsMode {mode}; remove this entry or "
            "change the mode",
        )
        for index, variable in enumerate(spec.driver.env)
        if variable.model_extra and variable.model_extra.get("name") in owned
    ]
    return problems


def _on_scheme(spec: StreamingAppSpec, scheme: str) -> bool:
    """Whether checkpointDir or savepointDir is a `scheme`:// URI."""
    return any(
        uri and uri.lower().startswith(f"{scheme}://") for uri in (spec.state.checkpointDir, spec.state.savepointDir)
    )


def _gcs_problems(spec: StreamingAppSpec) -> list[Problem]:
    """spec.state.gcs serves a gs:// state URI, its credentials mode agrees with the block it uses, the emulator mode
    names its emulator, and spec.state.s3 next to it serves an s3a:// one."""
    gcs = spec.state.gcs
    if gcs is None:
        return []
    where = "spec.state.gcs"
    problems = []
    if not _on_scheme(spec, "gs"):
        problems.append(
            Problem(
                where,
                "neither spec.state.checkpointDir nor spec.state.savepointDir is on gs://, so nothing uses it; "
                "remove spec.state.gcs or put the state on gs://<bucket>/<path>",
            )
        )
    if spec.state.s3 is not None and not _on_scheme(spec, "s3a"):
        problems.append(
            Problem(
                "spec.state.s3",
                "both spec.state.s3 and spec.state.gcs are set, but neither spec.state.checkpointDir nor "
                "spec.state.savepointDir is on s3a://; remove spec.state.s3 or put a state URI on s3a://",
            )
        )
    mode = gcs.credentials()
    if mode == "serviceAccountKeySecret" and gcs.serviceAccountKeySecret is None:
        problems.append(
            Problem(
                f"{where}.serviceAccountKeySecret",
                "credentialsMode serviceAccountKeySecret needs serviceAccountKeySecret.name (a Secret with the "
                "service account's JSON key); set it",
            )
        )
    if gcs.serviceAccountKeySecret is not None and mode != "serviceAccountKeySecret":
        problems.append(
            Problem(
                f"{where}.serviceAccountKeySecret",
                f"credentialsMode {mode} does not use serviceAccountKeySecret; remove it or set credentialsMode "
                "serviceAccountKeySecret",
            )
        )
    if mode == "unauthenticatedEmulator" and not gcs.endpoint:
        problems.append(
            Problem(
                f"{where}.credentialsMode",
                "unauthenticatedEmulator sends no credentials and is only for a local emulator, which needs "
                f"{where}.endpoint (its URL); set it, or use default or serviceAccountKeySecret for Google Cloud "
                "Storage",
            )
        )
    return problems


def azure_accounts(spec: StreamingAppSpec) -> list[str]:
    """The account hosts of abfs:// and abfss:// checkpointDir and savepointDir (lower case, e.g.
    clicks.dfs.core.windows.net): the suffix of the ABFS connector's per-account keys."""
    found = set()
    for uri in (spec.state.checkpointDir, spec.state.savepointDir):
        scheme, _, rest = (uri or "").partition("://")
        if scheme.lower() in AZURE_SCHEMES:
            authority = rest.split("/", 1)[0]
            if "@" in authority:
                found.add(authority.rsplit("@", 1)[1].lower())
    return sorted(found)


def azure_account_owner(key: str, accounts: list[str]) -> str | None:
    """Where an ABFS option of a state account (global or per account) is set instead, or None."""
    normal = normalize_key(key)
    if not normal.startswith(AZURE_PREFIX):
        return None
    option = normal.removeprefix(AZURE_PREFIX)
    for account in accounts:
        suffix = f".{account}"
        if option.endswith(suffix) and option.removesuffix(suffix) in AZURE_OWNED_OPTIONS:
            return AZURE_OWNED_OPTIONS[option.removesuffix(suffix)]
    return None


def _azure_account_problem(key: str, accounts: list[str]) -> str | None:
    owner = azure_account_owner(key, accounts)
    if owner is None:
        return None
    return (
        f"{key} would replace {owner} for the state's storage account (spec.state.checkpointDir, savepointDir); set "
        f"{owner} instead, or remove it"
    )


def _azure_uri_problems(spec: StreamingAppSpec) -> list[Problem]:
    """abfs(s) state URIs name their container and account, and agree with the endpoint's TLS."""
    endpoint = spec.state.azure.endpoint if spec.state.azure is not None else None
    plain = bool(endpoint) and str(endpoint).startswith("http://")
    problems = []
    for field in ("checkpointDir", "savepointDir"):
        uri = getattr(spec.state, field) or ""
        scheme, _, rest = uri.partition("://")
        if scheme.lower() not in AZURE_SCHEMES:
            continue
        authority = rest.split("/", 1)[0]
        container, _, account = authority.rpartition("@")
        if not container or "." not in account:
            problems.append(
                Problem(
                    f"spec.state.{field}",
                    f"{uri} names no container and account; write it as "
                    f"{scheme}://<container>@<account>.dfs.core.windows.net/<path>",
                )
            )
        if plain and scheme.lower() == "abfss":
            problems.append(
                Problem(
                    f"spec.state.{field}",
                    "abfss:// always uses TLS, and spec.state.azure.endpoint is http://; use abfs:// for a plain "
                    "HTTP emulator, or an https:// endpoint",
                )
            )
    return problems


def _azure_problems(spec: StreamingAppSpec) -> list[Problem]:
    """spec.state.azure serves an abfs(s):// state URI, its credentials mode agrees with the blocks it uses, and
    OAuth modes go over TLS (the connector sends OAuth tokens over https only)."""
    azure = spec.state.azure
    problems = _azure_uri_problems(spec)
    if azure is None:
        return problems
    where = "spec.state.azure"
    if not any(_on_scheme(spec, scheme) for scheme in AZURE_SCHEMES):
        problems.append(
            Problem(
                where,
                "neither spec.state.checkpointDir nor spec.state.savepointDir is on abfss:// (or abfs://), so nothing "
                "uses it; remove spec.state.azure or put the state on "
                "abfss://<container>@<account>.dfs.core.windows.net/<path>",
            )
        )
    mode = azure.credentials()
    set_blocks = [b for b in ("accountKeySecret", "workloadIdentity") if getattr(azure, b) is not None]
    if azure.credentialsMode is None and len(set_blocks) > 1:
        problems.append(
            Problem(
                f"{where}.credentialsMode",
                "both accountKeySecret and workloadIdentity are set; set credentialsMode to the one to use and "
                "remove the other",
            )
        )
        return problems
    needs = {"accountKeySecret": "accountKeySecret.name (a Secret with the account key)"}
    needs["workloadIdentity"] = "workloadIdentity.clientId and tenantId"
    if mode in needs and getattr(azure, mode) is None:
        problems.append(Problem(f"{where}.{mode}", f"credentialsMode {mode} needs {needs[mode]}; set it"))
    for block in ("accountKeySecret", "workloadIdentity", "managedIdentity"):
        if getattr(azure, block) is not None and mode != block:
            problems.append(
                Problem(
                    f"{where}.{block}",
                    f"credentialsMode {mode} does not use {block}; remove it or set credentialsMode {block}",
                )
            )
    if mode != "accountKeySecret" and azure.endpoint and azure.endpoint.startswith("http://"):
        problems.append(
            Problem(
                f"{where}.endpoint",
                f"credentialsMode {mode} sends OAuth tokens, which the ABFS connector sends over TLS only; use an "
                "https:// endpoint, or accountKeySecret for a plain HTTP emulator",
            )
        )
    return problems


# --------------------------------------------------------------------------- identity, scheduling --


def _metadata_problems(values: dict[str, str], where: str, *, labels: bool) -> list[Problem]:
    problems = []
    for key in sorted(values):
        if not _QUALIFIED_NAME.match(key):
            problems.append(
                Problem(
                    f"{where}[{key!r}]",
                    "not a valid key: [prefix/]name, the name at most 63 letters, digits, '-', '_' or '.'; fix the key",
                )
            )
        elif labels and key.startswith(OWN_LABEL_PREFIXES):
            problems.append(Problem(f"{where}[{key!r}]", f"{key} is the operator's label; use another key"))
        elif labels and not _LABEL_VALUE.match(values[key]):
            problems.append(
                Problem(
                    f"{where}[{key!r}]",
                    "not a valid label value: at most 63 letters, digits, '-', '_' or '.'; fix the value",
                )
            )
    return problems


def _service_account_problems(spec: StreamingAppSpec) -> list[Problem]:
    """serviceAccount.name and serviceAccountName agree; metadata only for ServiceAccounts Headrace creates."""
    account = spec.serviceAccount
    problems = []
    if account.name and spec.serviceAccountName and account.name != spec.serviceAccountName:
        problems.append(
            Problem(
                "spec.serviceAccount.name",
                f"{account.name} differs from spec.serviceAccountName {spec.serviceAccountName}; keep one of the two",
            )
        )
    own = spec.own_service_account()
    for field in ("annotations", "labels"):
        if own is not None and getattr(account, field):
            problems.append(
                Problem(
                    f"spec.serviceAccount.{field}",
                    f"Headrace creates no ServiceAccount when the app runs as {own}; set them on {own} itself or "
                    "unset its name",
                )
            )
    problems += _metadata_problems(account.annotations, "spec.serviceAccount.annotations", labels=False)
    problems += _metadata_problems(account.labels, "spec.serviceAccount.labels", labels=True)
    return problems


def _scheduling_problems(scheduling: PodScheduling, where: str) -> list[Problem]:
    problems = _metadata_problems(scheduling.nodeSelector, f"{where}.nodeSelector", labels=True)
    for name in sorted(scheduling.extendedResources):
        at = f"{where}.extendedResources[{name!r}]"
        if name in TYPED_RESOURCES:
            problems.append(Problem(at, f"{name} is set by {where}.{TYPED_RESOURCES[name]}; use those fields"))
        elif not (_QUALIFIED_NAME.match(name) and ("/" in name or name.startswith("hugepages-"))):
            problems.append(
                Problem(at, "not an extended resource name: use domain/name (e.g. nvidia.com/gpu) or hugepages-<size>")
            )
    for index, toleration in enumerate(scheduling.tolerations):
        if toleration.operator == "Exists" and toleration.value:
            problems.append(
                Problem(f"{where}.tolerations[{index}].value", "operator Exists matches any value; remove value")
            )
        if toleration.tolerationSeconds is not None and toleration.effect != "NoExecute":
            problems.append(
                Problem(
                    f"{where}.tolerations[{index}].tolerationSeconds",
                    "only applies to effect NoExecute; set effect NoExecute or remove it",
                )
            )
    return problems


# ----------------------------------------------------------------------------------- autoscaler --


def app_cores(spec: StreamingAppSpec, executors: int) -> int:
    """Cores the app uses with this many executors (the driver's counted in), as spec.autoscaler.quota counts them."""
    return spec.driver.cores + executors * spec.executor.cores


def app_memory_mib(spec: StreamingAppSpec, executors: int) -> int:
    """MiB the app's pods request with this many executors, as spec.autoscaler.quota counts them."""
    driver = pod_memory_mib(spec.driver.memory, DRIVER_OVERHEAD_FACTOR, spec.driver.memoryOverhead)
    executor = pod_memory_mib(spec.executor.memory, EXECUTOR_OVERHEAD_FACTOR, spec.executor.memoryOverhead)
    return driver + executors * executor


def _autoscaler_problems(spec: StreamingAppSpec) -> list[Problem]:
    """The quota must leave room for minExecutors (the CRD's rules check the bounds and the band)."""
    autoscaler = spec.autoscaler
    if autoscaler.mode == "off":
        return []
    problems = []
    fewest = autoscaler.minExecutors
    cores, max_cores = app_cores(spec, fewest), autoscaler.quota.maxCores
    if max_cores is not None and cores > max_cores:
        problems.append(
            Problem(
                "spec.autoscaler.quota.maxCores",
                f"{max_cores} cores leave no room for spec.autoscaler.minExecutors: the driver's "
                f"{spec.driver.cores} plus {fewest} x {spec.executor.cores} are {cores}; raise maxCores to at least "
                f"{cores} or lower minExecutors",
            )
        )
    if autoscaler.quota.maxMemory is not None:
        memory, max_memory = app_memory_mib(spec, fewest), spark_memory_mib(autoscaler.quota.maxMemory)
        if memory > max_memory:
            problems.append(
                Problem(
                    "spec.autoscaler.quota.maxMemory",
                    f"{autoscaler.quota.maxMemory} ({max_memory} MiB) leaves no room for spec.autoscaler.minExecutors: "
                    f"the driver pod and {fewest} executor pods request {memory} MiB (heap plus overhead); raise "
                    f"maxMemory to at least {memory}m or lower minExecutors",
                )
            )
    return problems


def validate_spec(spec: StreamingAppSpec, policy: TenantPolicy = DEFAULT_POLICY) -> list[Problem]:
    """Everything wrong with a schema-valid spec, in a stable order (empty when it can be applied)."""
    return [
        *_spark_conf_problems(spec),
        *_policy_problems(spec, policy),
        *_volume_problems(spec),
        *_s3_problems(spec),
        *_gcs_problems(spec),
        *_azure_problems(spec),
        *_service_account_problems(spec),
        *_scheduling_problems(spec.driver, "spec.driver"),
        *_scheduling_problems(spec.executor, "spec.executor"),
        *_autoscaler_problems(spec),
    ]
