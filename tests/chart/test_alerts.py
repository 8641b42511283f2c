"""The chart's alerting rules under the real promtool (built from Prometheus's Go module by `testbed.promtool`):
the rule file passes `promtool check rules`, the PrometheusRule the chart renders carries exactly that file, and
`promtool test rules` (tests/chart/alerts_test.yaml) shows each alert firing for the app whose series crossed its
line, naming it (labels namespace and app), and not for the healthy app beside it. Every expression names only
metrics the operator or the drivers export."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from testbed.promtool import ensure_promtool

from .helm import CHART, PROMETHEUS_OPERATOR_API, by_kind, render
from .test_dashboard import exported_series

RULES = CHART / "alerts" / "headrace.rules.yaml"
UNIT_TESTS = Path(__file__).with_name("alerts_test.yaml")
METRIC = re.compile(r"\b(headrace_[a-z_]+)\b")


@pytest.fixture(scope="module")
def promtool() -> Path:
    return ensure_promtool()


def _promtool(promtool: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(promtool), *args], capture_output=True, text=True, timeout=120, check=False, cwd=cwd)


def test_the_rule_file_passes_promtool_check(promtool: Path, tmp_path: Path) -> None:
    completed = _promtool(promtool, "check", "rules", str(RULES), cwd=tmp_path)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "SUCCESS: 9 rules found" in completed.stdout, completed.stdout


def test_each_alert_fires_for_the_app_that_crossed_its_line(promtool: Path, tmp_path: Path) -> None:
    tests = yaml.safe_load(UNIT_TESTS.read_text())
    tests["rule_files"] = [str(RULES)]
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests))
    completed = _promtool(promtool, "test", "rules", "tests.yaml", cwd=tmp_path)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    rules = {rule["alert"] for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]}
    tested = {case["alertname"] for test in tests["tests"] for case in test["alert_rule_test"]}
    assert tested == rules


def test_the_chart_ships_the_rule_file_as_a_prometheus_rule(promtool: Path, tmp_path: Path) -> None:
    values = {"metrics": {"prometheusRule": {"enabled": True, "labels": {"release": "kube-prometheus"}}}}
    assert not by_kind(render(tmp_path, values), "PrometheusRule")  # only where the API is served
    (rule,) = by_kind(render(tmp_path, values, api_versions=(PROMETHEUS_OPERATOR_API,)), "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus"
    assert rule["spec"] == yaml.safe_load(RULES.read_text())
    (tmp_path / "rendered.yaml").write_text(yaml.safe_dump(rule["spec"]))
    completed = _promtool(promtool, "check", "rules", "rendered.yaml", cwd=tmp_path)
    assert completed.returncode == 0, completed.stdout + completed.stderr


def test_every_alert_names_only_exported_metrics() -> None:
    exported = exported_series()
    expressions = [rule["expr"] for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]
    used = {name for expr in expressions for name in METRIC.findall(expr)}
    assert used and used <= exported, used - exported
