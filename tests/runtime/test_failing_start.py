"""Scripts that fail at start, run by the real runtime (real PySpark for Spark's own refusal): the termination
message each leaves is one the operator classifies as no restart heals (`core.failures`), with a bounded trace."""

from __future__ import annotations

from pathlib import Path

import pytest

from headrace.api import runtime_contract as contract
from headrace.core import failures
from headrace.runtime.termination import MAX_MESSAGE_CHARS

from .harness import RuntimeProcess

SCRIPTS = {
    "syntax": ("x = (\n", "ScriptFailed", "SyntaxError", "does not compile"),
    "import": ("import helper\n", "ScriptFailed", "ModuleNotFoundError: No module named 'nosuchmodule'", "imports"),
    "usage": (
        "import argparse\nargparse.ArgumentParser().parse_args()\n",
        "ScriptExited",
        "exited with 2",
        "usage error",
    ),
    "spark-conf": (
        "from pyspark.sql import SparkSession\nSparkSession.builder.getOrCreate()\n",
        "ScriptFailed",
        "INVALID_SPARK_CONFIG",
        "Spark refuses its configuration",
    ),
}


@pytest.mark.parametrize("case", SCRIPTS)
def test_a_script_failing_at_start_leaves_an_error_no_restart_heals(case: str, tmp_path: Path) -> None:
    source, reason, error, why = SCRIPTS[case]
    script = tmp_path / "app.py"
    script.write_text(source)
    (tmp_path / "helper.py").write_text("import nosuchmodule\n")  # the import fails one frame down
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    # as the operator's ConfigMap delivers spec.sparkConf: an executor option Spark itself refuses
    (conf_dir / "spark-defaults.conf").write_text("spark.executor.extraJavaOptions -Xmx1g\n")
    env = {"SPARK_CONF_DIR": str(conf_dir), contract.ENV_MODE: "bounded"}
    runtime = RuntimeProcess(tmp_path, ["--no-such-option"], env=env, script=script).start()
    try:
        assert runtime.wait(300) == contract.EXIT_FAILED, runtime.log()[-3000:]
    finally:
        runtime.kill()
    outcome = runtime.termination()
    assert outcome["reason"] == reason and error in outcome["message"], outcome
    assert len(outcome["message"]) <= MAX_MESSAGE_CHARS
    classified = failures.unhealable(outcome["reason"], outcome["message"])
    assert classified is not None and why in classified, (classified, outcome)
    if case == "import":  # the trace names the script's frames, not the runtime's
        assert 'helper.py", line 1' in outcome["message"] and "runpy" not in outcome["message"], outcome
    print(f"{case}: {outcome['message'][:400]}")
