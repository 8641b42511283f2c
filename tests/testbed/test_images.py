"""The images: the pure cache and naming rules, and the built images run under a real containerd.

The e2e tests build both targets (cached under ~/.cache/headrace/images), start a throw-away
containerd of their own (temporary root, state and socket; stopped, unmounted and removed even on
failure), import the archives and run containers with ``ctr run --rm``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

import pytest

from headrace.api import runtime_contract
from testbed import images, kafka, procs

ROOT = Path(__file__).resolve().parents[2]
# One containerd namespace per session; runc names its cgroups after it.
NAMESPACE = f"headrace-image-tests-{os.getpid()}"
CGROUP_ROOT = Path("/sys/fs/cgroup")


# --- pure rules -------------------------------------------------------------------------------------


def test_image_refs_name_the_package_version_and_dev() -> None:
    import headrace

    assert images.image_ref("spark") == f"localhost/headrace/spark:{headrace.__version__}"
    assert images.image_ref("operator", "dev") == "localhost/headrace/operator:dev"
    with pytest.raises(ValueError, match="unknown image target"):
        images.image_ref("driver")


def test_inputs_digest_ignores_order_and_sees_every_byte_and_name() -> None:
    files = [("a.py", b"x = 1\n"), ("b/c.txt", b"c")]
    digest = images.inputs_digest(files, salt="spark")
    assert images.inputs_digest(list(reversed(files)), salt="spark") == digest
    assert images.inputs_digest([("a.py", b"x = 2\n"), ("b/c.txt", b"c")], salt="spark") != digest
    assert images.inputs_digest([("a2.py", b"x = 1\n"), ("b/c.txt", b"c")], salt="spark") != digest
    assert images.inputs_digest(files, salt="operator") != digest
    # Length prefixes keep a name/content boundary shift from colliding.
    assert images.inputs_digest([("ab", b"c")]) != images.inputs_digest([("a", b"bc")])


def test_caches_and_bytecode_are_not_build_inputs() -> None:
    assert images.is_build_input(Path("operator/headrace/core/planner.py"))
    assert not images.is_build_input(Path("operator/headrace/__pycache__/x.cpython-311.pyc"))
    assert not images.is_build_input(Path("apps/x/.pytest_cache/v/cache"))
    assert not images.is_build_input(Path("apps/x/y.pyc"))


def test_ca_bundle_follows_pip_then_ssl_variables_then_the_system_bundle(tmp_path: Path) -> None:
    system = tmp_path / "system.crt"
    assert images.ca_bundle({}, default=system) is None
    system.write_text("bundle")
    assert images.ca_bundle({}, default=system) == system
    assert images.ca_bundle({"SSL_CERT_FILE": "/b"}, default=system) == Path("/b")
    assert images.ca_bundle({"SSL_CERT_FILE": "/b", "PIP_CERT": "/a"}, default=system) == Path("/a")


def test_build_command_mounts_the_ca_only_when_there_is_one() -> None:
    with_ca = images.podman_build_command("spark", Path("/repo"), Path("/etc/ca.crt"))
    assert with_ca[:2] == ["podman", "build"]
    assert "--target" in with_ca and with_ca[with_ca.index("--target") + 1] == "spark"
    assert f"/etc/ca.crt:{images.BUILD_CA_PATH}:ro" in with_ca
    assert f"PIP_CERT={images.BUILD_CA_PATH}" in with_ca
    assert f"BASE={images.BASE_IMAGE}" in with_ca
    assert with_ca[-1] == "/repo"
    without_ca = images.podman_build_command("operator", Path("/repo"), None)
    assert not any("build-ca" in argument for argument in without_ca)


def test_index_names_the_manifest_once_per_reference() -> None:
    index = {"schemaVersion": 2, "manifests": [{"digest": "sha256:1", "annotations": {"x": "y"}}]}
    named = images.index_with_references(index, ["r:1", "r:dev"])
    assert [m["annotations"][images._REF_NAME] for m in named["manifests"]] == ["r:1", "r:dev"]
    assert all(m["digest"] == "sha256:1" and m["annotations"]["x"] == "y" for m in named["manifests"])
    assert "org.opencontainers.image.ref.name" not in index["manifests"][0]["annotations"]


def test_an_archives_image_id_is_its_config_digest(tmp_path: Path) -> None:
    """What a push compares with podman's store: the tag may name another worktree's build by then."""
    files = {
        "./oci-layout": b'{"imageLayoutVersion": "1.0.0"}',
        "./index.json": json.dumps({"manifests": [{"digest": "sha256:aa11"}, {"digest": "sha256:aa11"}]}).encode(),
        "blobs/sha256/aa11": json.dumps({"config": {"digest": "sha256:c0ffee"}, "layers": []}).encode(),
        "blobs/sha256/c0ffee": b"{}",
    }
    archive = tmp_path / "image.oci.tar"
    with tarfile.open(archive, "w") as writer:
        for name, data in files.items():
            member = tarfile.TarInfo(name)
            member.size = len(data)
            writer.addfile(member, io.BytesIO(data))
    assert images.archive_image_id(archive) == "c0ffee"


def test_dockerignore_admits_exactly_the_hashed_inputs() -> None:
    lines = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()]
    admitted = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    # The Dockerfile and .dockerignore are read by the builder, not sent in the context.
    assert admitted == set(images.BUILD_INPUTS) - {"Dockerfile", ".dockerignore"}


def test_image_connector_matches_the_one_the_runtime_tests_use() -> None:
    namespace = {"m": "http://maven.apache.org/POM/4.0.0"}
    pom = ElementTree.parse(ROOT / "docker/kafka-connector/pom.xml").getroot()  # noqa: S314 (our own file)
    properties = {child.tag.split("}")[1]: child.text for child in pom.find("m:properties", namespace) or []}
    _, connector, connector_version = kafka.SPARK_KAFKA_CONNECTOR.split(":")
    assert connector == f"spark-sql-kafka-0-10_{properties['scala.binary.version']}"
    assert properties["connector.version"] == connector_version
    pinned = {c.split(":")[1]: c.split(":")[2] for c in kafka.SPARK_KAFKA_PINNED}
    assert pinned == {
        f"spark-token-provider-kafka-0-10_{properties['scala.binary.version']}": properties["token-provider.version"]
    }


def test_the_operator_never_imports_the_asyncio_kubernetes_client_the_image_drops() -> None:
    offenders = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "operator/headrace").rglob("*.py")
        if re.search(r"kubernetes\.aio|from kubernetes import .*\baio\b", path.read_text())
    ]
    assert offenders == []


def test_the_image_pins_what_pyproject_asks_for() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "pyspark==4.3.0" in pyproject["project"]["optional-dependencies"]["runtime"]
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert dockerfile.startswith("ARG BASE=docker.io/library/debian:bookworm-slim\n")
    assert "--extra runtime" in dockerfile and "--require-hashes" in dockerfile


# --- a throw-away containerd -----------------------------------------------------------------------


@dataclass(frozen=True)
class Containerd:
    """A running private containerd: its socket and where its log goes."""

    address: str
    log: Path

    def ctr(self, *arguments: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """Run ``ctr`` against this containerd in the test namespace."""
        command = ["ctr", "-a", self.address, "-n", NAMESPACE, *arguments]
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)

    def run(self, image: str, *command: str, env: dict[str, str] | None = None, timeout: float = 300) -> str:
        """``ctr run --rm`` a container on the host network; returns its output, fails on a non-zero exit."""
        name = f"t{time.monotonic_ns()}"
        variables = [f"--env={key}={value}" for key, value in (env or {}).items()]
        done = self.ctr("run", "--rm", "--net-host", *variables, image, name, *command, timeout=timeout)
        output = done.stdout + done.stderr
        assert done.returncode == 0, f"{command} exited {done.returncode}:\n{output[-4000:]}"
        return output


def _containerd_config(directory: Path) -> str:
    return f"""version = 2
root = "{directory / "root"}"
state = "{directory / "state"}"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "{directory / "containerd.sock"}"
[ttrpc]
  address = "{directory / "containerd.sock.ttrpc"}"
[plugins."io.containerd.internal.v1.opt"]
  path = "{directory / "opt"}"
"""


def _wait_until_serving(process: subprocess.Popen[bytes], address: str, log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"containerd exited {process.returncode}: {log.read_text()[-2000:]}")
        probe = subprocess.run(["ctr", "-a", address, "version"], capture_output=True, check=False)
        if probe.returncode == 0:
            return
        time.sleep(0.2)
    raise RuntimeError(f"containerd did not serve on {address} within 30s: {log.read_text()[-2000:]}")


def _kill_shims(address: str) -> None:
    """Shims outlive containerd by design; stop those serving our socket (matched by their pid's cmdline)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            arguments = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if arguments and arguments[0].endswith(b"containerd-shim-runc-v2") and address.encode() in arguments:
            os.kill(int(entry.name), signal.SIGKILL)


def _remove_cgroups(name: str) -> None:
    """runc leaves the namespace's (empty) cgroup in every hierarchy; remove them, innermost first."""
    for top in CGROUP_ROOT.glob(f"*/{name}"):
        for directory, _, _ in sorted(os.walk(top), key=lambda entry: -len(entry[0])):
            with contextlib.suppress(OSError):
                os.rmdir(directory)


def _unmount_below(directory: Path) -> None:
    mount_points = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    for mount_point in sorted((m for m in mount_points if m.startswith(f"{directory}/")), reverse=True):
        subprocess.run(["umount", "-l", mount_point], check=False)


@pytest.fixture(scope="module")
def containerd() -> Iterator[Containerd]:
    """A private containerd (no CRI) on a short temporary socket path; everything is undone afterwards."""
    if shutil.which("containerd") is None or shutil.which("ctr") is None:
        pytest.fail("containerd and ctr are required (Debian package containerd)")
    directory = Path(tempfile.mkdtemp(prefix="hr-ctrd-", dir="/tmp"))
    config = directory / "config.toml"
    config.write_text(_containerd_config(directory))
    log = directory / "containerd.log"
    address = str(directory / "containerd.sock")
    with log.open("wb") as output:
        process = subprocess.Popen(
            ["containerd", "--config", str(config)], stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        _wait_until_serving(process, address, log)
        yield Containerd(address, log)
    finally:
        _kill_shims(address)
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        _unmount_below(directory)
        shutil.rmtree(directory, ignore_errors=True)
        _remove_cgroups(NAMESPACE)


@pytest.fixture(scope="module")
def snapshot() -> Iterator[Path]:
    """A frozen copy of the build inputs, so other people's edits during the session change nothing."""
    directory = Path(tempfile.mkdtemp(prefix="hr-images-tree-"))
    try:
        for name, _ in images._input_files(ROOT):
            (directory / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, directory / name)
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("HEADRACE_REPOSITORY", str(directory))
            yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="module")
def archives(snapshot: Path) -> dict[str, Path]:
    """Both image archives for the snapshot (built now when missing, else reused)."""
    return images.build_all()


@pytest.fixture(scope="module")
def operator_image(containerd: Containerd, archives: dict[str, Path]) -> str:
    """The operator image imported into the private containerd, by its ``:dev`` tag."""
    images.import_into_containerd(archives["operator"], containerd.address, NAMESPACE)
    return images.image_ref("operator", images.DEV_TAG)


@pytest.fixture(scope="module")
def spark_image(containerd: Containerd, archives: dict[str, Path]) -> str:
    """The spark image imported into the private containerd, by its version tag."""
    images.import_into_containerd(archives["spark"], containerd.address, NAMESPACE)
    return images.image_ref("spark")


# --- the images ------------------------------------------------------------------------------------


@pytest.mark.e2e
def test_archives_are_cached_by_the_tree(snapshot: Path, archives: dict[str, Path]) -> None:
    assert images.repository_root() == snapshot
    started = time.monotonic()
    assert images.build_all() == archives
    assert time.monotonic() - started < 10, "an unchanged tree must not rebuild"
    for target, archive in archives.items():
        with tarfile.open(archive) as tar:
            index = json.load(tar.extractfile("index.json"))  # type: ignore[arg-type]
        names = {m["annotations"][images._REF_NAME] for m in index["manifests"]}
        assert names == {images.image_ref(target), images.image_ref(target, images.DEV_TAG)}


@pytest.mark.e2e
def test_both_tags_are_imported(containerd: Containerd, operator_image: str, spark_image: str) -> None:
    listed = containerd.ctr("images", "list", "--quiet").stdout.split()
    for target in images.TARGETS:
        assert images.image_ref(target) in listed
        assert images.image_ref(target, images.DEV_TAG) in listed


@pytest.mark.e2e
def test_operator_image_runs_headrace_as_non_root_without_java(containerd: Containerd, operator_image: str) -> None:
    script = (
        "import os, shutil, headrace, kopf, kubernetes, pydantic, prometheus_client, yaml;"
        "print('version', headrace.__version__); print('uid', os.getuid());"
        "print('java', shutil.which('java'), os.path.exists('/usr/lib/jvm'))"
    )
    output = containerd.run(operator_image, "/opt/venv/bin/python", "-c", script)
    import headrace

    assert f"version {headrace.__version__}" in output
    assert "uid 10001" in output
    assert "java None False" in output


@pytest.mark.e2e
def test_spark_image_has_the_expected_environment(containerd: Containerd, spark_image: str) -> None:
    script = (
        'echo "uid=$(id -u) pwd=$(pwd) home=$SPARK_HOME py=$PYSPARK_PYTHON";'
        "ls /opt/headrace/apps >/dev/null && echo apps-present;"
        "ls $SPARK_HOME/jars | grep -E '^(spark-sql-kafka|kafka-clients|commons-pool2|spark-token-provider)';"
        "java --list-modules | grep -o jdk.incubator.vector"
    )
    output = containerd.run(spark_image, "bash", "-c", script)
    assert "uid=185 pwd=/opt/headrace home=/opt/venv/lib/python3.11/site-packages/pyspark" in output
    assert "py=/opt/venv/bin/python" in output
    assert "apps-present" in output
    for jar in ("spark-sql-kafka-0-10_2.13", "kafka-clients", "commons-pool2", "spark-token-provider-kafka-0-10_2.13"):
        assert jar in output
    assert "jdk.incubator.vector" in output


_BATCH_JOB = """
from pyspark.sql import SparkSession
spark = SparkSession.builder.master("local[2]").appName("image-test").getOrCreate()
total = spark.range(1000).selectExpr("sum(id) AS s").first()["s"]
squares = spark.sparkContext.parallelize(range(10), 2).map(lambda x: x * x).sum()
kafka = spark.read.format("kafka").option("kafka.bootstrap.servers", "127.0.0.1:9").option("subscribe", "t")
print("batch", total, squares, kafka.load().columns)
spark.stop()
"""


@pytest.mark.e2e
def test_spark_image_runs_a_pyspark_batch_job_with_the_kafka_source(containerd: Containerd, spark_image: str) -> None:
    output = containerd.run(
        spark_image, "/opt/venv/bin/python", "-c", _BATCH_JOB, env={"SPARK_LOCAL_IP": "127.0.0.1"}, timeout=240
    )
    assert "batch 499500 285 ['key', 'value', 'topic', 'partition', 'offset', 'timestamp', 'timestampType']" in output


@pytest.mark.e2e
def test_spark_entrypoint_runs_the_headrace_runtime_for_a_driver(containerd: Containerd, spark_image: str) -> None:
    # `ctr run` with a command replaces the whole process, so name the image's entrypoint explicitly.
    entrypoint = ["/usr/bin/tini", "-s", "--", "/opt/headrace/bin/spark-entrypoint"]
    done = containerd.ctr("run", "--rm", "--net-host", spark_image, f"t{time.monotonic_ns()}", *entrypoint)
    output = done.stdout + done.stderr
    assert done.returncode == runtime_contract.EXIT_USAGE, output[-3000:]
    assert "python -m headrace.runtime" in output


@pytest.mark.e2e
def test_spark_entrypoint_driver_mode_is_spark_submit(containerd: Containerd, spark_image: str) -> None:
    """`driver` (what spark-submit --deploy-mode cluster puts in a driver pod) runs Spark's spark-submit."""
    entrypoint = ["/usr/bin/tini", "-s", "--", "/opt/headrace/bin/spark-entrypoint"]
    output = containerd.run(spark_image, *entrypoint, "driver", "--version", timeout=120)
    assert re.search(r"version 4\.3\.0", output), output[-3000:]


# --- the executor entrypoint against a real driver ----------------------------------------------------

_DRIVER = """
import sys
from pyspark.sql import SparkSession
master, port = sys.argv[1], sys.argv[2]
spark = (
    SparkSession.builder.master(master).appName("executor-entrypoint-test")
    .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    .config("spark.driver.port", port).config("spark.executor.memory", "512m")
    .getOrCreate()
)
sc = spark.sparkContext
print("APP", sc.applicationId, flush=True)
print("JAVA_OPTIONS", sc.getConf().get("spark.executor.defaultJavaOptions", ""), flush=True)
total = spark.range(1000).selectExpr("sum(id) AS s").first()["s"]
squares = sc.parallelize(range(10), 2).map(lambda x: x * x).sum()
print("RESULT", total, squares, flush=True)
spark.stop()
"""


def _spawn(command: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    with log.open("wb") as output:
        return subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, start_new_session=True, env=env)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _wait_for_line(log: Path, prefix: str, process: subprocess.Popen[bytes], timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith(prefix):
                return line[len(prefix) :].strip()
        if process.poll() is not None:
            break
        time.sleep(0.5)
    raise AssertionError(f"no {prefix!r} line in {log}:\n{log.read_text(errors='replace')[-4000:]}")


def _executor_environment(driver_port: int, application_id: str, java_options: str) -> dict[str, str]:
    """What Spark's Kubernetes backend sets on an executor container (BasicExecutorFeatureStep)."""
    environment = {
        "SPARK_DRIVER_URL": f"spark://CoarseGrainedScheduler@127.0.0.1:{driver_port}",
        "SPARK_EXECUTOR_ID": "1",
        "SPARK_EXECUTOR_CORES": "1",
        "SPARK_EXECUTOR_MEMORY": "512m",
        "SPARK_APPLICATION_ID": application_id,
        "SPARK_EXECUTOR_POD_IP": "127.0.0.1",
        "SPARK_EXECUTOR_POD_NAME": "image-test-exec-1",
        "SPARK_RESOURCE_PROFILE_ID": "0",
    }
    for number, option in enumerate(java_options.split()):
        environment[f"SPARK_JAVA_OPT_{number}"] = option
    return environment


@pytest.mark.e2e
def test_spark_image_executor_serves_a_real_driver(containerd: Containerd, spark_image: str, tmp_path: Path) -> None:
    """A host driver (standalone master, no workers) gets its only executor from the image's `executor` mode."""
    from pyspark.find_spark_home import _find_spark_home

    spark_home = _find_spark_home()
    master_port, driver_port = procs.free_port(), procs.free_port()
    master_command = [f"{spark_home}/bin/spark-class", "org.apache.spark.deploy.master.Master"]
    master_command += ["--host", "127.0.0.1", "--port", str(master_port), "--webui-port", str(procs.free_port())]
    master = _spawn(master_command, tmp_path / "master.log")
    driver_script = tmp_path / "driver.py"
    driver_script.write_text(_DRIVER)
    driver_command = [sys.executable, str(driver_script), f"spark://127.0.0.1:{master_port}", str(driver_port)]
    # Python tasks run with the driver's PYSPARK_PYTHON: the image's interpreter.
    driver_environment = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": "/opt/venv/bin/python"}
    driver: subprocess.Popen[bytes] | None = None
    executor: subprocess.Popen[bytes] | None = None
    try:
        driver = _spawn(driver_command, tmp_path / "driver.log", env=driver_environment)
        application_id = _wait_for_line(tmp_path / "driver.log", "APP ", driver, 120)
        java_options = _wait_for_line(tmp_path / "driver.log", "JAVA_OPTIONS", driver, 10)
        variables = _executor_environment(driver_port, application_id, java_options)
        entrypoint = ["/usr/bin/tini", "-s", "--", "/opt/headrace/bin/spark-entrypoint", "executor"]
        env_flags = [f"--env={key}={value}" for key, value in variables.items()]
        executor_command = ["ctr", "-a", containerd.address, "-n", NAMESPACE, "run", "--rm", "--net-host"]
        executor_command += [*env_flags, spark_image, f"exec{time.monotonic_ns()}", *entrypoint]
        executor = _spawn(executor_command, tmp_path / "executor.log")
        result = _wait_for_line(tmp_path / "driver.log", "RESULT ", driver, 180)
        assert result == "499500 285", (tmp_path / "executor.log").read_text()[-3000:]
        executor_log = (tmp_path / "executor.log").read_text(errors="replace")
        assert "KubernetesExecutorBackend" in executor_log or "Successfully registered with driver" in executor_log
    finally:
        for process in (executor, driver, master):
            if process is not None:
                _stop(process)


def test_an_archive_handed_out_is_kept_by_a_concurrent_sessions_clean_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An archive built long ago but handed out again is in use: a build of another tree then removes only the
    archives nobody took for a while (a concurrent build removed one between its hand-out and its import)."""
    old, other = (
        tmp_path / "operator-0.1.0-0123456789abcdef.oci.tar",
        tmp_path / "operator-0.1.0-fedcba9876543210.oci.tar",
    )
    for archive in (old, other):
        archive.write_bytes(b"archive")
        os.utime(archive, (time.time() - 2 * images.STALE_ARCHIVE_SECONDS,) * 2)
    monkeypatch.setattr(images, "images_cache", lambda: tmp_path)
    monkeypatch.setattr(images, "archive_path", lambda target, root: old)
    assert images.build_image("operator") == old
    images._remove_stale_archives(
        "operator", keep=tmp_path / "operator-0.1.0-00000000000000ff.oci.tar", now=time.time()
    )
    assert old.exists() and not other.exists()
