"""Hadoop's local file system from the image's jar (docker/local-fs): no forked `chmod` per file written.

The jar is compiled here from the image's sources with this machine's JDK (skipped without `javac`);
a real local Spark session writes through Hadoop's FileSystem, FileContext and a streaming query with
its checkpoint, with a `chmod` on PATH that logs every fork.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest

from headrace.runtime import sparkconf

pytestmark = pytest.mark.spark
REPOSITORY = Path(__file__).resolve().parents[2]
SOURCES = REPOSITORY / "docker" / "local-fs" / "src"
SPARK_HOME = os.environ.get("SPARK_HOME") or os.path.dirname(pyspark.__file__)
JOB = Path(__file__).parent / "jobs" / "local_fs_forks.py"


@pytest.fixture(scope="module")
def jar(tmp_path_factory: pytest.TempPathFactory) -> Path:
    javac, jar_tool = shutil.which("javac"), shutil.which("jar")
    if javac is None or jar_tool is None:
        pytest.skip("no JDK (javac) on this machine; the image compiles the jar itself")
    build = tmp_path_factory.mktemp("local-fs")
    sources = sorted(str(path) for path in SOURCES.rglob("*.java"))
    classpath = os.path.join(SPARK_HOME, "jars", "*")
    compile_command = [javac, "--release", "17", "-nowarn", "-cp", classpath, "-d", str(build / "classes"), *sources]
    subprocess.run(compile_command, check=True)
    target = build / sparkconf.LOCAL_FS_JAR
    subprocess.run([jar_tool, "--create", "--file", str(target), "-C", str(build / "classes"), "."], check=True)
    return target


def test_the_keys_are_set_only_when_spark_has_the_jar(tmp_path: Path) -> None:
    (tmp_path / "jars").mkdir()
    assert sparkconf.local_fs_conf(str(tmp_path)) == {}
    assert sparkconf.local_fs_conf(None) == {}
    (tmp_path / "jars" / sparkconf.LOCAL_FS_JAR).write_bytes(b"")
    assert sparkconf.local_fs_conf(str(tmp_path)) == sparkconf.LOCAL_FS_CONF


def test_files_are_written_without_forking_chmod_and_with_hadoops_modes(jar: Path, tmp_path: Path) -> None:
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "chmod").write_text('#!/bin/sh\necho "$@" >> "$CHMOD_LOG"\nexec /bin/chmod "$@"\n')
    (shim / "chmod").chmod(0o755)
    conf = tmp_path / "conf"
    conf.mkdir()
    local_fs = [f"{key} {value}" for key, value in sparkconf.LOCAL_FS_CONF.items()]
    lines = [f"spark.driver.extraClassPath {jar}", *local_fs]
    (conf / "spark-defaults.conf").write_text("".join(f"{line}\n" for line in lines))
    env = {
        **os.environ,
        "PATH": f"{shim}{os.pathsep}{os.environ['PATH']}",
        "CHMOD_LOG": str(tmp_path / "chmod.log"),
        "SPARK_CONF_DIR": str(conf),
    }
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, str(JOB), str(out)], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["file_system"] == "dev.headrace.hadoop.NioLocalFileSystem"
    assert result["hadoop_forks"] >= 4  # Hadoop's own: a chmod per file and .crc written (the shim sees them)
    assert result["session_forks"] == 0
    assert result["stream_forks"] == 0  # checkpoint (FileContext), state-less sink files, their .crc
    assert result["session_modes"] == result["hadoop_modes"]
    assert any(name.endswith(".crc") for name in result["session_modes"])  # still checksummed
