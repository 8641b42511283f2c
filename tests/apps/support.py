"""Helpers for the example apps' tests: loading an app's transforms, running an app as a real process.

The apps are plain scripts in `apps/<name>/` (their directory names are not Python identifiers), so
their transforms are loaded by path and pickled by value for Spark's Python workers.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parents[2]
APPS = REPO / "apps"


def load_transforms(app: str) -> ModuleType:
    """Import `apps/<app>/transforms.py` under a unique name; Spark workers receive it by value."""
    from pyspark import cloudpickle

    name = "apps_" + app.replace("-", "_") + "_transforms"
    spec = importlib.util.spec_from_file_location(name, APPS / app / "transforms.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    cloudpickle.register_pickle_by_value(module)
    return module


# What `spark-submit --conf` would set for a small local run; the apps themselves set no configuration.
LOCAL_CONF = {
    "spark.master": "local[2]",
    "spark.sql.shuffle.partitions": "4",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
}


def spark_env(jars: Sequence[Path] = (), conf: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for a PySpark child process: this interpreter for workers, local conf and extra jars."""
    settings = {**LOCAL_CONF, **(conf or {})}
    submit = [arg for key, value in settings.items() for arg in ("--conf", f"{key}={value}")]
    if jars:
        submit += ["--jars", ",".join(str(jar) for jar in jars)]
    env = dict(os.environ)
    env.update(
        {
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "TZ": "UTC",
            "PYSPARK_SUBMIT_ARGS": " ".join([*submit, "pyspark-shell"]),
        }
    )
    return env


def run_app(app: str, args: Sequence[str], log: Path, timeout: float = 240) -> None:
    """Run `python apps/<app>/app.py ARGS` to completion in its own process group; fail with its log."""
    command = [sys.executable, str(APPS / app / "app.py"), *args]
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=spark_env(), start_new_session=True
        )
        try:
            code = process.wait(timeout=timeout)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
    assert code == 0, f"{app} exited with {code}:\n" + log.read_text()[-4000:]


def run_on_files(app: str, tmp_path: Path, *options: str) -> Path:
    """Run the app once over the files under `tmp_path`/in, a file a batch (--available-now), with its own
    `options`; returns its output directory."""
    out = tmp_path / "out"
    files = ["--source", "files", "--input", str(tmp_path / "in"), "--output", str(out)]
    once = ["--checkpoint", str(tmp_path / "ck"), "--available-now", "--max-files-per-trigger", "1"]
    run_app(app, [*files, *once, *options], tmp_path / "app.log")
    return out


def group_state(
    schema: Any, value: tuple[Any, ...] | None = None, watermark_ms: int = 0, timed_out: bool = False
) -> Any:
    """PySpark's own `GroupState` as `applyInPandasWithState` hands it to a function (event-time timeouts).

    Stateful operators cannot run on a static DataFrame ("applyInPandasWithState is unsupported in
    batch query"), so the per-key functions are tested directly with a real state object.
    """
    from pyspark.sql import Row
    from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

    return GroupState(
        optionalValue=Row(*value) if value is not None else Row(),
        batchProcessingTimeMs=0,
        eventTimeWatermarkMs=watermark_ms,
        timeoutConf=GroupStateTimeout.EventTimeTimeout,
        hasTimedOut=timed_out,
        watermarkPresent=True,
        defined=value is not None,
        updated=False,
        removed=False,
        timeoutTimestamp=GroupState.NO_TIMESTAMP,
        keyAsUnsafe=b"",
        valueSchema=schema,
    )
