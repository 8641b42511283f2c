"""The driver JVM started directly: the same command Spark's launcher builds, and a JVM that honours it."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest

from headrace.runtime import jvm

pytestmark = pytest.mark.spark
SPARK_HOME = os.environ.get("SPARK_HOME") or os.path.dirname(pyspark.__file__)
JAVA = jvm.java_executable(os.environ)


def _conf_dir(directory: Path, lines: list[str]) -> Path:
    directory.mkdir()
    (directory / "spark-defaults.conf").write_text("".join(f"{line}\n" for line in lines))
    return directory


def _expand(classpath: str) -> list[str]:
    entries = []
    for entry in classpath.split(os.pathsep):
        entries += (
            sorted(glob.glob(entry + ".jar")) if entry.endswith("*") else [entry.rstrip("/")]
        )  # as java expands it
    return entries


def submit_args_in(command: list[str], split: int) -> list[str]:
    """The launcher's SparkSubmit arguments with its --conf pairs in PySpark's order (it keeps them in a map)."""
    args = command[split + 1 :]
    pairs = {args[i + 1] for i in range(0, len(args) - 1, 2) if args[i] == "--conf"}
    order = ["spark.driver.extraJavaOptions=-Dheadrace.conf='a b'", "x.y=z"]
    assert pairs == set(order) and args[-1] == "pyspark-shell"
    return [command[split], *[item for pair in order for item in ("--conf", pair)], "pyspark-shell"]


def test_the_command_is_the_launchers_with_the_jars_first_and_the_conf_dir_last(tmp_path: Path) -> None:
    layout = jvm.record(tmp_path / "jvm", SPARK_HOME, JAVA)
    conf_dir = _conf_dir(
        tmp_path / "conf",
        [
            "spark.driver.memory 1536m",
            "spark.driver.defaultJavaOptions -Dheadrace.default=1",
            "spark.driver.extraJavaOptions -Dheadrace.file=1 -XX:+UseSerialGC",
            "spark.driver.extraClassPath /opt/extra/a.jar",
        ],
    )
    submit_args = ["--conf", "spark.driver.extraJavaOptions=-Dheadrace.conf='a b'", "--conf", "x.y=z", "pyspark-shell"]
    theirs = jvm.launcher_command(SPARK_HOME, JAVA, str(conf_dir), submit_args)
    conf = {
        **jvm.read_conf_file(conf_dir / "spark-defaults.conf"),
        "spark.driver.extraJavaOptions": "-Dheadrace.conf='a b'",
    }
    ours = jvm.driver_command(
        layout, java=JAVA, spark_home=SPARK_HOME, conf_dir=str(conf_dir), conf=conf, submit_args=submit_args, env={}
    )
    assert os.path.realpath(shutil.which(ours[0]) or ours[0]) == os.path.realpath(theirs[0])
    assert ours[1] == theirs[1] == "-cp"
    split = ours.index(jvm.SUBMIT_CLASS)
    assert ours[3:split] == theirs[3 : theirs.index(jvm.SUBMIT_CLASS)]  # heap, Java options (--conf wins), fixed ones
    assert ours[split:] == submit_args_in(theirs, split=theirs.index(jvm.SUBMIT_CLASS))  # SparkSubmit's arguments
    assert "-Xmx1536m" in ours and "-Dheadrace.conf=a b" in ours and "-Dheadrace.file=1" not in ours
    # The same entries; Spark's jars as recorded right after the extra classpath, the conf dir last.
    our_entries, their_entries = _expand(ours[2]), _expand(theirs[2])
    assert set(our_entries) == set(their_entries)
    assert our_entries[0] == "/opt/extra/a.jar"
    assert our_entries[1 : 1 + len(layout.jars)] == list(layout.jars)
    assert our_entries[-1] == str(conf_dir)


def test_the_previous_path_leaves_pyspark_alone(tmp_path: Path) -> None:
    import pyspark.context

    jvm.record(tmp_path / "jvm", SPARK_HOME, JAVA)
    before = pyspark.context.launch_gateway  # type: ignore[attr-defined]
    env = {
        "SPARK_HOME": SPARK_HOME,
        "SPARK_CONF_DIR": str(tmp_path),
        jvm.JVM_DIR_ENV: str(tmp_path / "jvm"),
        jvm.START_ENV: "spark-submit",
    }
    jvm.install(env)()
    assert pyspark.context.launch_gateway is before  # type: ignore[attr-defined]
    assert jvm.executor_conf(env) == {"spark.executorEnv.HEADRACE_JVM_START": "spark-submit"}
    assert jvm.executor_conf({}) == {}
    assert jvm.install({**env, jvm.START_ENV: "direct", jvm.JVM_DIR_ENV: str(tmp_path / "none")}) is not None
    assert pyspark.context.launch_gateway is before  # type: ignore[attr-defined]  # no layout: nothing installed


PROBE = """
import os, sys
from headrace.runtime import jvm
jvm.install(os.environ)
from pyspark.sql import SparkSession
spark = SparkSession.builder.master("local[1]").getOrCreate()
proc = spark.sparkContext._gateway.proc
cmdline = open(f"/proc/{proc.pid}/cmdline", "rb").read().split(b"\\0")
print(cmdline[0].decode(), int(b"org.apache.spark.deploy.SparkSubmit" in cmdline))
print(spark.sparkContext._jvm.java.lang.Runtime.getRuntime().maxMemory())
print(spark.sparkContext.getConf().get("spark.headrace.probe"))
print(spark.range(10).selectExpr("sum(id)").collect()[0][0])
spark.stop()
"""


@pytest.mark.timeout(300)
def test_pyspark_gets_a_jvm_started_directly_with_the_configured_heap(tmp_path: Path) -> None:
    jvm.record(tmp_path / "jvm", SPARK_HOME, JAVA)
    conf_dir = _conf_dir(tmp_path / "conf", ["spark.driver.memory 700m", "spark.headrace.probe from-the-file"])
    env = {
        **os.environ,
        "SPARK_HOME": SPARK_HOME,
        "SPARK_CONF_DIR": str(conf_dir),
        jvm.JVM_DIR_ENV: str(tmp_path / "jvm"),
    }
    env.pop(jvm.START_ENV, None)
    output = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=280, check=True
    ).stdout.splitlines()
    program, submit = output[0].split()
    assert os.path.basename(program) == "java" and submit == "1"  # the JVM itself, no spark-submit script
    assert 600 * 2**20 < int(output[1]) <= 700 * 2**20  # -Xmx700m
    assert output[2:] == ["from-the-file", "45"]
