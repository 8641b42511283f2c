"""Spark configuration that only the driver pod knows, merged into a private SPARK_CONF_DIR.

Owns: reading the operator's mounted ``spark-defaults.conf``, adding the settings whose values come
from Secrets (``spec.sparkConfFromSecrets``, passed as secretKeyRef variables) and the runtime's keys
(state store backend, state partitions, driver host, pod name, master) and writing the merged file into
the runtime's own configuration directory before the JVM starts (the file format is
``headrace.api.spark_defaults``). The runtime alone sets the state keys: the operator passes them
as HEADRACE_STATE_BACKEND and HEADRACE_STATE_PARTITIONS.
Never: starts Spark, or overrides a master the user or operator configured.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path

from headrace.api import runtime_contract as contract
from headrace.api import spark_defaults
from headrace.runtime.settings import RuntimeSettings

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
HDFS_PROVIDER = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
DEFAULTS_FILE = "spark-defaults.conf"
HEADER = "Written by headrace.runtime: the operator's spark-defaults plus what only the pod knows."


def state_store_conf(settings: RuntimeSettings) -> dict[str, str]:
    """The state store backend and partitions the environment asks for."""
    conf: dict[str, str] = {}
    if settings.state_backend == "hdfs":
        conf["spark.sql.streaming.stateStore.providerClass"] = HDFS_PROVIDER
    else:
        conf["spark.sql.streaming.stateStore.providerClass"] = ROCKSDB_PROVIDER
        conf["spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"] = "true"
    if settings.state_partitions is not None:
        conf["spark.sql.shuffle.partitions"] = str(settings.state_partitions)
    return conf


def pod_conf(settings: RuntimeSettings, base: Mapping[str, str]) -> dict[str, str]:
    """Driver networking and ownership that only the pod knows; a configured master wins."""
    conf: dict[str, str] = {}
    if settings.pod_ip:
        conf["spark.driver.host"] = settings.pod_ip
        # Bind to the pod IP, not 0.0.0.0: with spark.kubernetes.executor.useDriverPodIP, Spark 4 advertises the
        # bind address to executors, and 0.0.0.0 sends them nowhere ("Failed to connect to /0.0.0.0:7078").
        conf["spark.driver.bindAddress"] = settings.pod_ip
        conf["spark.driver.port"] = base.get("spark.driver.port", str(contract.DRIVER_PORT))
        conf["spark.blockManager.port"] = base.get("spark.blockManager.port", str(contract.BLOCK_MANAGER_PORT))
    if settings.pod_name:
        conf["spark.kubernetes.driver.pod.name"] = settings.pod_name
    if "spark.master" not in base:
        if settings.in_pod:
            conf["spark.master"] = f"k8s://https://{settings.kubernetes_host}:{settings.kubernetes_port or '443'}"
        else:
            conf["spark.master"] = settings.local_master
    return conf


# Defaults for a short cold start, each overridable in spec.sparkConf. The SparkContext does not wait for
# executors to register (Spark on Kubernetes waits for 80% of them, up to 30 s): the script builds its
# queries, the first batch is planned and the state checkpoint read while the executor pods start; tasks
# wait for the first executor as they would anyway.
COLD_START_DEFAULTS = {"spark.scheduler.minRegisteredResourcesRatio": "0"}
# Hadoop's local file system without its native library forks `chmod` for every file and directory it
# creates (checkpoint, state changelog, sink and .crc files on file:// paths: a PVC, a hostPath), 5-15 ms
# each. The image's jar (docker/local-fs) sets permissions through java.nio instead; used when present.
LOCAL_FS_JAR = "headrace-local-fs.jar"
LOCAL_FS_CONF = {
    "spark.hadoop.fs.file.impl": "dev.headrace.hadoop.NioLocalFileSystem",
    "spark.hadoop.fs.AbstractFileSystem.file.impl": "dev.headrace.hadoop.NioLocalFs",
}


def local_fs_conf(spark_home: str | None) -> dict[str, str]:
    """The java.nio local file system's keys when `$SPARK_HOME/jars` holds its jar (driver and executors share
    the image), else none."""
    if spark_home and os.path.isfile(os.path.join(spark_home, "jars", LOCAL_FS_JAR)):
        return dict(LOCAL_FS_CONF)
    return {}


def merged_conf(settings: RuntimeSettings, base: Mapping[str, str]) -> dict[str, str]:
    """The operator's configuration with the runtime's keys added on top."""
    merged = dict(base)
    merged.setdefault("spark.app.name", settings.app_name)
    merged.setdefault("spark.ui.showConsoleProgress", "false")
    for key, value in COLD_START_DEFAULTS.items():
        merged.setdefault(key, value)
    merged.update(settings.secret_conf)  # spec.sparkConfFromSecrets (the operator checked the keys)
    merged.update(state_store_conf(settings))
    merged.update(pod_conf(settings, base))
    return merged


def prepare_conf_dir(
    settings: RuntimeSettings, source_dir: str | None, target_dir: Path, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Copy the operator's conf dir into ``target_dir`` and write the merged spark-defaults there.

    ``extra`` is added where the configuration has no such key (the JVM start's executor switch).

    Returns the merged configuration. The caller points ``SPARK_CONF_DIR`` at ``target_dir``.
    """
    target_dir.mkdir(parents=True, exist_ok=True)
    base: dict[str, str] = {}
    if source_dir and os.path.isdir(source_dir):
        for entry in Path(source_dir).iterdir():
            if entry.is_file() and entry.name != DEFAULTS_FILE:
                shutil.copy2(entry, target_dir / entry.name)
        defaults = Path(source_dir) / DEFAULTS_FILE
        if defaults.is_file():
            base = spark_defaults.parse(defaults.read_text(encoding="utf-8"))
    conf = merged_conf(settings, base)
    target_dir.chmod(0o700)  # it may hold values from Secrets: readable by the runtime's user only
    for key, value in (extra or {}).items():
        conf.setdefault(key, value)
    (target_dir / DEFAULTS_FILE).write_text(spark_defaults.render(conf, header=HEADER), encoding="utf-8")
    return conf
