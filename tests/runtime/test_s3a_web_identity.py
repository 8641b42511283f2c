"""credentialsMode webIdentity with real PySpark and the image's S3A jars: the provider and environment the operator
renders (`headrace.render.identity`) make the AWS SDK v2 read the projected token file, call
AssumeRoleWithWebIdentity at the STS endpoint override, and sign every S3 request with the temporary credentials
it answered; no access key is in the environment. The S3 server is the testbed's versitygw; the STS here is a
minimal local endpoint answering the one STS action (a real STS in the test bed is issue 24's e2e), which checks
the role and the token it is sent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest

from headrace.render import identity
from testbed import objectstore
from tests.unit.builders import spec

pytestmark = pytest.mark.spark
JOB = Path(__file__).parent / "jobs" / "s3a_state.py"
ROLE = "arn:aws:iam::123456789012:role/clicks"
TOKEN = "eyJhbGciOiJSUzI1NiJ9.projected-service-account-token.signature"
SESSION_TOKEN = "session-token-from-the-sts"

ANSWER = """<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleWithWebIdentityResult>
    <Credentials>
      <AccessKeyId>{access}</AccessKeyId>
      <SecretAccessKey>{secret}</SecretAccessKey>
      <SessionToken>{session}</SessionToken>
      <Expiration>2099-01-01T00:00:00Z</Expiration>
    </Credentials>
    <SubjectFromWebIdentityToken>system:serviceaccount:analytics:clicks-spark</SubjectFromWebIdentityToken>
    <AssumedRoleUser>
      <Arn>arn:aws:sts::123456789012:assumed-role/clicks/session</Arn>
      <AssumedRoleId>AROA:session</AssumedRoleId>
    </AssumedRoleUser>
  </AssumeRoleWithWebIdentityResult>
  <ResponseMetadata><RequestId>1</RequestId></ResponseMetadata>
</AssumeRoleWithWebIdentityResponse>"""


class _Sts(BaseHTTPRequestHandler):
    calls: list[dict[str, list[str]]]
    credentials: tuple[str, str]

    def do_POST(self) -> None:
        form = parse_qs(self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode())
        type(self).calls.append(form)
        good = form.get("RoleArn") == [ROLE] and form.get("WebIdentityToken") == [TOKEN]
        access, secret = type(self).credentials
        body = ANSWER.format(access=access, secret=secret, session=SESSION_TOKEN).encode() if good else b"<Error/>"
        self.send_response(200 if good else 403)
        self.send_header("Content-Type", "text/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        del args


@pytest.fixture
def sts() -> Iterator[tuple[str, type[_Sts]]]:
    handler = type("Sts", (_Sts,), {"calls": [], "credentials": ("", "")})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_a_query_checkpoints_on_s3_with_credentials_from_its_web_identity(
    tmp_path: Path, sts: tuple[str, type[_Sts]]
) -> None:
    endpoint, handler = sts
    web = {"credentialsMode": "webIdentity", "webIdentity": {"roleArn": ROLE, "stsEndpoint": endpoint}}
    app_spec = spec(state__s3=web)
    token = tmp_path / "token"
    token.write_text(TOKEN)
    rendered = {item["name"]: item["value"] for item in identity.credentials_env(app_spec)}
    assert rendered[identity.AWS_WEB_IDENTITY_TOKEN_FILE] == identity.TOKEN_FILE  # where the pods' volume is
    rendered[identity.AWS_WEB_IDENTITY_TOKEN_FILE] = str(token)  # here: the same token, in a temporary file
    provider = identity.s3_provider_conf(app_spec)[identity.S3A_PROVIDER]
    inputs = tmp_path / "input"
    inputs.mkdir()
    (inputs / "a.txt").write_text("a\nb\n")
    (inputs / "b.txt").write_text("a\n")
    result = tmp_path / "result.json"
    with objectstore.ObjectStore() as store:
        handler.credentials = (store.access_key, store.secret_key)
        keyless = {key: value for key, value in os.environ.items() if not key.startswith("AWS_")}
        env = {**keyless, **rendered, "S3A_CREDENTIALS_PROVIDER": provider}
        checkpoint, copy = f"s3a://{store.bucket}/checkpoints/q", f"s3a://{store.bucket}/savepoints/sp-1"
        command = [sys.executable, str(JOB), store.endpoint, checkpoint, copy, str(inputs), str(result)]
        jars = ",".join(map(str, objectstore.s3a_jars()))
        completed = subprocess.run([*command, jars], env=env, capture_output=True, text=True, timeout=600, check=False)
        causes = [line for line in completed.stderr.splitlines() if "Exception" in line or "Caused by" in line]
        assert completed.returncode == 0, "\n".join(causes[:30])
        assert (store.root / store.bucket / "checkpoints" / "q" / "commits" / "1").is_file()
    outcome = json.loads(result.read_text())
    assert outcome["runs"][1] == {"a": 3, "b": 3}  # the second run continued from the state on S3
    assert handler.calls, "the STS was never asked"
    call = handler.calls[0]
    assert call["Action"] == ["AssumeRoleWithWebIdentity"]
    assert call["RoleArn"] == [ROLE] and call["WebIdentityToken"] == [TOKEN]
    print(f"STS calls: {len(handler.calls)}; session name {call.get('RoleSessionName')}")
