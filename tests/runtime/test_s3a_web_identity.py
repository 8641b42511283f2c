"""credentialsMode webIdentity with real PySpark, the image's S3A jars and a real STS, with no static key anywhere:
the provider and environment the operator renders (`headrace.render.identity`) make the AWS SDK v2 read the token
file, call AssumeRoleWithWebIdentity at the STS endpoint override, and sign every S3 request with the temporary
credentials it answered. The STS and the S3 server are MinIO's (`testbed.sts`), trusting a local OpenID issuer
whose RS256 tokens for the audience stand in for a projected ServiceAccount token."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from headrace.render import identity
from testbed import objectstore, sts
from tests.unit.builders import spec

pytestmark = pytest.mark.spark
JOB = Path(__file__).parent / "jobs" / "object_store_state.py"
AUDIENCE = "sts.headrace.test"
SUBJECT = "system:serviceaccount:analytics:clicks-spark"


def test_a_query_checkpoints_on_s3_with_credentials_from_its_web_identity(tmp_path: Path) -> None:
    inputs = tmp_path / "input"
    inputs.mkdir()
    (inputs / "a.txt").write_text("a\nb\n")
    (inputs / "b.txt").write_text("a\n")
    result = tmp_path / "result.json"
    with sts.OpenIdIssuer() as issuer, sts.MinioSts(issuer, AUDIENCE) as store:
        web = {"roleArn": store.role_arn, "audience": AUDIENCE, "stsEndpoint": store.endpoint}
        app_spec = spec(state__s3={"endpoint": store.endpoint, "pathStyleAccess": True, "webIdentity": web})
        token = tmp_path / "token"
        token.write_text(issuer.token(SUBJECT, AUDIENCE))
        rendered = {item["name"]: item["value"] for item in identity.credentials_env(app_spec)}
        assert rendered[identity.AWS_WEB_IDENTITY_TOKEN_FILE] == identity.TOKEN_FILE  # the pods' projected volume
        rendered[identity.AWS_WEB_IDENTITY_TOKEN_FILE] = str(token)  # here: a token of the issuer, in a file
        provider = identity.s3_provider_conf(app_spec)[identity.S3A_PROVIDER]
        keyless = {key: value for key, value in os.environ.items() if not key.startswith("AWS_")}
        env = {**keyless, **rendered, "S3A_CREDENTIALS_PROVIDER": provider}
        assert "AWS_ACCESS_KEY_ID" not in env and "AWS_SECRET_ACCESS_KEY" not in env
        checkpoint, copy = f"s3a://{store.bucket}/checkpoints/q", f"s3a://{store.bucket}/savepoints/sp-1"
        command = [sys.executable, str(JOB), store.endpoint, checkpoint, copy, str(inputs), str(result)]
        jars = ",".join(map(str, objectstore.s3a_jars()))
        completed = subprocess.run([*command, jars], env=env, capture_output=True, text=True, timeout=600, check=False)
        causes = [line for line in completed.stderr.splitlines() if "Exception" in line or "Caused by" in line]
        assert completed.returncode == 0, "\n".join(causes[:30])
        keys = store.keys("checkpoints/q/")
        copied = store.keys("savepoints/sp-1/")
    outcome = json.loads(result.read_text())
    assert "checkpoints/q/commits/1" in keys
    assert outcome["runs"][0] == {"a": 2, "b": 1}
    assert outcome["runs"][1] == {"a": 3, "b": 3}  # the second run continued from the state it left on S3
    assert {f"savepoints/sp-1/{name}" for name in outcome["files"]} <= set(copied)
