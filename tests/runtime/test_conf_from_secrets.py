"""spec.sparkConfFromSecrets end to end in the runtime, with real Spark: the operator's rendered driver
environment (secretKeyRef variables resolved here as the kubelet would) puts the Secret's value into the
SparkConf of the user's session, while the operator's ConfigMap never holds it."""

from __future__ import annotations

import json
from pathlib import Path

from headrace.api import runtime_contract as contract
from headrace.render import manifests
from tests.unit.builders import attempt

from .harness import RuntimeProcess

SCRIPT = Path(__file__).parent / "jobs" / "spark_conf.py"
VALUE = "s3cr3t value with spaces\n"  # as a Secret made from a file often is: a trailing newline, kept as is


def test_a_setting_from_a_secret_reaches_the_users_spark_conf(tmp_path: Path) -> None:
    rendered = attempt(sparkConfFromSecrets={"spark.ssl.keyPassword": {"name": "tls", "key": "password"}})
    config_map = manifests.config_map(rendered)
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / manifests.SPARK_DEFAULTS).write_text("spark.sql.session.timeZone UTC\n")
    env = {"SPARK_CONF_DIR": str(conf_dir), contract.ENV_MODE: "bounded"}
    for variable in manifests.driver_pod_manifest(rendered)["spec"]["containers"][0]["env"]:
        if variable["name"].startswith("HEADRACE_SPARK_CONF_SECRET"):  # the kubelet resolves the secretKeyRef
            secret_ref = variable.get("valueFrom", {}).get("secretKeyRef")
            env[variable["name"]] = VALUE if secret_ref else variable["value"]
    output = tmp_path / "conf.json"
    runtime = RuntimeProcess(tmp_path, [str(output)], env=env, script=SCRIPT).start()
    try:
        assert runtime.wait(300) == 0, runtime.log()[-3000:]
    finally:
        runtime.kill()
    conf = json.loads(output.read_text())
    assert conf["spark.ssl.keyPassword"] == VALUE  # exactly the Secret's bytes, a trailing newline too
    assert conf["spark.sql.session.timeZone"] == "UTC"  # the operator's settings are kept
    assert VALUE.strip() not in json.dumps(config_map)
    assert VALUE.strip() not in runtime.log()
