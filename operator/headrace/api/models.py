"""Pydantic models of the StreamingApp and StreamingSavepoint resources: the single source of truth.

Owns: field names, types, defaults, single-field validation, descriptions (which become the CRD's and
the docs' field reference), cross-field rules as CEL (`x-kubernetes-validations`), each spec field's
change kind (what a change to it requires; `headrace.core.changes` reads it), and the write-ahead log
(`PendingOperation`: one model per kind and step of operation, each with its own typed particulars).
Never: decisions, I/O, the clock.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, JsonValue, Tag, field_validator

from headrace.api.log_migration import migrate_pending_operation
from headrace.api.vocabulary import SavepointOperationKind

GROUP: Final = "headrace.dev"
VERSION: Final = "v1alpha1"
API_VERSION: Final = "headrace.dev/v1alpha1"
APP_KIND: Final = "StreamingApp"
APP_PLURAL = "streamingapps"
SAVEPOINT_KIND: Final = "StreamingSavepoint"
SAVEPOINT_PLURAL = "streamingsavepoints"


class ChangeKind(IntEnum):
    """What a change to a spec field requires; when several fields change, the largest wins."""

    IGNORE = 0  # bookkeeping only (e.g. savepoint retention)
    SCALE = 1  # executors change in place through the running driver
    UPGRADE = 2  # a new driver, applied according to upgradeMode
    REDEPLOY = 3  # a new run whose state must pass through a savepoint (state partitions)


def change(kind: ChangeKind) -> Any:
    """Field metadata declaring what a change of that field requires (default: UPGRADE)."""
    return kind


DURATION_PATTERN = r"^([0-9]+(ms|s|m|h|d))+$"
MEMORY_PATTERN = r"^[0-9]+[kKmMgGtT]?$"
URI_PATTERN = r"^[a-zA-Z][a-zA-Z0-9+.-]*://.+$"
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
Duration = Annotated[str, Field(pattern=DURATION_PATTERN, examples=["30s", "5m", "1h30m"])]


class Model(BaseModel):
    """Base: camelCase names as in Kubernetes, unknown fields refused, values validated on assignment."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, validate_assignment=True)


class FreeForm(BaseModel):
    """A Kubernetes object we pass through untouched (pod templates, volumes, env vars)."""

    model_config = ConfigDict(extra="allow")


# --------------------------------------------------------------------------------------- spec --


class Application(Model):
    """The user's PySpark script, run unmodified by the Headrace runtime in the driver."""

    file: Annotated[
        str,
        Field(
            pattern=r"^(local://|/).+\.py$",
            description="The PySpark script inside the image, as local:///path/app.py or /path/app.py.",
        ),
    ]
    args: list[str] = Field(default_factory=list, description="Arguments passed to the script.")
    pyFiles: list[str] = Field(default_factory=list, description="Extra Python files or archives for the driver.")
    packages: list[str] = Field(
        default_factory=list,
        description="Extra Maven coordinates (group:artifact:version) resolved at start (spark.jars.packages).",
    )


QUANTITY_PATTERN = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$"
Quantity = Annotated[str, Field(pattern=QUANTITY_PATTERN, examples=["10Gi", "1", "500m"])]


class Toleration(Model):
    """A core/v1 Toleration: lets the pod schedule onto nodes with a matching taint."""

    key: Annotated[str | None, Field(description="The taint key; empty with operator Exists matches every taint.")] = (
        None
    )
    operator: Annotated[Literal["Exists", "Equal"], Field(description="Exists or Equal (to `value`).")] = "Equal"
    value: Annotated[str | None, Field(description="The taint value for operator Equal.")] = None
    effect: Annotated[
        Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None,
        Field(description="The taint effect to match; unset matches every effect."),
    ] = None
    tolerationSeconds: Annotated[
        int | None, Field(description="With effect NoExecute: how long the pod stays bound after the taint appears.")
    ] = None


class PodScheduling(Model):
    """Typed scheduling and resources of one kind of pod (driver or executors). Rendered into the pod; a
    podTemplate still merges over it, the typed fields winning on conflict."""

    memoryOverhead: Annotated[
        str | None,
        Field(
            pattern=MEMORY_PATTERN,
            description="Non-heap memory of the container (Python, off-heap, RocksDB), e.g. 1g; the pod's memory "
            "request and limit are memory + memoryOverhead. Unset: 40% of memory, at least 384m.",
        ),
    ] = None
    ephemeralStorage: Annotated[
        Quantity | None,
        Field(
            description="Local disk of the pod (its scratch directory holds Spark's shuffle and spill files), as "
            "a Kubernetes quantity (e.g. 20Gi), requested and set as the limit."
        ),
    ] = None
    extendedResources: dict[str, Quantity] = Field(
        default_factory=dict,
        description='Extended resources of the container, e.g. {nvidia.com/gpu: "1"}: requested and set as the '
        "limit (Kubernetes requires both equal). cpu, memory and ephemeral-storage have their own fields.",
    )
    nodeSelector: dict[str, str] = Field(
        default_factory=dict, description="Node labels the pod requires (core/v1 PodSpec.nodeSelector)."
    )
    tolerations: list[Toleration] = Field(default_factory=list, description="Taints the pod tolerates.")
    affinity: FreeForm | None = Field(
        default=None, description="Node and pod (anti-)affinity, a core/v1 Affinity object (PodSpec.affinity)."
    )
    topologySpreadConstraints: list[FreeForm] = Field(
        default_factory=list,
        description="core/v1 TopologySpreadConstraint objects: how the pods spread over zones or nodes (the "
        "labelSelector usually names headrace.dev/app and headrace.dev/role).",
    )
    priorityClassName: Annotated[
        str | None, Field(pattern=DNS_SUBDOMAIN_PATTERN, description="The pod's PriorityClass.")
    ] = None


class DriverSpec(PodScheduling):
    """Resources and pod customisation of the driver pod."""

    cores: Annotated[int, Field(ge=1, le=64, description="Spark driver cores.")] = 1
    memory: Annotated[str, Field(pattern=MEMORY_PATTERN, description="Driver JVM heap, e.g. 2g.")] = "1g"
    coreRequest: Annotated[
        str | None,
        Field(description="Kubernetes CPU request of the driver pod (e.g. 500m); defaults to cores."),
    ] = None
    env: list[FreeForm] = Field(default_factory=list, description="Extra environment variables (EnvVar objects).")
    podTemplate: FreeForm = Field(
        default_factory=FreeForm, description="A Pod manifest merged into the driver pod (labels, tolerations...)."
    )


class ExecutorSpec(PodScheduling):
    """Spark executors: the task slots of the job (Flink's TaskManagers)."""

    instances: Annotated[
        int,
        Field(ge=0, le=1000, description="Number of executors; the scale subresource (kubectl scale) sets it."),
        change(ChangeKind.SCALE),
    ] = 1
    cores: Annotated[int, Field(ge=1, le=64, description="Cores per executor.")] = 1
    memory: Annotated[str, Field(pattern=MEMORY_PATTERN, description="Heap per executor, e.g. 2g.")] = "1g"
    coreRequest: Annotated[
        str | None,
        Field(description="Kubernetes CPU request of each executor pod (e.g. 500m); defaults to cores."),
    ] = None
    podTemplate: FreeForm = Field(
        default_factory=FreeForm, description="A Pod manifest Spark uses as the executor pod template."
    )


SECRET_KEY_PATTERN = r"^[-._a-zA-Z0-9]{1,253}$"


class SecretKeyRef(Model):
    """One key of a Secret in the app's namespace (as an EnvVar's `valueFrom.secretKeyRef`)."""

    name: Annotated[str, Field(pattern=DNS_SUBDOMAIN_PATTERN, description="Name of the Secret.")]
    key: Annotated[str, Field(pattern=SECRET_KEY_PATTERN, description="Key in the Secret.")]


class S3CredentialsSecret(Model):
    """A Secret in the app's namespace holding an S3 access key pair. The operator passes both keys to the
    driver and executor containers as AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (secretKeyRef), which the
    S3A connector's default credential chain reads; the values never enter a ConfigMap, Spark setting or status."""

    name: Annotated[str, Field(pattern=DNS_SUBDOMAIN_PATTERN, description="Name of the Secret.")]
    accessKeyIdKey: Annotated[
        str, Field(pattern=SECRET_KEY_PATTERN, description="Key of the access key id in the Secret.")
    ] = "accessKeyId"
    secretAccessKeyKey: Annotated[
        str, Field(pattern=SECRET_KEY_PATTERN, description="Key of the secret access key in the Secret.")
    ] = "secretAccessKey"


CredentialsMode = Literal["secret", "webIdentity", "default"]


class WebIdentity(Model):
    """A role assumed with the pod's own ServiceAccount token (STS AssumeRoleWithWebIdentity). The operator projects
    a token for `audience` into driver and executors and points the AWS SDK at it (AWS_ROLE_ARN,
    AWS_WEB_IDENTITY_TOKEN_FILE); the role's trust policy must accept the cluster's ServiceAccount issuer and the
    pods' ServiceAccounts as subjects."""

    roleArn: Annotated[
        str,
        Field(
            pattern=r"^arn:[a-z0-9-]+:iam:[^:\s]*:[^:\s]*:role/\S+$",
            description="The role to assume, e.g. arn:aws:iam::123456789012:role/clicks.",
        ),
    ]
    audience: Annotated[
        str, Field(min_length=1, max_length=256, description="Audience of the projected token (the STS's client id).")
    ] = "sts.amazonaws.com"
    expirationSeconds: Annotated[
        int, Field(ge=600, le=86400, description="Lifetime of the projected token; the kubelet renews it at 80%.")
    ] = 3600
    stsEndpoint: Annotated[
        str | None,
        Field(
            pattern=r"^https?://[^\s/]+(/.*)?$",
            description="STS endpoint URL (AWS_ENDPOINT_URL_STS), for an STS other than AWS's regional one "
            "(e.g. MinIO's). Unset: AWS STS of spec.state.s3.region.",
        ),
    ] = None


class S3Spec(Model):
    """The S3-compatible object store behind s3a:// checkpoint and savepoint URIs (MinIO, Ceph, AWS S3...)."""

    endpoint: Annotated[
        str | None,
        Field(
            pattern=r"^https?://[^\s/]+(/.*)?$",
            description="Endpoint URL, e.g. http://s3.s3.svc:9000 (http:// turns TLS off); unset means AWS S3.",
        ),
    ] = None
    region: Annotated[str, Field(pattern=r"^[a-z0-9-]{1,64}$", description="Region the requests are signed for.")] = (
        "us-east-1"
    )
    pathStyleAccess: Annotated[
        bool,
        Field(
            description="Address buckets as <endpoint>/<bucket> instead of <bucket>.<endpoint> (most S3 servers "
            "other than AWS need true)."
        ),
    ] = False
    credentialsMode: Annotated[
        CredentialsMode | None,
        Field(
            description="How driver and executors get credentials for this store. secret: the access key pair of "
            "credentialsSecret. webIdentity: the pod's ServiceAccount token, projected by the operator and exchanged "
            "through STS AssumeRoleWithWebIdentity for the role in `webIdentity` (IRSA without its webhook, or any "
            "OpenID-federated STS). default: the AWS SDK's default chain (environment, a web identity a platform "
            "webhook injected, EKS Pod Identity, the instance role). Unset: secret when credentialsSecret is set, "
            "webIdentity when webIdentity is, otherwise the S3A connector's own chain."
        ),
    ] = None
    credentialsSecret: Annotated[
        S3CredentialsSecret | None,
        Field(description="Secret with the access key pair (credentialsMode secret)."),
    ] = None
    webIdentity: Annotated[
        WebIdentity | None,
        Field(description="The role and token of credentialsMode webIdentity."),
    ] = None

    def credentials(self) -> CredentialsMode | None:
        """credentialsMode, or what the blocks set imply when it is unset (None: the S3A connector's own chain)."""
        if self.credentialsMode is not None:
            return self.credentialsMode
        if self.credentialsSecret is not None:
            return "secret"
        return "webIdentity" if self.webIdentity is not None else None


class GcsKeySecret(Model):
    """A Secret in the app's namespace holding a Google Cloud service account's JSON key. The operator mounts that
    one key as a read-only file in the driver and executor containers and points the Cloud Storage connector at the
    file; the key never enters a ConfigMap, Spark setting, environment variable or status."""

    name: Annotated[str, Field(pattern=DNS_SUBDOMAIN_PATTERN, description="Name of the Secret.")]
    key: Annotated[str, Field(pattern=SECRET_KEY_PATTERN, description="Key of the JSON key file in the Secret.")] = (
        "key.json"
    )


GcsCredentialsMode = Literal["serviceAccountKeySecret", "default", "unauthenticatedEmulator"]


class GcsSpec(Model):
    """Google Cloud Storage behind gs:// checkpoint and savepoint URIs, through Google's Cloud Storage connector for
    Hadoop (in the Spark image)."""

    endpoint: Annotated[
        str | None,
        Field(
            pattern=r"^https?://[^\s/]+(/[^\s]*)?$",
            max_length=2048,
            description="Storage root URL (the connector's fs.gs.storage.root.url), for a private endpoint or an "
            "emulator, e.g. http://gcs.gcs.svc:4443/ (http:// turns TLS off). Unset: https://storage.googleapis.com/.",
        ),
    ] = None
    projectId: Annotated[
        str | None,
        Field(
            pattern=r"^([a-z0-9][-a-z0-9.]{0,61}[a-z0-9]:)?[a-z][-a-z0-9]{4,28}[a-z0-9]$",
            description="Google Cloud project (fs.gs.project.id), needed only to list or create buckets.",
        ),
    ] = None
    credentialsMode: Annotated[
        GcsCredentialsMode | None,
        Field(
            description="How driver and executors get credentials for this store. serviceAccountKeySecret: the "
            "service account JSON key of `serviceAccountKeySecret`, mounted as a file. default: Application Default "
            "Credentials (GOOGLE_APPLICATION_CREDENTIALS, else the metadata server: GKE Workload Identity, the node's "
            "service account). unauthenticatedEmulator: no credentials at all, for a local emulator only (needs "
            "`endpoint`). Unset: serviceAccountKeySecret when that block is set, otherwise default."
        ),
    ] = None
    serviceAccountKeySecret: Annotated[
        GcsKeySecret | None,
        Field(description="Secret with the service account JSON key (credentialsMode serviceAccountKeySecret)."),
    ] = None

    def credentials(self) -> GcsCredentialsMode:
        """credentialsMode, or what the blocks set imply when it is unset."""
        if self.credentialsMode is not None:
            return self.credentialsMode
        return "serviceAccountKeySecret" if self.serviceAccountKeySecret is not None else "default"


class AzureKeySecret(Model):
    """A Secret in the app's namespace holding a storage account's access key (as the portal shows it, base64). The
    operator mounts that one key as a read-only file in the driver and executor containers, and the ABFS connector
    reads the file through its shell key provider; the key never enters a ConfigMap, Spark setting, environment
    variable or status."""

    name: Annotated[str, Field(pattern=DNS_SUBDOMAIN_PATTERN, description="Name of the Secret.")]
    key: Annotated[str, Field(pattern=SECRET_KEY_PATTERN, description="Key of the account key in the Secret.")] = (
        "accountKey"
    )


_ENTRA_ID = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
_AUTHORITY_PATTERN = r"^https?://[^\s/]+/$"


class AzureWorkloadIdentity(Model):
    """AKS Workload Identity without its webhook: the operator projects a ServiceAccount token for `audience` into
    driver and executors, and the ABFS connector's WorkloadIdentityTokenProvider exchanges it at Entra ID for a token
    of the application (or user-assigned managed identity) `clientId`, whose federated credential must name the
    cluster's OIDC issuer and the pods' ServiceAccounts as subjects."""

    clientId: Annotated[
        str, Field(pattern=_ENTRA_ID, description="Client id of the Entra ID application or managed identity.")
    ]
    tenantId: Annotated[str, Field(pattern=_ENTRA_ID, description="Entra ID tenant (directory) id.")]
    audience: Annotated[str, Field(min_length=1, max_length=256, description="Audience of the projected token.")] = (
        "api://AzureADTokenExchange"
    )
    expirationSeconds: Annotated[
        int, Field(ge=600, le=86400, description="Lifetime of the projected token; the kubelet renews it at 80%.")
    ] = 3600
    authority: Annotated[
        str,
        Field(
            pattern=_AUTHORITY_PATTERN,
            description="Entra ID authority host (the connector's fs.azure.account.oauth2.msi.authority), e.g. "
            "https://login.microsoftonline.us/ for Azure Government.",
        ),
    ] = "https://login.microsoftonline.com/"


class AzureManagedIdentity(Model):
    """The managed identity of the node (the VM scale set), through the instance metadata service."""

    clientId: Annotated[
        str | None,
        Field(
            pattern=_ENTRA_ID,
            description="Client id of a user-assigned managed identity; unset: the only identity of the node.",
        ),
    ] = None


AzureCredentialsMode = Literal["accountKeySecret", "workloadIdentity", "managedIdentity"]


class AzureSpec(Model):
    """Azure Data Lake Storage Gen2 (or Blob Storage) behind abfss:// checkpoint and savepoint URIs, through Hadoop's
    ABFS connector (hadoop-azure, in the Spark image). Every setting is rendered for the accounts of the state
    URIs only (abfss://<container>@<account>.dfs.core.windows.net/<path>)."""

    endpoint: Annotated[
        str | None,
        Field(
            pattern=r"^https?://[^\s/:]+:[0-9]{1,5}/?$",
            description="host:port of an emulator (fs.azure.abfs.endpoint), e.g. http://azurite.azurite.svc:10000 "
            "(Azurite's Blob endpoint; http:// turns TLS off, then the state URIs are abfs://). Requests then go to "
            "<endpoint>/<account>/<container>. Unset: the account's own host.",
        ),
    ] = None
    namespace: Annotated[
        Literal["hierarchical", "flat"],
        Field(
            description="hierarchical: an account with the hierarchical namespace (ADLS Gen2), through the DFS "
            "endpoint; flat: a Blob Storage account without it (and Azurite), through the Blob endpoint, whose "
            "renames are server-side copies."
        ),
    ] = "hierarchical"
    credentialsMode: Annotated[
        AzureCredentialsMode | None,
        Field(
            description="How driver and executors get credentials for the account. accountKeySecret: the account "
            "key of `accountKeySecret`, mounted as a file (Shared Key). workloadIdentity: the pods' ServiceAccount "
            "token, projected by the operator and exchanged at Entra ID (AKS Workload Identity). managedIdentity: "
            "the node's managed identity through the instance metadata service. Unset: accountKeySecret or "
            "workloadIdentity when that block is set, otherwise managedIdentity."
        ),
    ] = None
    accountKeySecret: Annotated[
        AzureKeySecret | None,
        Field(description="Secret with the storage account key (credentialsMode accountKeySecret)."),
    ] = None
    workloadIdentity: Annotated[
        AzureWorkloadIdentity | None,
        Field(description="The identity and token of credentialsMode workloadIdentity."),
    ] = None
    managedIdentity: Annotated[
        AzureManagedIdentity | None,
        Field(description="Which managed identity credentialsMode managedIdentity uses."),
    ] = None

    def credentials(self) -> AzureCredentialsMode:
        """credentialsMode, or what the blocks set imply when it is unset."""
        if self.credentialsMode is not None:
            return self.credentialsMode
        if self.accountKeySecret is not None:
            return "accountKeySecret"
        return "workloadIdentity" if self.workloadIdentity is not None else "managedIdentity"


class StateSpec(Model):
    """Where checkpoints and savepoints live and how state is stored."""

    checkpointDir: Annotated[
        str,
        Field(
            pattern=URI_PATTERN,
            description="Root of the checkpoints (any Hadoop URI: s3a:// with spec.state.s3, gs:// with "
            "spec.state.gcs, abfss:// with spec.state.azure, hdfs://, "
            "file:///mnt/state on a persistent volume). Each run gets <checkpointDir>/<namespace>/<app>/<run>.",
        ),
    ]
    savepointDir: Annotated[
        str | None,
        Field(pattern=URI_PATTERN, description="Root of savepoints; required for upgradeMode savepoint."),
        change(ChangeKind.IGNORE),
    ] = None
    backend: Annotated[
        Literal["rocksdb", "hdfs"],
        Field(description="State store: rocksdb (with changelog checkpointing) or hdfs (in-memory, heap)."),
        change(ChangeKind.REDEPLOY),
    ] = "rocksdb"
    partitions: Annotated[
        int,
        Field(
            ge=1,
            le=10000,
            description="State partitions (spark.sql.shuffle.partitions), pinned by the checkpoint; changing it "
            "goes through a savepoint and an offline repartition.",
        ),
        change(ChangeKind.REDEPLOY),
    ] = 8
    s3: Annotated[
        S3Spec | None,
        Field(description="Object store settings and credentials for s3a:// checkpointDir and savepointDir."),
    ] = None
    gcs: Annotated[
        GcsSpec | None,
        Field(
            description="Google Cloud Storage settings and credentials for gs:// checkpointDir and savepointDir. "
            "Unset with a gs:// URI: Application Default Credentials (as credentialsMode default)."
        ),
    ] = None
    azure: Annotated[
        AzureSpec | None,
        Field(
            description="Azure Data Lake Storage settings and credentials for abfss:// (abfs://) checkpointDir and "
            "savepointDir. Unset with such a URI: the node's managed identity, hierarchical namespace."
        ),
    ] = None
    allowNodeLocal: Annotated[
        bool,
        Field(
            description="Single node only: allow file:// checkpoints or savepoints on a node-local volume "
            "(hostPath, emptyDir), which a driver rescheduled to another node cannot find. Refused otherwise."
        ),
        change(ChangeKind.IGNORE),
    ] = False


class JobSpec(Model):
    """The desired state of the job."""

    state: Annotated[
        Literal["running", "suspended"],
        Field(description="running, or suspended: take a savepoint and remove the driver; resume restores it."),
    ] = "running"


class Backoff(Model):
    """Exponential backoff between restarts."""

    initialSeconds: Annotated[
        float,
        Field(ge=0, le=3600, description="Delay before a second restart in a row (a first restart is immediate)."),
    ] = 1.0
    maxSeconds: Annotated[float, Field(ge=0, le=86400, description="Upper bound of the delay.")] = 300.0


class RestartPolicy(Model):
    """How failed drivers are replaced (from the latest checkpoint of the current run)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.backoff) || !has(self.backoff.maxSeconds) || !has(self.backoff.initialSeconds)"
                    " || self.backoff.maxSeconds >= self.backoff.initialSeconds",
                    "message": "restartPolicy.backoff.maxSeconds must be at least backoff.initialSeconds",
                    "fieldPath": ".backoff.maxSeconds",
                }
            ]
        }
    )

    type: Annotated[
        Literal["Always", "OnFailure", "Never"],
        Field(
            description="Always: restart after any exit; OnFailure: only after a failure; Never: go Failed at "
            "the first failure."
        ),
        change(ChangeKind.IGNORE),
    ] = "Always"
    backoff: Annotated[Backoff, change(ChangeKind.IGNORE)] = Field(default_factory=Backoff)
    maxRestartsInWindow: Annotated[
        int,
        Field(
            ge=0,
            le=10000,
            description="Failures allowed within `window`; beyond them the restarts slow to one every "
            "backoff.maxSeconds (or the app goes Failed with whenExhausted Fail).",
        ),
        change(ChangeKind.IGNORE),
    ] = 10
    whenExhausted: Annotated[
        Literal["KeepRetrying", "Fail"],
        Field(
            description="What more than maxRestartsInWindow failures within window do. KeepRetrying: restart "
            "every backoff.maxSeconds until a driver runs again (Degraded RestartsExhausted and "
            "status.restarts.nextRetryAt say why and when), so an app recovers by itself once an outage "
            "(object storage, Kafka) ends. Fail: the app goes Failed until its spec changes."
        ),
        change(ChangeKind.IGNORE),
    ] = "KeepRetrying"
    window: Annotated[
        Duration, Field(description="The sliding window for maxRestartsInWindow."), change(ChangeKind.IGNORE)
    ] = "30m"
    healthyAfter: Annotated[
        Duration, Field(description="A driver running this long resets the backoff."), change(ChangeKind.IGNORE)
    ] = "2m"
    startTimeout: Annotated[
        Duration,
        Field(
            description="A driver pod that has not started this long after it was created (unschedulable, image "
            "not pulled) counts as a failed attempt: it is deleted and replaced after the backoff, or rolled back "
            "when rollback is enabled and the spec changed."
        ),
        change(ChangeKind.IGNORE),
    ] = "10m"
    heartbeatTimeout: Annotated[
        Duration,
        Field(
            description="A running driver whose control endpoint does not answer the operator's status calls for "
            "this long (hung, frozen, partitioned away) counts as failed (DriverUnresponsive) and is replaced."
        ),
        change(ChangeKind.IGNORE),
    ] = "2m"
    progressTimeout: Annotated[
        Duration | None,
        Field(
            description="A driver that commits no batch for this long while its sources report waiting input "
            "(e.g. Kafka lag) counts as failed and is restarted."
        ),
        change(ChangeKind.IGNORE),
    ] = None
    startupFailureThreshold: Annotated[
        int,
        Field(
            ge=1,
            le=1000,
            description="Attempts in a row that fail before their first committed batch after which the app "
            "reports Degraded StartupFailing with the last error (restarts go on with the backoff). A failure no "
            "restart can heal (a Python SyntaxError or ImportError, a usage error, a Spark setting Spark refuses) "
            "reports it at the first such failure.",
        ),
        change(ChangeKind.IGNORE),
    ] = 3


class SavepointPolicy(Model):
    """Savepoint schedule, retention and one-off triggers."""

    periodic: Annotated[
        Duration | None, Field(description="Take a savepoint this often while running."), change(ChangeKind.IGNORE)
    ] = None
    retain: Annotated[
        int,
        Field(ge=1, le=1000, description="Completed savepoints to keep (older ones are deleted)."),
        change(ChangeKind.IGNORE),
    ] = 5
    triggerNonce: Annotated[
        int, Field(ge=0, description="Change it to take one savepoint now."), change(ChangeKind.IGNORE)
    ] = 0
    disposeOnDelete: Annotated[
        bool,
        Field(
            description="Savepoints the operator takes from now on (periodic, upgrade, suspend, triggerNonce) get "
            "spec.disposeOnDelete true: deleting their StreamingSavepoint, by hand or by `retain`, deletes their "
            "files through the running driver."
        ),
        change(ChangeKind.IGNORE),
    ] = False
    onDeletion: Annotated[
        bool,
        Field(
            description="Deleting the app first stops its running driver with a final savepoint (a "
            "StreamingSavepoint with reason deletion, which outlives the app: restore it with restoreFrom). The app "
            "carries the finalizer headrace.dev/final-savepoint meanwhile, released when the savepoint is taken, "
            "fails, or cannot be taken (no running driver), and at the latest after onDeletionTimeout. Needs "
            "state.savepointDir."
        ),
        change(ChangeKind.IGNORE),
    ] = False
    onDeletionTimeout: Annotated[
        Duration,
        Field(
            description="How long a deletion waits for its final savepoint (spec.savepoints.onDeletion) before the "
            "app goes without one (a Warning event FinalSavepointTimedOut says so)."
        ),
        change(ChangeKind.IGNORE),
    ] = "5m"


class RestoreFrom(Model):
    """Initial state of the first run, and of every redeploy (a change of spec.redeployNonce)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "has(self.savepoint) != has(self.path)",
                    "message": "restoreFrom needs exactly one of savepoint (a StreamingSavepoint name) or path",
                }
            ]
        }
    )

    savepoint: Annotated[str | None, Field(description="Name of a StreamingSavepoint in the app's namespace.")] = None
    path: Annotated[str | None, Field(pattern=URI_PATTERN, description="A savepoint directory URI.")] = None
    allowRepartition: Annotated[
        bool, Field(description="Allow restoring into a different number of state partitions (offline repartition).")
    ] = False


class RollbackPolicy(Model):
    """Opt-in rollback of upgrades that do not become stable."""

    enabled: Annotated[bool, Field(description="Roll back to the last stable spec when an upgrade fails.")] = False
    stableAfter: Annotated[Duration, Field(description="How long a new spec must run before it counts as stable.")] = (
        "2m"
    )


class StandbySpec(Model):
    """Opt-in warm standby driver: a second driver (and its executors) kept warm to take over in seconds."""

    enabled: Annotated[
        bool,
        Field(
            description="Keep a warm standby driver beside the running one (continuous mode): it runs the script up "
            "to its first query start and is promoted, once the failed driver is gone, when the running one is lost. "
            "Costs a second driver and its executors."
        ),
    ] = False
    prewarmUpgrades: Annotated[
        bool | None,
        Field(
            description="Start the new driver of an upgradeMode savepoint or last-state upgrade first, as a warm "
            "standby, while the running one keeps processing; the running driver is stopped (with its savepoint) only "
            "once the new one waits at its first query start, which then restores and starts in seconds. A new driver "
            "that fails before that refuses the upgrade and the running one keeps going. Unset: on when "
            "standby.enabled (the pre-warmed driver takes the standby's place, no extra pods), off otherwise (it "
            "briefly runs a second driver and its executors)."
        ),
    ] = None
    warmup: Annotated[
        bool,
        Field(
            description="Before a standby or pre-warmed driver waits at its first query start, it runs a short "
            "synthetic stateful query (a windowed count over Spark's rate-micro-batch source, in the app's state "
            "store, into a scratch directory of its pods, for 3 micro-batches or at most 60 s, cut short by a "
            "promotion) so that its promoted first batch runs on warm JVMs; it never touches the app's checkpoint, "
            "sources or outputs. false: wait without it."
        ),
    ] = True


class LocalObjectReference(Model):
    """A reference to an object of the app's namespace by name."""

    name: Annotated[str, Field(pattern=DNS_SUBDOMAIN_PATTERN, description="Name of the object.")]


class ServiceAccountSpec(Model):
    """Who driver and executors are to the cluster and to the cloud (workload identity, docs/cloud.md)."""

    name: Annotated[
        str | None,
        Field(
            pattern=DNS_SUBDOMAIN_PATTERN,
            description="Run driver and executors under this existing ServiceAccount of the app's namespace instead "
            "of the two Headrace creates. The operator binds it to the driver's Role; executor pods never mount an "
            "API token, so they get none of its rights. A cluster admin allows it (tenantPolicy.serviceAccounts).",
        ),
    ] = None
    annotations: dict[str, str] = Field(
        default_factory=dict,
        description="Annotations of the ServiceAccounts Headrace creates, the driver's (<app>-spark) and the "
        "executors' (<app>-executor): e.g. eks.amazonaws.com/role-arn (IRSA), iam.gke.io/gcp-service-account "
        "(GKE Workload Identity), azure.workload.identity/client-id (AKS Workload Identity).",
    )
    labels: dict[str, str] = Field(
        default_factory=dict, description="Labels of the ServiceAccounts Headrace creates (keys of its own refused)."
    )


class AutoscalerQuota(Model):
    """Upper bounds on what the autoscaler may give the app, whatever its load (a namespace's budget)."""

    maxCores: Annotated[
        int | None,
        Field(
            ge=1,
            le=100000,
            description="Most cores the app may use: spec.driver.cores plus executors times spec.executor.cores. The "
            "autoscaler never scales beyond it (it says so: QuotaReached); unset: no bound but maxExecutors.",
        ),
    ] = None
    maxMemory: Annotated[
        str | None,
        Field(
            pattern=MEMORY_PATTERN,
            description="Most memory the app's pods may request, e.g. 64g: the driver pod plus every executor pod, "
            "each its memory plus its memoryOverhead (as the pods request it). The autoscaler never scales "
            "beyond it; unset: no bound but maxExecutors.",
        ),
    ] = None


class AutoscalerSpec(Model):
    """Executors that follow the load: rescaled in place (no restart) from the app's own per-batch signals."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "(has(self.minExecutors) ? self.minExecutors : 1)"
                    " <= (has(self.maxExecutors) ? self.maxExecutors : 10)",
                    "message": "autoscaler.minExecutors must be at most autoscaler.maxExecutors: lower minExecutors "
                    "or raise maxExecutors",
                    "fieldPath": ".minExecutors",
                },
                {
                    "rule": "(has(self.targetUtilization) ? self.targetUtilization : 0.7)"
                    " > (has(self.utilizationBoundary) ? self.utilizationBoundary : 0.2)",
                    "message": "autoscaler.utilizationBoundary must be below autoscaler.targetUtilization (the band "
                    "targetUtilization +/- utilizationBoundary must stay above 0): lower the boundary",
                    "fieldPath": ".utilizationBoundary",
                },
            ]
        }
    )

    mode: Annotated[
        Literal["off", "passive", "active"],
        Field(
            description="off: executors stay at spec.executor.instances. passive: the autoscaler decides but only "
            "recommends (status, an Event and a metric say what it would do and why). active: it rescales the "
            "executors in place through the running driver, between minExecutors and maxExecutors, ignoring "
            "spec.executor.instances while it runs."
        ),
    ] = "off"
    minExecutors: Annotated[
        int,
        Field(ge=1, le=1000, description="Fewest executors the autoscaler scales down to."),
    ] = 1
    maxExecutors: Annotated[
        int,
        Field(
            ge=1,
            le=1000,
            description="Most executors the autoscaler scales up to (also bounded by quota and by what more "
            "executors can use: the sources' partitions, spec.state.partitions).",
        ),
    ] = 10
    targetUtilization: Annotated[
        float,
        Field(
            gt=0,
            le=1,
            description="The share of its capacity the app should be busy with its input: the autoscaler sizes the "
            "executors so that input rate / processing capacity comes out at this value (the rest is headroom for "
            "bursts). Capacity is measured from the app's own batches at its current size.",
        ),
    ] = 0.7
    utilizationBoundary: Annotated[
        float,
        Field(
            ge=0,
            lt=1,
            description="No action while the utilization stays within targetUtilization +/- this value (the backlog "
            "to catch up counted in); outside it, the autoscaler computes a new size.",
        ),
    ] = 0.2
    metricsWindow: Annotated[
        Duration,
        Field(
            description="Decisions average the app's batches over this window, and none is taken before it holds "
            "this much of them at the current size (longer: steadier, slower to follow the load)."
        ),
    ] = "3m"
    stabilizationInterval: Annotated[
        Duration,
        Field(
            description="After the driver starts or the executors change, batches of this long are left out of "
            "the window (new executors warm up: JIT, connections, caches)."
        ),
    ] = "1m"
    scaleDownDelay: Annotated[
        Duration,
        Field(
            description="A scale-down is taken only once the app has wanted fewer executors for this long without "
            "a break, to the largest size it wanted meanwhile (load that comes back cancels it)."
        ),
    ] = "10m"
    catchUpDuration: Annotated[
        Duration,
        Field(
            description="Within how long a backlog (Kafka: latest minus committed offsets) should be processed: "
            "backlog / catchUpDuration is added to the capacity needed, with the input arriving during the "
            "rescale itself (rescaleTime). 0s: the backlog is not counted."
        ),
    ] = "5m"
    rescaleTime: Annotated[
        Duration,
        Field(
            description="How long a rescale takes until the new executors process (pod start and registration); "
            "the input arriving meanwhile is counted in the backlog to catch up."
        ),
    ] = "30s"
    maxActionsPerHour: Annotated[
        int,
        Field(
            ge=1,
            le=60,
            description="At most this many rescales (and repartitions) in any hour; more are refused "
            "(RateLimited) until the oldest leaves the hour.",
        ),
    ] = 6
    effectivenessThreshold: Annotated[
        float,
        Field(
            ge=0,
            le=1,
            description="A scale-up that raised the processing capacity by less than this share of what it was "
            "expected to add (while a backlog remained) is ineffective: it is undone and no scale-up beyond the "
            "earlier size is tried again until the spec changes. 0 turns the detection off.",
        ),
    ] = 0.1
    allowRepartition: Annotated[
        bool,
        Field(
            description="Reserved: when the executors needed exceed what spec.state.partitions lets them use, "
            "active mode is to change the state partitions itself (a new run through a savepoint and an offline "
            "repartition). This version only recommends the partition count (status and Event), either way."
        ),
    ] = False
    quota: Annotated[
        AutoscalerQuota,
        Field(description="Bounds on the app's cores and memory the autoscaler never exceeds."),
    ] = Field(default_factory=AutoscalerQuota)


STREAMING_APP_SPEC_RULES: list[JsonValue] = [
    {
        "rule": "!has(self.upgradeMode) || self.upgradeMode != 'savepoint' || has(self.state.savepointDir)",
        "message": "spec.state.savepointDir is required when spec.upgradeMode is savepoint: set it to a directory URI "
        "such as s3a://bucket/savepoints, or choose upgradeMode last-state",
        "fieldPath": ".state.savepointDir",
        "reason": "FieldValueRequired",
    },
    {
        "rule": "!has(self.job) || !has(self.job.state) || self.job.state != 'suspended'"
        " || has(self.state.savepointDir)",
        "message": "spec.state.savepointDir is required to suspend a job (suspending takes a savepoint)",
        "fieldPath": ".state.savepointDir",
        "reason": "FieldValueRequired",
    },
    {
        "rule": "!has(self.savepoints) || !has(self.savepoints.periodic) || has(self.state.savepointDir)",
        "message": "spec.state.savepointDir is required for periodic savepoints",
        "fieldPath": ".state.savepointDir",
        "reason": "FieldValueRequired",
    },
]


class StreamingAppSpec(Model):
    """The desired streaming job."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": STREAMING_APP_SPEC_RULES})

    image: Annotated[str, Field(min_length=1, description="Container image with Spark, the runtime and the script.")]
    imagePullPolicy: Annotated[Literal["Always", "IfNotPresent", "Never"], Field(description="Image pull policy.")] = (
        "IfNotPresent"
    )
    application: Application
    mode: Annotated[
        Literal["continuous", "bounded"],
        Field(description="continuous, or bounded: run every query with Trigger.AvailableNow and complete."),
    ] = "continuous"
    sparkConf: dict[str, str] = Field(
        default_factory=dict,
        description="Extra Spark configuration. Keys the operator owns (spark.master, checkpoint location, ...) are "
        "refused with a message naming the field that sets them. Values are stored in a ConfigMap and in the "
        "status: settings that carry secrets (passwords, tokens, keys) are refused here; use sparkConfFromSecrets.",
    )
    sparkConfFromSecrets: dict[str, SecretKeyRef] = Field(
        default_factory=dict,
        description="Spark settings whose values come from Secrets of the app's namespace: Spark key -> "
        "{name, key} of the Secret. The driver gets each value as a secretKeyRef environment variable and the "
        "runtime adds it to the SparkConf (executors receive it from the driver over Spark's authenticated, "
        "encrypted RPC); the value never enters a ConfigMap, the status or an Event. The rules of sparkConf "
        "keys apply.",
    )
    driver: DriverSpec = Field(default_factory=DriverSpec)
    executor: ExecutorSpec = Field(default_factory=ExecutorSpec)
    state: StateSpec
    volumes: list[FreeForm] = Field(
        default_factory=list, description="Pod volumes (e.g. a PVC for file:// checkpoints) for driver and executors."
    )
    volumeMounts: list[FreeForm] = Field(
        default_factory=list, description="Mounts of `volumes` in the driver and executor containers."
    )
    upgradeMode: Annotated[
        Literal["stateless", "last-state", "savepoint"],
        Field(description="How spec changes that need a new driver are applied; never silently downgraded."),
        change(ChangeKind.IGNORE),
    ] = "last-state"
    job: Annotated[JobSpec, change(ChangeKind.IGNORE)] = Field(default_factory=JobSpec)
    restartPolicy: Annotated[RestartPolicy, change(ChangeKind.IGNORE)] = Field(default_factory=RestartPolicy)
    savepoints: Annotated[SavepointPolicy, change(ChangeKind.IGNORE)] = Field(default_factory=SavepointPolicy)
    restoreFrom: Annotated[RestoreFrom | None, change(ChangeKind.IGNORE)] = None
    rollback: Annotated[RollbackPolicy, change(ChangeKind.IGNORE)] = Field(default_factory=RollbackPolicy)
    standby: Annotated[StandbySpec, change(ChangeKind.IGNORE)] = Field(default_factory=StandbySpec)
    autoscaler: Annotated[AutoscalerSpec, change(ChangeKind.IGNORE)] = Field(default_factory=AutoscalerSpec)
    restartNonce: Annotated[
        int,
        Field(ge=0, description="Change it to restart the driver from the latest checkpoint."),
        change(ChangeKind.IGNORE),
    ] = 0
    redeployNonce: Annotated[
        int,
        Field(
            ge=0,
            description="Change it to redeploy the app from spec.restoreFrom (Flink's savepointRedeployNonce): the "
            "driver stops without a savepoint and a new run starts from that savepoint or path, with this spec. "
            "Refused (the driver keeps running) while spec.restoreFrom is unset or names a savepoint that has not "
            "succeeded; a value already applied never redeploys again.",
        ),
        change(ChangeKind.IGNORE),
    ] = 0
    serviceAccountName: Annotated[
        str | None,
        Field(
            pattern=DNS_SUBDOMAIN_PATTERN,
            description="Run driver and executors under this existing ServiceAccount instead of the ones Headrace "
            "creates (the same as serviceAccount.name).",
        ),
    ] = None
    serviceAccount: Annotated[
        ServiceAccountSpec,
        Field(description="The pods' identity: your own ServiceAccount, or metadata for the ones Headrace creates."),
    ] = Field(default_factory=ServiceAccountSpec)
    imagePullSecrets: list[LocalObjectReference] = Field(
        default_factory=list,
        description="Secrets of the app's namespace for pulling `image` from a private registry, as [{name: ...}]: "
        "set on the driver pod and, through Spark, on every executor pod.",
    )

    def own_service_account(self) -> str | None:
        """The user's ServiceAccount for driver and executors (serviceAccount.name or serviceAccountName), if any."""
        return self.serviceAccount.name or self.serviceAccountName


# ------------------------------------------------------------------------------------- status --

Phase = Literal[
    "Deploying",
    "Running",
    "Savepointing",
    "Upgrading",
    "Rescaling",
    "Restarting",
    "Suspended",
    "Completed",
    "Failed",
    "RolledBack",
]


class Condition(Model):
    """A Kubernetes-style condition (Ready, Progressing, Degraded)."""

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str = ""
    lastTransitionTime: str
    observedGeneration: int | None = None


class RunStatus(Model):
    """The current run: one checkpoint lineage, with attempts (driver pods) inside it."""

    number: int = Field(ge=1, description="Run number; a new run means a new checkpoint directory.")
    attempt: int = Field(ge=1, description="Attempt within the run; each attempt is one driver pod.")
    checkpointDir: str
    driverPod: str
    specHash: str = Field(description="Hash of the spec this attempt was started with.")
    restoredFrom: str | None = None
    startedAt: str | None = Field(default=None, description="When the driver container started running.")
    unansweredSince: str | None = Field(
        default=None, description="Since when the running driver has not answered status calls (cleared by an answer)."
    )
    standbyMovedAt: str | None = Field(
        default=None,
        description="When a warm standby that shared this attempt's driver's node was last removed so that a new one "
        "goes to another node (at most once per 10 minutes).",
    )


class RestartStatus(Model):
    """Restart bookkeeping for the HA loop."""

    total: int = 0
    consecutive: int = Field(default=0, description="Failures since the driver was last healthy; drives the backoff.")
    failureTimes: list[str] = Field(default_factory=list, description="Failure times within the window.")
    lastFailureReason: str | None = None
    lastFailureMessage: str | None = None
    nextRetryAt: str | None = None
    startupFailures: int = Field(
        default=0,
        description="Attempts in a row that failed before their first committed batch (0 once an attempt commits, or "
        "runs for restartPolicy.healthyAfter).",
    )


SavepointReason = Literal["manual", "periodic", "upgrade", "suspend", "import", "deletion"]
"""Why a savepoint exists (StreamingSavepoint spec.reason)."""


class Operation(Model):
    """What every entry of the write-ahead log records besides its kind and step."""

    startedAt: str = Field(description="When the operation began.")


class StartAttempt(Operation):
    """A new attempt (driver pod) is being started: its driver is created once every other driver pod of the app is
    gone (the fence)."""

    kind: Literal["StartDriver"] = "StartDriver"
    step: Literal["CreateDriver"] = "CreateDriver"
    run: int = Field(ge=1, description="Run of the attempt being started.")
    attempt: int = Field(ge=1, description="The attempt being started.")
    previousRun: RunStatus | None = Field(
        default=None,
        description="The attempt this one replaces, returned to should the API server refuse the new one.",
    )
    previousSpec: str | None = Field(
        default=None,
        description="The spec the replaced attempt ran, returned to with previousRun: its JSON text, as "
        "lastReconciledSpec, which it copies (kept as text so that a spec an earlier release accepted stays readable).",
    )


class Restart(Operation):
    """A failed driver is replaced by the next attempt of its run once the backoff (status.restarts.nextRetryAt)
    has elapsed."""

    kind: Literal["Restart"] = "Restart"
    step: Literal["Backoff"] = "Backoff"
    reason: str = Field(description="The failure that ended the last attempt (status.restarts.lastFailureReason).")
    rollback: bool = Field(
        default=False, description="The next attempt runs status.lastStableSpec: the upgrade never became stable."
    )


class ThroughSavepoint(Operation):
    """An operation that takes a savepoint of the running driver (stopping it with the savepoint for an upgrade or
    a suspension); the savepoint's outcome is recorded on its StreamingSavepoint."""

    kind: SavepointOperationKind
    step: Literal["TakeSavepoint"] = "TakeSavepoint"
    savepoint: str = Field(description="Name of the StreamingSavepoint being taken.")
    reason: SavepointReason = Field(description="Why the savepoint is taken (its StreamingSavepoint's spec.reason).")
    targetSpecHash: str = Field(description="Hash of the spec the operation applies (a failed one is not retried).")
    tries: int = Field(default=1, ge=1, description="Which try of the operation's savepoint this is.")
    silentSince: str | None = Field(
        default=None,
        description="Since when the driver, asked by an operator that restarted meanwhile, has not answered.",
    )


class TakingSavepoint(ThroughSavepoint):
    """A savepoint of the running driver, which keeps running (triggerNonce, periodic, a StreamingSavepoint)."""

    kind: Literal["Savepoint"] = "Savepoint"


class SavepointUpgrade(ThroughSavepoint):
    """An upgrade with upgradeMode savepoint: the driver stops with a savepoint, a new run restores it."""

    kind: Literal["Upgrade"] = "Upgrade"


class Suspending(ThroughSavepoint):
    """job.state suspended: the driver stops with a savepoint, which resuming restores."""

    kind: Literal["Suspend"] = "Suspend"


class DeletingWithSavepoint(ThroughSavepoint):
    """The app is being deleted with spec.savepoints.onDeletion: the driver stops with a final savepoint, then the
    app's finalizer is released."""

    kind: Literal["Delete"] = "Delete"


class PrewarmUpgrade(Operation):
    """A pre-warmed upgrade: the new spec's driver warms up as a standby while the running one keeps processing."""

    kind: Literal["Upgrade"] = "Upgrade"
    step: Literal["Prewarm"] = "Prewarm"
    targetSpecHash: str = Field(description="Hash of the spec the operation applies (a failed one is not retried).")
    prewarmDriver: str = Field(description="The pre-warmed driver's pod.")
    move: str | None = Field(
        default=None,
        description="Set when the running spec's driver moves off its node (being drained), saying why: the run "
        "continues on its checkpoint whatever the upgrade mode, and a failed move blames no spec.",
    )


SavepointOperation = TakingSavepoint | SavepointUpgrade | Suspending | DeletingWithSavepoint


def _log_tag(value: Any) -> str | None:
    """The kind/step pair that says which entry a log record is."""
    if isinstance(value, dict):
        return f"{value.get('kind')}/{value.get('step')}"
    kind, step = getattr(value, "kind", None), getattr(value, "step", None)
    return f"{kind}/{step}" if kind is not None else None


PendingOperation = Annotated[
    Annotated[StartAttempt, Tag("StartDriver/CreateDriver")]
    | Annotated[Restart, Tag("Restart/Backoff")]
    | Annotated[TakingSavepoint, Tag("Savepoint/TakeSavepoint")]
    | Annotated[SavepointUpgrade, Tag("Upgrade/TakeSavepoint")]
    | Annotated[Suspending, Tag("Suspend/TakeSavepoint")]
    | Annotated[DeletingWithSavepoint, Tag("Delete/TakeSavepoint")]
    | Annotated[PrewarmUpgrade, Tag("Upgrade/Prewarm")],
    Discriminator(
        _log_tag,
        custom_error_type="pending_operation",
        custom_error_message="kind/step is not an operation Headrace records",
    ),
]
"""What the operator is in the middle of: the write-ahead log entry a restarted operator resumes."""


class SavepointRef(Model):
    """A completed savepoint."""

    name: str | None = None
    path: str
    batchId: int | None = None
    time: str | None = None


class ProgressSummary(Model):
    """A compact summary of the driver's latest progress."""

    lastBatchId: int | None = None
    lastBatchTime: str | None = None
    inputRowsPerSecond: float | None = None
    processedRowsPerSecond: float | None = None
    watermark: str | None = Field(
        default=None,
        description="The lowest event-time watermark of the queries (absent until a query has seen event time: "
        "Spark's first batch runs without one).",
    )
    stateRows: int | None = Field(default=None, description="Rows held in state, summed over the queries.")
    sourceBacklog: float | None = Field(default=None, description="Input waiting in the sources (Kafka offsets).")
    registeredExecutors: int | None = None
    firstBatchAt: str | None = Field(
        default=None,
        description="When the current driver committed its first batch (its start-up phases are in the FirstBatch "
        "event and its metric headrace_runtime_phase_seconds).",
    )
    committedBatches: dict[str, int] | None = Field(
        default=None,
        description="The last batch each query (by key) committed in the current run, as the operator saw it; a "
        "later attempt of the run whose checkpoint has fewer commits refuses to start (CheckpointBehind).",
    )


class AutoscalerSample(Model):
    """What the app's batches did between two reads of its driver (the difference of their batch totals)."""

    at: str
    seconds: float
    inputRows: int
    busySeconds: float
    backlog: float | None = None
    executors: int
    batches: int | None = Field(default=None, description="Batches that ended between the two reads.")


class AutoscalerReading(Model):
    """The driver's batch totals (since it started, over its queries) at one read."""

    at: str
    batches: int
    inputRows: int
    busySeconds: float
    backlog: float | None = None
    executors: int
    executorsSince: str | None = None


class AutoscalerCheck(Model):
    """A scale-up whose effect is judged once the window at the new size fills (ineffective: undone)."""

    fromExecutors: int
    toExecutors: int
    capacityBefore: float = Field(description="Rows per second of batch time at fromExecutors.")


class AutoscalerOverhead(Model):
    """The fixed cost of a batch fitted at one executor count (it shrinks with more executors: a batch's tasks run
    in fewer waves)."""

    executors: int
    seconds: float


class AutoscalerStatus(Model):
    """What the autoscaler decided and why (passive: would do; active: did), with the window it decided on and
    what the next decision remembers."""

    action: Literal["hold", "scale", "repartition"] = Field(description="What it would do (passive) or did now.")
    executors: int = Field(description="The executors it would have (the current ones for hold).")
    target: int | None = Field(
        default=None,
        description="Active mode: the executors the autoscaler gave the running driver (they replace "
        "spec.executor.instances while the mode is active); unset until its first action.",
    )
    reason: str = Field(description="Why, as a CamelCase word (docs/autoscaler.md lists them).")
    message: str = ""
    utilization: float | None = None
    neededExecutors: int | None = Field(default=None, description="What the load needs, before bounds and quotas.")
    partitions: int | None = Field(default=None, description="For repartition: the state partitions it would have.")
    decidedAt: str
    lastReading: AutoscalerReading | None = None
    samples: list[AutoscalerSample] = Field(default_factory=list, description="The metrics window.")
    measuredExecutors: int | None = None
    sizeSince: str | None = None
    scaleDownSince: str | None = None
    scaleDownTo: int = 0
    actionTimes: list[str] = Field(default_factory=list, description="Active mode: its actions within the hour.")
    check: AutoscalerCheck | None = None
    blockedAbove: int | None = Field(
        default=None, description="No scale-up beyond this size (an ineffective one was undone) while the spec stays."
    )
    blockedSpec: str | None = Field(default=None, description="The spec hash blockedAbove holds for.")
    batchOverheadSeconds: float | None = Field(
        default=None,
        description="The fixed cost of a batch whatever its rows at the current executors (seconds): fitted at that "
        "count (batchOverheads), else derived from the fitted counts by their task waves; none fitted yet: "
        "none is assumed. A status without batchOverheads (an older operator's) holds the fit at measuredExecutors.",
    )
    batchOverheads: list[AutoscalerOverhead] = Field(
        default_factory=list,
        description="The fixed cost of a batch, last fitted at each executor count over a window whose batches at "
        "that count differed in rows.",
    )


class StreamingAppStatus(Model):
    """Observed state, written only by the operator's status recorder."""

    observedGeneration: int | None = None
    phase: Phase | None = None
    conditions: list[Condition] = Field(default_factory=list)
    run: RunStatus | None = None
    restarts: RestartStatus = Field(default_factory=RestartStatus)
    executors: int = Field(default=0, description="Executors requested of the running driver (scale subresource).")
    selector: str | None = Field(default=None, description="Label selector of the executor pods (for HPA).")
    lastReconciledSpec: str | None = Field(default=None, description="The spec (JSON) the current driver runs.")
    lastStableSpec: str | None = Field(default=None, description="The last spec (JSON) that ran stably.")
    pendingOperation: PendingOperation | None = Field(
        default=None,
        description="What the operator is in the middle of (the write-ahead log entry a restarted operator resumes): "
        "which operation (kind) and where in it (step), with that operation's particulars.",
    )
    latestSavepoint: SavepointRef | None = None
    progress: ProgressSummary | None = None
    autoscaler: AutoscalerStatus | None = Field(
        default=None, description="What the autoscaler would do (mode passive) or did (mode active), and why."
    )
    error: str | None = Field(default=None, description="Why the current spec is not applied, if it is not.")
    suspendedSavepoint: str | None = Field(
        default=None, description="Savepoint taken when the job was suspended; resuming restores it."
    )
    failedSpecHash: str | None = Field(
        default=None,
        description="Hash of a spec whose upgrade failed or was rolled back; it is not retried until the spec changes.",
    )

    @field_validator("pendingOperation", mode="before")
    @classmethod
    def _read_legacy_log(cls, value: Any) -> Any:
        return migrate_pending_operation(value)


class Resource(Model):
    """What every Headrace resource has beside its kind, spec and status (unknown top-level fields ignored)."""

    model_config = ConfigDict(extra="ignore")

    apiVersion: Literal["headrace.dev/v1alpha1"] = API_VERSION
    metadata: dict[str, Any] = Field(default_factory=dict)


class StreamingApp(Resource):
    """A streaming job managed by Headrace."""

    kind: Literal["StreamingApp"] = APP_KIND
    spec: StreamingAppSpec
    status: StreamingAppStatus = Field(default_factory=StreamingAppStatus)


# ------------------------------------------------------------------------- StreamingSavepoint --


class StreamingSavepointSpec(Model):
    """One savepoint of an app."""

    appName: Annotated[str, Field(min_length=1, description="The StreamingApp (same namespace).")]
    reason: Annotated[
        SavepointReason,
        Field(description="Why the savepoint exists."),
    ] = "manual"
    path: Annotated[
        str | None,
        Field(pattern=URI_PATTERN, description="Set to import an existing savepoint; otherwise the operator chooses."),
    ] = None
    disposeOnDelete: Annotated[
        bool,
        Field(
            description="Deleting this resource deletes the savepoint's directory first "
            "(<savepointDir>/<namespace>/<app>/<name>, never anything else), through the app's running driver; "
            "the deletion waits for it (a finalizer), and when it cannot be done (no running driver, the app gone, "
            "a path outside the app's savepoint root) the resource goes anyway and a Warning Event "
            "SavepointFilesLeft names the files left."
        ),
    ] = False


class StreamingSavepointStatus(Model):
    """Outcome of a savepoint."""

    phase: Literal["Pending", "InProgress", "Succeeded", "Failed"] | None = None
    path: str | None = None
    batchId: int | None = None
    sizeBytes: int | None = None
    time: str | None = None
    message: str | None = None
    observedGeneration: int | None = None


class StreamingSavepoint(Resource):
    """A savepoint as its own resource."""

    kind: Literal["StreamingSavepoint"] = SAVEPOINT_KIND
    spec: StreamingSavepointSpec
    status: StreamingSavepointStatus = Field(default_factory=StreamingSavepointStatus)
