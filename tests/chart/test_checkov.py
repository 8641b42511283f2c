"""checkov (a Kubernetes manifest scanner from PyPI, run pinned through uvx) on the rendered chart and
on the driver pod, executor pod and other objects the operator renders for every app in `apps/`: no
failure except the accepted exceptions below, each with its reason (docs/security.md lists them)."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from cryptography.hazmat.primitives.asymmetric import ec

from headrace.api.models import StreamingAppSpec
from headrace.render import control_tls, manifests

from .helm import render

CHECKOV = "checkov==3.3.30"
REPOSITORY = Path(__file__).resolve().parents[2]
ACCEPTED = {
    "CKV_K8S_8": "no liveness probe on driver and executors: the operator watches the driver (progress timeout) "
    "and Spark its executors; a kubelet restart would replace a driver outside the operator's fencing",
    "CKV_K8S_9": "no readiness probe on driver and executors: no Service routes traffic by readiness to them",
    "CKV_K8S_10": "the executor pod template has no CPU request: Spark sets it when it creates the pod "
    "(spec.executor.cores or coreRequest)",
    "CKV_K8S_11": "no CPU limits: throttling stalls micro-batches; requests reserve the cores",
    "CKV_K8S_15": "image pull policy is the user's choice (spec.imagePullPolicy, chart image.pullPolicy)",
    "CKV_K8S_43": "images by tag: the user chooses the image reference (a digest works too)",
    "CKV_K8S_35": "the control token and S3 keys reach the driver as secretKeyRef env vars (never values)",
    "CKV_K8S_38": "the driver needs its token to create executors and the operator its own; executors mount none",
    "CKV_K8S_40": "the Spark image runs as uid 185 (Spark's convention), non-root but below 10000",
    "CKV2_K8S_6": "the operator pod has no NetworkPolicy of its own (it accepts only metrics and health probes)",
}


def _render_everything(target: Path) -> None:
    (target / "chart.yaml").write_text(yaml.safe_dump_all(render(target / "helm"), sort_keys=False))
    for path in sorted((REPOSITORY / "apps").glob("*/streamingapp.yaml")):
        app = yaml.safe_load(path.read_text())
        spec = StreamingAppSpec.model_validate(app["spec"])
        name = app["metadata"]["name"]
        attempt = manifests.Attempt(
            app=name,
            namespace="apps",
            app_uid="0a0a0a0a-0000-0000-0000-000000000000",
            run=1,
            attempt=1,
            spec=spec,
            spec_hash="0123456789ab",
            checkpoint_dir=f"{spec.state.checkpointDir}/apps/{name}/r1",
            operator_namespace="headrace-system",
        )
        executor = copy.deepcopy(manifests.executor_pod_template(attempt))  # as Spark creates it: named, with the image
        executor["metadata"].update({"name": f"{name}-exec-1", "namespace": "apps"})
        executor["spec"]["containers"][0]["image"] = spec.image
        objects = [
            *manifests.attempt_objects(attempt),
            manifests.control_secret(attempt, "token", _certificate(name)),
            executor,
        ]
        (target / f"app-{name}.yaml").write_text(yaml.safe_dump_all(objects, sort_keys=False))


def _certificate(app: str) -> control_tls.ControlCertificate:
    return control_tls.control_certificate(app, "apps", ec.generate_private_key(ec.SECP256R1()), datetime.now(UTC))


def test_checkov_finds_nothing_but_the_accepted_exceptions(tmp_path: Path) -> None:
    uvx = shutil.which("uvx") or str(Path.home() / ".local" / "bin" / "uvx")
    if not Path(uvx).exists():
        pytest.fail("uvx is needed to run checkov (`make setup` installs uv)")
    scanned = tmp_path / "manifests"
    scanned.mkdir()
    _render_everything(scanned)
    completed = subprocess.run(
        [
            uvx,
            "--from",
            CHECKOV,
            "checkov",
            "-d",
            str(scanned),
            "--framework",
            "kubernetes",
            "-o",
            "json",
            "--skip-check",
            ",".join(sorted(ACCEPTED)),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
        env={**os.environ, "BC_SKIP_MAPPING": "TRUE", "CHECKOV_RUN_SCA_PACKAGE_SCAN_V2": "false"},
    )
    report = json.loads(completed.stdout)
    report = report[0] if isinstance(report, list) else report
    failed = [
        f"{check['check_id']} {check['check_name']}: {check['resource']} ({Path(check['file_path']).name})"
        for check in report["results"]["failed_checks"]
    ]
    print(report["summary"])
    assert failed == []
    assert report["summary"]["passed"] > 500  # it really scanned the pods, RBAC and the chart
