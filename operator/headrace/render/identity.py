"""Who driver and executors are, to the cluster and to the cloud (docs/cloud.md).

Owns: the ServiceAccount each kind of pod runs as (the user's own for both, or the two Headrace creates, with the
user's annotations and labels), and each store's credentials mode as the pods see it: the S3A provider chain, the
Secret's key pair as environment, or a projected ServiceAccount token with the AWS SDK's web identity environment;
for Google Cloud Storage, the connector's authentication type and the service account key file mounted from a
Secret; for Azure, the ABFS connector's per-account authentication (the account key file mounted from a Secret and
read through its shell key provider, a projected token for Workload Identity, or the node's managed identity).
Never: decisions or I/O.
"""

from __future__ import annotations

from typing import Any

from headrace.api import names
from headrace.api.models import AzureSpec, CredentialsMode, GcsCredentialsMode, GcsSpec, StreamingAppSpec
from headrace.core.validation import AZURE_PREFIX, AZURE_SCHEMES, azure_accounts

S3A_PROVIDER = "spark.hadoop.fs.s3a.aws.credentials.provider"
AWS_ACCESS_KEY_ID = "AWS_ACCESS_KEY_ID"
AWS_SECRET_ACCESS_KEY = "AWS_SECRET_ACCESS_KEY"
AWS_ROLE_ARN = "AWS_ROLE_ARN"
AWS_WEB_IDENTITY_TOKEN_FILE = "AWS_WEB_IDENTITY_TOKEN_FILE"
AWS_ENDPOINT_URL_STS = "AWS_ENDPOINT_URL_STS"
AWS_REGION = "AWS_REGION"
_SDK = "software.amazon.awssdk.auth.credentials."  # hadoop-aws 3.5 in the image is built on the AWS SDK v2
PROVIDERS: dict[CredentialsMode, str] = {
    # Only the environment: no instance-metadata lookups when the Secret's keys are missing.
    "secret": f"{_SDK}EnvironmentVariableCredentialsProvider",
    # AssumeRoleWithWebIdentity through the SDK's sts module (in the image) with the projected token.
    "webIdentity": f"{_SDK}WebIdentityTokenFileCredentialsProvider",
    # Environment, system properties, web identity (e.g. injected by EKS's webhook), profile, EKS Pod Identity
    # and ECS container credentials, instance profile.
    "default": f"{_SDK}DefaultCredentialsProvider",
}
TOKEN_VOLUME = "headrace-web-identity"
TOKEN_DIR = "/var/run/secrets/headrace.dev/web-identity"
TOKEN_PATH = "token"
TOKEN_FILE = f"{TOKEN_DIR}/{TOKEN_PATH}"
GCS_PREFIX = "spark.hadoop.fs.gs."
GCS_AUTH_TYPE = f"{GCS_PREFIX}auth.type"
GCS_KEY_FILE_SETTING = f"{GCS_PREFIX}auth.service.account.json.keyfile"
# The Cloud Storage connector's fs.gs.auth.type for each mode (its gcs/CONFIGURATION.md).
GCS_AUTH_TYPES: dict[GcsCredentialsMode, str] = {
    "serviceAccountKeySecret": "SERVICE_ACCOUNT_JSON_KEYFILE",
    # GoogleCredentials.getApplicationDefault(): GOOGLE_APPLICATION_CREDENTIALS, gcloud's file, then the metadata
    # server (GKE Workload Identity's, or the node's service account).
    "default": "APPLICATION_DEFAULT",
    "unauthenticatedEmulator": "UNAUTHENTICATED",
}
GCS_KEY_VOLUME = "headrace-gcs-key"
GCS_KEY_DIR = "/var/run/secrets/headrace.dev/gcs"
GCS_KEY_PATH = "key.json"
GCS_KEY_FILE = f"{GCS_KEY_DIR}/{GCS_KEY_PATH}"
_ABFS = "org.apache.hadoop.fs.azurebfs."
# The ABFS connector's key provider that runs `<script> <fs.azure.account.key>` and takes its output as the account
# key: with the script `cat` and the key setting the mounted file's path, it reads the Secret's file (so the setting
# holds a path, never the key).
AZURE_KEY_PROVIDER = f"{_ABFS}services.ShellDecryptionKeyProvider"
AZURE_KEY_SCRIPT = "cat"
AZURE_TOKEN_PROVIDERS = {
    "workloadIdentity": f"{_ABFS}oauth2.WorkloadIdentityTokenProvider",  # the token file, exchanged at Entra ID
    "managedIdentity": f"{_ABFS}oauth2.MsiTokenProvider",  # the instance metadata service's token
}
AZURE_KEY_VOLUME = "headrace-azure-key"
# The key provider reads fs.azure.account.key first and refuses it unless it is base64-shaped (letters, digits, + and
# /, a length divisible by 4): so the directory has no dot, and the setting names the file with as many slashes
# before its name as make it so (one path to the kernel).
AZURE_KEY_DIR = "/var/run/secrets/headrace/azure"
AZURE_KEY_PATH = "accountKey"
AZURE_KEY_FILE = f"{AZURE_KEY_DIR}/{AZURE_KEY_PATH}"
AZURE_KEY_SETTING_VALUE = AZURE_KEY_DIR + "/" * (1 + (-len(AZURE_KEY_FILE)) % 4) + AZURE_KEY_PATH
AZURE_TOKEN_VOLUME = "headrace-azure-identity"
AZURE_TOKEN_DIR = "/var/run/secrets/headrace.dev/azure-identity"
AZURE_TOKEN_FILE = f"{AZURE_TOKEN_DIR}/{TOKEN_PATH}"


def driver_service_account(app: str, spec: StreamingAppSpec) -> str:
    """The driver pod's ServiceAccount (bound to the app's Role)."""
    return spec.own_service_account() or names.service_account(app)


def executor_service_account(app: str, spec: StreamingAppSpec) -> str:
    """The executor pods' ServiceAccount: the user's own when named (their pods mount no API token, so it gives
    them only its cloud identity), otherwise one with no rights."""
    return spec.own_service_account() or names.executor_service_account(app)


def service_account_metadata(spec: StreamingAppSpec, metadata: dict[str, Any]) -> dict[str, Any]:
    """`metadata` of a ServiceAccount Headrace creates, with the user's labels (ours win) and annotations."""
    extra = spec.serviceAccount
    result = {**metadata, "labels": {**extra.labels, **metadata.get("labels", {})}}
    if extra.annotations:
        result["annotations"] = dict(extra.annotations)
    return result


def _mode(spec: StreamingAppSpec) -> CredentialsMode | None:
    return spec.state.s3.credentials() if spec.state.s3 is not None else None


def s3_provider_conf(spec: StreamingAppSpec) -> dict[str, str]:
    """The S3A provider chain of the store's credentials mode (none: the connector's own chain)."""
    mode = _mode(spec)
    return {S3A_PROVIDER: PROVIDERS[mode]} if mode is not None else {}


def gcs_spec(spec: StreamingAppSpec) -> GcsSpec | None:
    """spec.state.gcs, or its defaults when a state URI is on gs:// without it (Application Default Credentials);
    None when Cloud Storage holds no state."""
    state = spec.state
    if state.gcs is not None:
        return state.gcs
    on_gcs = any(uri and uri.lower().startswith("gs://") for uri in (state.checkpointDir, state.savepointDir))
    return GcsSpec() if on_gcs else None


def gcs_auth_conf(spec: StreamingAppSpec) -> dict[str, str]:
    """The Cloud Storage connector's authentication type of the store's credentials mode, and the path of the key
    file mounted from the Secret (the path only: the key stays in the Secret's volume)."""
    gcs = gcs_spec(spec)
    if gcs is None:
        return {}
    mode = gcs.credentials()
    conf = {GCS_AUTH_TYPE: GCS_AUTH_TYPES[mode]}
    if mode == "serviceAccountKeySecret":
        conf[GCS_KEY_FILE_SETTING] = GCS_KEY_FILE
    return conf


def azure_spec(spec: StreamingAppSpec) -> AzureSpec | None:
    """spec.state.azure, or its defaults when a state URI is on abfs(s):// without it (the node's managed identity);
    None when Azure holds no state."""
    state = spec.state
    if state.azure is not None:
        return state.azure
    uris = (state.checkpointDir, state.savepointDir)
    on_azure = any(uri and uri.lower().startswith(tuple(f"{s}://" for s in AZURE_SCHEMES)) for uri in uris)
    return AzureSpec() if on_azure else None


def _azure_auth_options(azure: AzureSpec) -> dict[str, str]:
    """The ABFS options (without their account suffix) of the credentials mode."""
    mode = azure.credentials()
    if mode == "accountKeySecret":
        return {
            "account.auth.type": "SharedKey",
            "account.keyprovider": AZURE_KEY_PROVIDER,
            "shellkeyprovider.script": AZURE_KEY_SCRIPT,
            "account.key": AZURE_KEY_SETTING_VALUE,  # the file the key provider hands to `cat`, not the key
        }
    options = {"account.auth.type": "OAuth", "account.oauth.provider.type": AZURE_TOKEN_PROVIDERS[mode]}
    if mode == "workloadIdentity" and azure.workloadIdentity is not None:
        identity = azure.workloadIdentity
        options["account.oauth2.client.id"] = identity.clientId
        options["account.oauth2.msi.tenant"] = identity.tenantId
        options["account.oauth2.msi.authority"] = identity.authority
        options["account.oauth2.token.file"] = AZURE_TOKEN_FILE
    if mode == "managedIdentity" and azure.managedIdentity is not None and azure.managedIdentity.clientId:
        options["account.oauth2.client.id"] = azure.managedIdentity.clientId
    return options


def azure_auth_conf(spec: StreamingAppSpec) -> dict[str, str]:
    """The ABFS connector's authentication of the store's credentials mode, as per-account settings of each state
    account (they win over the global ones, which stay the user's for other accounts)."""
    azure = azure_spec(spec)
    if azure is None:
        return {}
    options = _azure_auth_options(azure)
    return {
        f"{AZURE_PREFIX}{option}.{account}": value
        for account in azure_accounts(spec)
        for option, value in options.items()
    }


def credentials_env(spec: StreamingAppSpec) -> list[dict[str, Any]]:
    """Environment of driver and executor containers for the store's credentials: the Secret's key pair
    (secretKeyRef, never a value), or the role, token file, region and STS endpoint of web identity."""
    s3 = spec.state.s3
    mode = _mode(spec)
    if s3 is None:
        return []
    if mode == "secret" and s3.credentialsSecret is not None:
        secret = s3.credentialsSecret
        return [
            {"name": name, "valueFrom": {"secretKeyRef": {"name": secret.name, "key": key}}}
            for name, key in (
                (AWS_ACCESS_KEY_ID, secret.accessKeyIdKey),
                (AWS_SECRET_ACCESS_KEY, secret.secretAccessKeyKey),
            )
        ]
    if mode == "webIdentity" and s3.webIdentity is not None:
        web = s3.webIdentity
        env = [
            {"name": AWS_ROLE_ARN, "value": web.roleArn},
            {"name": AWS_WEB_IDENTITY_TOKEN_FILE, "value": TOKEN_FILE},
            {"name": AWS_REGION, "value": s3.region},  # the STS client's region (no instance metadata needed)
        ]
        if web.stsEndpoint:
            env.append({"name": AWS_ENDPOINT_URL_STS, "value": web.stsEndpoint})
        return env
    return []


def _token_volumes(spec: StreamingAppSpec) -> list[dict[str, Any]]:
    """The projected ServiceAccount token of web identity, for its audience (the kubelet renews it at 80% of its
    lifetime, and the SDK reads the file again for each new session)."""
    s3 = spec.state.s3
    if s3 is None or _mode(spec) != "webIdentity" or s3.webIdentity is None:
        return []
    token = {
        "audience": s3.webIdentity.audience,
        "expirationSeconds": s3.webIdentity.expirationSeconds,
        "path": TOKEN_PATH,
    }
    return [{"name": TOKEN_VOLUME, "projected": {"sources": [{"serviceAccountToken": token}]}}]


def _gcs_key_volumes(spec: StreamingAppSpec) -> list[dict[str, Any]]:
    """The one key of the service account key Secret, as the file the connector reads (readable by the pod's user,
    whatever its UID: only this container mounts it)."""
    gcs = gcs_spec(spec)
    if gcs is None or gcs.credentials() != "serviceAccountKeySecret" or gcs.serviceAccountKeySecret is None:
        return []
    secret = gcs.serviceAccountKeySecret
    items = [{"key": secret.key, "path": GCS_KEY_PATH}]
    return [{"name": GCS_KEY_VOLUME, "secret": {"secretName": secret.name, "items": items, "defaultMode": 0o444}}]


def _azure_volumes(spec: StreamingAppSpec) -> list[dict[str, Any]]:
    """The account key's one file (accountKeySecret), or the projected ServiceAccount token for Entra ID
    (workloadIdentity; the connector reads the file again for each new token)."""
    azure = azure_spec(spec)
    if azure is None:
        return []
    mode = azure.credentials()
    if mode == "accountKeySecret" and azure.accountKeySecret is not None:
        items = [{"key": azure.accountKeySecret.key, "path": AZURE_KEY_PATH}]
        secret = {"secretName": azure.accountKeySecret.name, "items": items, "defaultMode": 0o444}
        return [{"name": AZURE_KEY_VOLUME, "secret": secret}]
    if mode == "workloadIdentity" and azure.workloadIdentity is not None:
        identity = azure.workloadIdentity
        token = {"audience": identity.audience, "expirationSeconds": identity.expirationSeconds, "path": TOKEN_PATH}
        return [{"name": AZURE_TOKEN_VOLUME, "projected": {"sources": [{"serviceAccountToken": token}]}}]
    return []


_MOUNT_DIRS = {
    TOKEN_VOLUME: TOKEN_DIR,
    GCS_KEY_VOLUME: GCS_KEY_DIR,
    AZURE_KEY_VOLUME: AZURE_KEY_DIR,
    AZURE_TOKEN_VOLUME: AZURE_TOKEN_DIR,
}


def volumes(spec: StreamingAppSpec) -> list[dict[str, Any]]:
    """The credentials volumes of the store's mode: web identity's projected token, the GCS key file, the Azure
    account key file or Workload Identity's token."""
    return [*_token_volumes(spec), *_gcs_key_volumes(spec), *_azure_volumes(spec)]


def volume_mounts(spec: StreamingAppSpec) -> list[dict[str, Any]]:
    """Mounts of `volumes` in the driver and executor containers (read-only)."""
    return [{"name": v["name"], "mountPath": _MOUNT_DIRS[v["name"]], "readOnly": True} for v in volumes(spec)]
