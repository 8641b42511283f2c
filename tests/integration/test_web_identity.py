"""Web identity against a real STS and a real ServiceAccount issuer, without a node: MinIO (`testbed.sts`) trusts
the testbed kube-apiserver as its OpenID provider (it fetches the issuer's discovery document and JWKS from the
apiserver, readable anonymously once bound as managed clusters publish them), and a ServiceAccount token the
apiserver issues for the STS's audience (TokenRequest, what the kubelet projects into driver and executors) is
exchanged through AssumeRoleWithWebIdentity for temporary credentials that write and read the bucket. A token for
another audience, and a token of another issuer for the right audience, are refused."""

from __future__ import annotations

import json
import ssl
import urllib.request
from collections.abc import Iterator

import pytest
from kubernetes import client
from kubernetes.client import ApiClient

from testbed import sts
from testbed.controlplane import JWKS_PATH, SERVICE_ACCOUNT_ISSUER, ControlPlane

AUDIENCE = "sts.headrace.test"
ACCOUNT = "clicks-spark"


@pytest.fixture(scope="module")
def store(control_plane: ControlPlane) -> Iterator[sts.MinioSts]:
    with control_plane.api_client() as api:
        sts.allow_anonymous_discovery(api)
    with sts.MinioSts(sts.ClusterIssuer.of(control_plane), AUDIENCE) as minio:
        yield minio


@pytest.fixture
def account(kube_api: ApiClient, namespace: str) -> str:
    body: dict[str, object] = {"metadata": {"name": ACCOUNT}}
    client.CoreV1Api(kube_api).create_namespaced_service_account(namespace, body)
    return ACCOUNT


def test_a_service_account_token_for_the_audience_writes_and_reads_the_bucket(
    store: sts.MinioSts, kube_api: ApiClient, namespace: str, account: str
) -> None:
    token = sts.service_account_token(kube_api, namespace, account, AUDIENCE)
    temporary = sts.assume_role_with_web_identity(store.endpoint, store.role_arn, token)
    assert temporary.session_token and temporary.access_key != store.access_key
    key = f"{namespace}/checkpoints/commits/0"
    temporary.put_object(store.bucket, key, b"v1\n")
    assert temporary.get_object(store.bucket, key) == b"v1\n"
    assert key in temporary.list_keys(store.bucket, f"{namespace}/")
    assert key in store.keys(f"{namespace}/")  # the same object, seen with the root credentials


def test_the_temporary_credentials_need_their_session_token(
    store: sts.MinioSts, kube_api: ApiClient, namespace: str, account: str
) -> None:
    token = sts.service_account_token(kube_api, namespace, account, AUDIENCE)
    temporary = sts.assume_role_with_web_identity(store.endpoint, store.role_arn, token)
    without = type(temporary)(temporary.endpoint, temporary.access_key, temporary.secret_key)
    status, _ = without.request("GET", f"/{store.bucket}?list-type=2")
    assert status == 403


def test_a_token_for_another_audience_is_refused(
    store: sts.MinioSts, kube_api: ApiClient, namespace: str, account: str
) -> None:
    token = sts.service_account_token(kube_api, namespace, account, "https://kubernetes.default.svc")
    with pytest.raises(sts.StsRefused) as refused:
        sts.assume_role_with_web_identity(store.endpoint, store.role_arn, token)
    assert refused.value.status in (400, 403)
    assert "must match configured OpenID Client ID" in refused.value.message  # `aud` (then `azp`) checked


def test_a_token_of_another_issuer_is_refused(store: sts.MinioSts, control_plane: ControlPlane) -> None:
    anonymous = ssl.create_default_context(cafile=str(control_plane.ca_cert))  # as the STS reads the keys
    url = f"{control_plane.url}{JWKS_PATH}"
    with urllib.request.urlopen(url, context=anonymous, timeout=30) as answer:  # noqa: S310 - https, our own
        (cluster_key,) = json.loads(answer.read())["keys"]
    subject = f"system:serviceaccount:default:{ACCOUNT}"
    with sts.OpenIdIssuer() as stranger:  # its own key, unknown to the STS
        token = stranger.token(subject, AUDIENCE)
        with pytest.raises(sts.StsRefused) as unknown:
            sts.assume_role_with_web_identity(store.endpoint, store.role_arn, token)
    # The same forged as the cluster's: its issuer's name and key id, signed with another key.
    with sts.OpenIdIssuer(key_id=cluster_key["kid"]) as forger:
        token = forger.token(subject, AUDIENCE, issuer=SERVICE_ACCOUNT_ISSUER)
        with pytest.raises(sts.StsRefused) as forged:
            sts.assume_role_with_web_identity(store.endpoint, store.role_arn, token)
    assert (unknown.value.status, forged.value.status) == (400, 400)
    assert "No public key found" in unknown.value.message
    assert "verification error" in forged.value.message  # the signature does not verify with the JWKS key
