"""The driver's JVM started directly, with a class-data sharing archive: no launcher JVM first.

Owns: the java command line that ``spark-submit`` would have Spark's launcher
(``org.apache.spark.launcher.Main``) print for PySpark's gateway, built here instead: the launcher's
fixed JVM options are recorded once at image build (``record``), the rest (heap, the driver's Java
options, classpath) comes from the merged Spark configuration exactly as the launcher reads it.
Spark's jars come first, in the order recorded at build, and the configuration directory last, so the
image's class-data sharing archive (dumped at build by ``train``) matches the classpath; starting that
JVM and handing PySpark a gateway connected to it.
Never: changes what Spark is configured with; anything it cannot reproduce (``spark-env.sh`` or
``java-opts`` in the configuration directory, no recorded layout, ``HEADRACE_JVM_START=spark-submit``)
falls back to PySpark's own ``spark-submit`` path.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import logging
import os
import shlex
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from headrace.api import runtime_contract as contract

log = logging.getLogger(__name__)

JVM_DIR_ENV = "HEADRACE_JVM_DIR"  # where the image keeps the recorded layout and the archive
DEFAULT_JVM_DIR = "/opt/headrace/jvm"
START_ENV = contract.ENV_JVM_START  # "direct" (default) or "spark-submit": the previous cold path, no archive
DUMP_ENV = "HEADRACE_CDS_DUMP"  # image build only: dump a class-data sharing archive here at the JVM's exit
OPTIONS_FILE = "java-options"  # the launcher's fixed options, one a line
CLASSPATH_FILE = "classpath"  # Spark's jars at build, one a line, in classpath order
ARCHIVE_FILE = "spark.jsa"  # dynamic class-data sharing archive over that classpath
SUBMIT_CLASS = "org.apache.spark.deploy.SparkSubmit"
LAUNCHER_CLASS = "org.apache.spark.launcher.Main"
SCALA_VERSION = "2.13"
DEFAULT_MEMORY = "1g"
GATEWAY_WAIT_SECONDS = 0.05
DUMP_WAIT_SECONDS = 300.0
# Files in the configuration directory that only spark-class/the launcher would honour.
UNSUPPORTED_CONF_FILES = ("spark-env.sh", "java-opts")


@dataclass(frozen=True)
class Layout:
    """What the image recorded at build: the launcher's fixed options, Spark's jars, the archive."""

    options: tuple[str, ...]
    jars: tuple[str, ...]
    archive: Path | None


def jvm_dir(env: Mapping[str, str]) -> Path:
    return Path(env.get(JVM_DIR_ENV) or DEFAULT_JVM_DIR)


def direct_start_enabled(env: Mapping[str, str]) -> bool:
    return env.get(START_ENV, "direct") != "spark-submit"


def executor_conf(env: Mapping[str, str]) -> dict[str, str]:
    """The executors follow the driver's switch: the previous path starts them without the archive too."""
    return {} if direct_start_enabled(env) else {f"spark.executorEnv.{START_ENV}": "spark-submit"}


def load_layout(directory: Path) -> Layout | None:
    """The recorded layout, or None when the image has none (then PySpark's own path is used)."""
    try:
        options = (directory / OPTIONS_FILE).read_text(encoding="utf-8").splitlines()
        jars = (directory / CLASSPATH_FILE).read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    archive = directory / ARCHIVE_FILE
    return Layout(tuple(o for o in options if o), tuple(j for j in jars if j), archive if archive.is_file() else None)


def spark_jars(spark_home: str) -> list[str]:
    return sorted(glob.glob(os.path.join(spark_home, "jars", "*.jar")))


def jar_classpath(layout: Layout, spark_home: str) -> list[str]:
    """The recorded jars that still exist, in their order, then any jar added since (sorted)."""
    present = spark_jars(spark_home)
    recorded = [jar for jar in layout.jars if os.path.isfile(jar)]
    known = set(recorded)
    return recorded + [jar for jar in present if jar not in known]


def _split_paths(value: str | None) -> list[str]:
    return [entry for entry in (value or "").split(os.pathsep) if entry]


def driver_classpath(
    layout: Layout, spark_home: str, conf_dir: str, conf: Mapping[str, str], env: Mapping[str, str]
) -> str:
    """The launcher's entries, reordered: extra classpath, Spark's jars, Hadoop/YARN conf, the conf dir last.

    The launcher puts the configuration directory before the jars; none of Spark's jars carries a file
    a configuration directory holds (log4j2.properties, core-site.xml, ...), so the order does not
    change what is loaded, and Spark's jars stay a prefix of the classpath, as the archive needs.
    """
    entries = [
        *_split_paths(env.get("SPARK_CLASSPATH")),
        *_split_paths(conf.get("spark.driver.extraClassPath")),
        *jar_classpath(layout, spark_home),
        *_split_paths(env.get("HADOOP_CONF_DIR")),
        *_split_paths(env.get("YARN_CONF_DIR")),
        *_split_paths(env.get("SPARK_DIST_CLASSPATH")),
        conf_dir,
    ]
    return os.pathsep.join(entries)


def archive_options(layout: Layout, env: Mapping[str, str]) -> list[str]:
    """Dump an archive at exit (image build), else use the image's archive when there is one."""
    dump = env.get(DUMP_ENV)
    if dump:
        return [f"-XX:ArchiveClassesAtExit={dump}"]
    if layout.archive is not None:
        return [f"-XX:SharedArchiveFile={layout.archive}", "-Xshare:auto"]
    return []


def driver_command(
    layout: Layout,
    *,
    java: str,
    spark_home: str,
    conf_dir: str,
    conf: Mapping[str, str],
    submit_args: Sequence[str],
    env: Mapping[str, str],
) -> list[str]:
    """``java ... SparkSubmit <submit_args>`` as Spark's launcher builds it in client mode.

    ``conf`` is what the launcher would read: spark-defaults.conf overridden by ``--conf`` arguments.
    """
    memory = conf.get("spark.driver.memory") or env.get("SPARK_DRIVER_MEMORY") or env.get("SPARK_MEM")
    return [
        java,
        "-cp",
        driver_classpath(layout, spark_home, conf_dir, conf, env),
        *shlex.split(env.get("SPARK_SUBMIT_OPTS", "")),
        f"-Xmx{memory or DEFAULT_MEMORY}",
        *shlex.split(conf.get("spark.driver.defaultJavaOptions", "")),
        *shlex.split(conf.get("spark.driver.extraJavaOptions", "")),
        *archive_options(layout, env),
        *layout.options,
        SUBMIT_CLASS,
        *submit_args,
    ]


def driver_env(conf: Mapping[str, str], env: Mapping[str, str]) -> dict[str, str]:
    """The environment spark-submit and spark-class would give the JVM."""
    result = dict(env)
    result.update(PYTHONHASHSEED="0", SPARK_ENV_LOADED="1", SPARK_SCALA_VERSION=SCALA_VERSION)
    library_path = conf.get("spark.driver.extraLibraryPath")
    if library_path:
        result["LD_LIBRARY_PATH"] = os.pathsep.join([library_path, *_split_paths(env.get("LD_LIBRARY_PATH"))])
    return result


def read_conf_file(path: Path) -> dict[str, str]:
    """spark-defaults.conf as the launcher reads it (a Java properties file: key, blank or '=', value)."""
    from headrace.api import spark_defaults

    try:
        return spark_defaults.parse(path.read_text(encoding="utf-8"))
    except OSError:
        return {}


def java_executable(env: Mapping[str, str]) -> str:
    java_home = env.get("JAVA_HOME")
    return os.path.join(java_home, "bin", "java") if java_home else "java"


def _submit_args(conf: Any, env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """PySpark's arguments to spark-submit (its --conf pairs, then PYSPARK_SUBMIT_ARGS) and those confs."""
    pairs = [(str(k), str(v)) for k, v in conf.getAll()] if conf is not None else []
    args = [item for key, value in pairs for item in ("--conf", f"{key}={value}")]
    args += shlex.split(env.get("PYSPARK_SUBMIT_ARGS", "pyspark-shell"))
    return args, dict(pairs)


def _connection_info(path: str) -> tuple[int, str]:
    """The gateway's port and secret as PythonGatewayServer writes them (big-endian int, length-prefixed UTF-8)."""
    with open(path, "rb") as info:
        port, length = struct.unpack(">ii", info.read(8))
        return port, info.read(length).decode("utf-8")


@contextlib.contextmanager
def _gateway_env(port: int, secret: str) -> Iterator[None]:
    """PySpark connects to an existing JVM when these are set (then its launch starts nothing)."""
    os.environ["PYSPARK_GATEWAY_PORT"] = str(port)
    os.environ["PYSPARK_GATEWAY_SECRET"] = secret
    try:
        yield
    finally:
        os.environ.pop("PYSPARK_GATEWAY_PORT", None)
        os.environ.pop("PYSPARK_GATEWAY_SECRET", None)


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _wait_for_dump(process: subprocess.Popen[bytes]) -> None:
    """Image build: let the JVM see its stdin close and write the archive before this process ends."""
    with contextlib.suppress(OSError):
        if process.stdin is not None:
            process.stdin.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(DUMP_WAIT_SECONDS)


def start_gateway(
    original: Callable[..., Any], layout: Layout, conf_dir: str, conf: Any, env: Mapping[str, str]
) -> Any:
    """Start the driver JVM directly and return PySpark's gateway to it (``gateway.proc`` is the JVM)."""
    spark_home = env["SPARK_HOME"]
    submit_args, submitted = _submit_args(conf, env)
    launcher_conf = {**read_conf_file(Path(conf_dir) / "spark-defaults.conf"), **submitted}
    command = driver_command(
        layout,
        java=java_executable(env),
        spark_home=spark_home,
        conf_dir=conf_dir,
        conf=launcher_conf,
        submit_args=submit_args,
        env=env,
    )
    info_dir = tempfile.mkdtemp()
    info_file = os.path.join(info_dir, "gateway")
    process_env = {
        **driver_env(launcher_conf, env),
        "SPARK_CONNECT_MODE": "0",
        "_PYSPARK_DRIVER_CONN_INFO_PATH": info_file,
    }
    try:
        process = subprocess.Popen(command, stdin=subprocess.PIPE, env=process_env, preexec_fn=_ignore_sigint)  # noqa: PLW1509
        while process.poll() is None and not os.path.isfile(info_file):
            time.sleep(GATEWAY_WAIT_SECONDS)
        if not os.path.isfile(info_file):
            raise RuntimeError(f"the driver JVM exited with {process.returncode} before its gateway started")
        port, secret = _connection_info(info_file)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(info_file)
        with contextlib.suppress(OSError):
            os.rmdir(info_dir)
    with _gateway_env(port, secret):
        gateway = original(None, None)
    gateway.proc = process
    if env.get(DUMP_ENV):
        atexit.register(_wait_for_dump, process)
    log.info(
        "driver JVM started directly (pid %d)%s", process.pid, " with the image's archive" if layout.archive else ""
    )
    return gateway


def _conf_dir_supported(conf_dir: str) -> bool:
    return not any(os.path.exists(os.path.join(conf_dir, name)) for name in UNSUPPORTED_CONF_FILES)


def install(env: Mapping[str, str]) -> Callable[[], None]:
    """Make PySpark start its driver JVM directly (when the image recorded a layout); returns the undo."""
    import pyspark.context
    import pyspark.java_gateway

    original: Callable[..., Any] = pyspark.java_gateway.launch_gateway
    layout = load_layout(jvm_dir(env))
    conf_dir = env.get("SPARK_CONF_DIR")
    if layout is None or not conf_dir or not direct_start_enabled(env) or "SPARK_HOME" not in env:
        log.info("driver JVM started by spark-submit (%s)", _why_not(layout, conf_dir, env))
        return lambda: None

    def launch(conf: Any = None, popen_kwargs: Any = None) -> Any:
        current = dict(os.environ)
        if popen_kwargs or "PYSPARK_GATEWAY_PORT" in current or not _conf_dir_supported(conf_dir):
            return original(conf, popen_kwargs)
        return start_gateway(original, layout, conf_dir, conf, current)

    pyspark.context.launch_gateway = launch  # type: ignore[attr-defined]

    def uninstall() -> None:
        pyspark.context.launch_gateway = original  # type: ignore[attr-defined]

    return uninstall


def _why_not(layout: Layout | None, conf_dir: str | None, env: Mapping[str, str]) -> str:
    if not direct_start_enabled(env):
        return f"{START_ENV}=spark-submit"
    if layout is None:
        return f"no recorded layout in {jvm_dir(env)}"
    return "SPARK_CONF_DIR or SPARK_HOME is not set"


# --- image build -----------------------------------------------------------------------------------


def launcher_command(spark_home: str, java: str, conf_dir: str, args: Sequence[str]) -> list[str]:
    """What Spark's launcher prints for ``spark-submit <args>`` with the configuration in `conf_dir`."""
    env = {
        **os.environ,
        "SPARK_HOME": spark_home,
        "SPARK_CONF_DIR": conf_dir,
        "SPARK_SCALA_VERSION": SCALA_VERSION,
    }
    for name in ("SPARK_SUBMIT_OPTS", "SPARK_DRIVER_MEMORY", "SPARK_MEM", "SPARK_CLASSPATH", "HADOOP_CONF_DIR"):
        env.pop(name, None)
    output = subprocess.run(
        [java, "-Xmx128m", "-cp", os.path.join(spark_home, "jars", "*"), LAUNCHER_CLASS, SUBMIT_CLASS, *args],
        env=env,
        check=True,
        capture_output=True,
    ).stdout
    return [part.decode().strip("\n") for part in output.split(b"\0") if part.strip()]  # it starts with "\0\n"


def fixed_options(command: Sequence[str]) -> list[str]:
    """The launcher's options after the heap size (with no configuration: its fixed ones), before the class."""
    heap = next(index for index, item in enumerate(command) if item.startswith("-Xmx"))
    return list(command[heap + 1 : command.index(SUBMIT_CLASS)])


def record(directory: Path, spark_home: str, java: str) -> Layout:
    """Record the launcher's fixed options and Spark's jars (image build)."""
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as empty_conf:
        options = fixed_options(launcher_command(spark_home, java, empty_conf, ["pyspark-shell"]))
    jars = spark_jars(spark_home)
    (directory / OPTIONS_FILE).write_text("".join(f"{option}\n" for option in options), encoding="utf-8")
    (directory / CLASSPATH_FILE).write_text("".join(f"{jar}\n" for jar in jars), encoding="utf-8")
    return Layout(tuple(options), tuple(jars), None)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m headrace.runtime.jvm record [DIR]``: record the layout for this image's Spark."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] != "record":
        print("usage: python -m headrace.runtime.jvm record [DIR]", file=sys.stderr)
        return 2
    directory = Path(args[1]) if len(args) > 1 else jvm_dir(os.environ)
    layout = record(directory, os.environ["SPARK_HOME"], java_executable(os.environ))
    print(f"recorded {len(layout.options)} launcher options and {len(layout.jars)} jars in {directory}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
