"""A peer for benchmarks: the Kubeflow Spark operator (``github.com/kubeflow/spark-operator/v2``) out of cluster.

Owns: the pinned version and its build (a wrapper module carrying the operator's replace directives, since
``go install`` refuses a module that has them; cached under ``~/.cache/headrace/bin``), installing its CRDs
from the module's own ``config/crd/bases``, the SparkApplication manifest, and its controller as a child
process against a control plane. What the peer really does per app in v2.4.0: the controller runs
``$SPARK_HOME/bin/spark-submit`` (a JVM) as a subprocess, which creates the driver pod, its Service and its
ConfigMap; here `SPARK_HOME` is the pyspark wheel the project already installs (Spark 4.3, whose jars
include Spark's Kubernetes submission client), and the master URL comes from ``KUBERNETES_SERVICE_HOST``/
``_PORT`` pointed at the control plane, as it would inside a cluster. Its mutating webhook (a separate
``webhook start`` process that needs TLS serving) is not run: node selector and tolerations go through the
driver pod template, which the controller hands to spark-submit.
Never: builds or runs anything of Headrace's.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml
from kubernetes import client
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from testbed import build, procs
from testbed.controlplane import ControlPlane, http_ok

MODULE = "github.com/kubeflow/spark-operator/v2"
VERSION = "v2.4.0"
MODULE_SUM = "h1:Bo5rz5dlhqYEa7e/TLtUEVXDMNRotnVaQ4VLCyeLeOc="  # go.sum's checksum of the module (sum.golang.org)
PACKAGE = f"{MODULE}/cmd/operator"
GROUP, API_VERSION, PLURAL, KIND = "sparkoperator.k8s.io", "v1beta2", "sparkapplications", "SparkApplication"
CRD_FILES = (
    "sparkoperator.k8s.io_sparkapplications.yaml",
    "sparkoperator.k8s.io_scheduledsparkapplications.yaml",
    "sparkoperator.k8s.io_sparkconnects.yaml",
)
SUBMISSION_TEMP = Path("/tmp/spark")  # where v2.4.0 writes each submission's pod templates (fixed)
CONTROLLER_THREADS = 10  # the operator's default (--controller-threads)
START_TIMEOUT_SECONDS = 60.0
HTTP_CONFLICT = 409


def binary_path() -> Path:
    """Where the pinned operator binary is cached (it may not exist yet; see `ensure_binary`)."""
    return build.cache_root() / "bin" / f"spark-operator-{VERSION.lstrip('v')}" / "spark-operator"


def ensure_binary() -> Path:
    """Build the operator (its ``cmd/operator``) into the cache if missing; return its path."""
    return build.go_build_wrapped(MODULE, VERSION, MODULE_SUM, PACKAGE, binary_path())


def spark_home() -> Path:
    """The Spark distribution spark-submit runs from: the installed pyspark package."""
    import pyspark

    return Path(pyspark.__file__).parent


def install_crds(api: ApiClient, timeout_seconds: float = 30.0) -> None:
    """Create the operator's CRDs (from the module's source) if missing and wait until they are served."""
    bases = build.go_module_dir(MODULE, VERSION, MODULE_SUM) / "config" / "crd" / "bases"
    extensions = client.ApiextensionsV1Api(api)
    for file_name in CRD_FILES:
        manifest = yaml.safe_load((bases / file_name).read_text())
        try:
            extensions.create_custom_resource_definition(manifest)
        except ApiException as error:
            if error.status != HTTP_CONFLICT:
                raise
        deadline = time.monotonic() + timeout_seconds
        name = manifest["metadata"]["name"]
        while not _established(extensions.read_custom_resource_definition(name)):
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not established within {timeout_seconds}s")
            time.sleep(0.2)


def _established(definition: Any) -> bool:
    conditions = definition.status.conditions or [] if definition.status else []
    return any(condition.type == "Established" and condition.status == "True" for condition in conditions)


# --- pure ------------------------------------------------------------------------------------------


def application_manifest(name: str, image: str, main_file: str, pod_spec: dict[str, Any]) -> dict[str, Any]:
    """A streaming PySpark SparkApplication: cluster mode, one executor, restarted always (as a streaming
    job would be); `pod_spec` (e.g. node selector and tolerations) goes into the driver's pod template."""
    return {
        "apiVersion": f"{GROUP}/{API_VERSION}",
        "kind": KIND,
        "metadata": {"name": name},
        "spec": {
            "type": "Python",
            "pythonVersion": "3",
            "mode": "cluster",
            "image": image,
            "imagePullPolicy": "IfNotPresent",
            "mainApplicationFile": main_file,
            "sparkVersion": "4.3.0",
            "restartPolicy": {"type": "Always", "onFailureRetryInterval": 1, "onSubmissionFailureRetryInterval": 1},
            # spark-submit's Kubernetes client gives up on a request after 10 s by default: on a loaded machine
            # every submission then fails and is retried; a minute lets each go through once.
            "sparkConf": {
                "spark.kubernetes.submission.requestTimeout": "60000",
                "spark.kubernetes.submission.connectionTimeout": "60000",
            },
            "driver": {
                "cores": 1,
                "memory": "1g",
                "template": {"spec": {**pod_spec, "containers": [{"name": "spark-kubernetes-driver"}]}},
            },
            "executor": {"instances": 1, "cores": 1, "memory": "1g"},
        },
    }


def command(binary: Path, namespace: str, health_port: int) -> list[str]:
    """The controller watching one namespace, with its defaults otherwise (10 workers, UI Service on)."""
    return [
        str(binary),
        "controller",
        "start",
        f"--namespaces={namespace}",
        f"--controller-threads={CONTROLLER_THREADS}",
        f"--health-probe-bind-address=127.0.0.1:{health_port}",
        "--metrics-bind-address=0",
        "--leader-election=false",
        "--zap-log-level=info",
    ]


def environment(kubeconfig: Path, apiserver_url: str) -> dict[str, str]:
    """The controller's environment: its kubeconfig, and the in-cluster variables it builds the master URL
    (``k8s://https://host:port``) from, pointed at the control plane; spark-submit inherits both."""
    address = urlsplit(apiserver_url)
    return {
        "KUBECONFIG": str(kubeconfig),
        "KUBERNETES_SERVICE_HOST": str(address.hostname),
        "KUBERNETES_SERVICE_PORT": str(address.port),
        "SPARK_HOME": str(spark_home()),
        "SPARK_SUBMIT_OPTS": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
    }


# --- I/O -------------------------------------------------------------------------------------------


ACCOUNT = ("default", "spark-operator")


def token_kubeconfig(plane: ControlPlane) -> Path:
    """A kubeconfig with the token of a ServiceAccount bound to cluster-admin: Spark's Kubernetes client reads
    no ECDSA client key (the testbed's certificates are ECDSA), and this kubeconfig serves both processes."""
    namespace, name = ACCOUNT
    account: Any = {"metadata": {"name": name}}
    binding: Any = {
        "metadata": {"name": f"bench-{name}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
    }
    with plane.api_client() as api:
        for create in (
            lambda: client.CoreV1Api(api).create_namespaced_service_account(namespace, account),
            lambda: client.RbacAuthorizationV1Api(api).create_cluster_role_binding(binding),
        ):
            try:
                create()
            except ApiException as error:
                if error.status != HTTP_CONFLICT:
                    raise
    return plane.service_account_kubeconfig(namespace, name)


class SparkOperator(procs.Started):
    """The peer's controller, watching `namespace`, as a context manager (the spark-submit JVMs it runs are
    in its process group)."""

    def __init__(self, plane: ControlPlane, namespace: str, workdir: Path) -> None:
        self.plane = plane
        self.namespace = namespace
        self.workdir = workdir
        self.process: procs.Process | None = None
        self._submissions_before: set[str] = set()

    def start(self) -> SparkOperator:
        """Start it and wait until its health endpoint answers."""
        binary = ensure_binary()
        port = procs.free_port()
        self._submissions_before = set(os.listdir(SUBMISSION_TEMP)) if SUBMISSION_TEMP.exists() else set()
        env = {**os.environ, **environment(token_kubeconfig(self.plane), self.plane.url)}
        self.workdir.mkdir(parents=True, exist_ok=True)
        log = self.workdir / "spark-operator.log"
        self.process = procs.spawn("spark-operator", command(binary, self.namespace, port), log, env)
        procs.wait_until_healthy(
            self.process, lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), timeout_seconds=START_TIMEOUT_SECONDS
        )
        return self

    def stop(self) -> None:
        """Stop it (and any spark-submit still running), and remove the pod templates its submissions wrote."""
        if self.process is not None:
            procs.stop(self.process)
            self.process = None
        if SUBMISSION_TEMP.exists():
            for entry in set(os.listdir(SUBMISSION_TEMP)) - self._submissions_before:
                shutil.rmtree(SUBMISSION_TEMP / entry, ignore_errors=True)
            if not os.listdir(SUBMISSION_TEMP):
                SUBMISSION_TEMP.rmdir()
