"""The Grafana dashboard queries only metrics the operator and the driver runtime really export."""

from __future__ import annotations

import json
import re
from typing import Any

from prometheus_client import CollectorRegistry

from headrace.controller.metrics import OperatorMetrics
from headrace.runtime.metrics import RuntimeMetrics

from .helm import CHART

DASHBOARD = CHART / "dashboards" / "headrace.json"
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created"), "gauge": ("",)}
IDENTIFIER = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
PROMQL_WORDS = {
    "sum", "max", "min", "avg", "count", "by", "without", "rate", "increase", "irate", "histogram_quantile",
    "label_values", "le", "namespace", "app", "query", "phase", "reason", "result", "action", "type", "run",
    "trigger", "transition",
}  # fmt: skip


def exported_series() -> set[str]:
    """Every sample name the two metrics modules expose."""
    registries = [OperatorMetrics(CollectorRegistry()).registry, RuntimeMetrics().registry]
    names: set[str] = set()
    for registry in registries:
        for family in registry.collect():
            names.update(family.name + suffix for suffix in SUFFIXES[family.type])
    return names


def _expressions(dashboard: dict[str, Any]) -> list[str]:
    queries = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    queries += [variable["definition"] for variable in dashboard["templating"]["list"] if variable["type"] == "query"]
    return queries


def _metric_names(expression: str) -> set[str]:
    without_strings = re.sub(r'"[^"]*"', '""', expression)
    without_ranges = re.sub(r"\[[^\]]*\]", "", without_strings)
    without_selectors = re.sub(r"\{[^}]*\}", "", without_ranges)
    return {token for token in IDENTIFIER.findall(without_selectors) if token not in PROMQL_WORDS}


def test_every_expression_names_only_exported_metrics() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exported = exported_series()
    assert "headrace_driver_restarts_total" in exported
    assert "headrace_query_input_rows_per_second" in exported
    for expression in _expressions(dashboard):
        names = _metric_names(expression)
        assert names, f"no metric in {expression!r}"
        assert names <= exported, f"{expression!r} names unknown series {sorted(names - exported)}"


def test_the_dashboard_covers_the_headline_metrics() -> None:
    used = set().union(*(_metric_names(expression) for expression in _expressions(json.loads(DASHBOARD.read_text()))))
    for series in (
        "headrace_query_input_rows_per_second",
        "headrace_query_processed_rows_per_second",
        "headrace_query_source_backlog_records",
        "headrace_query_batch_duration_seconds",
        "headrace_query_state_rows",
        "headrace_query_state_memory_bytes",
        "headrace_driver_restarts_total",
        "headrace_runtime_savepoints_total",
        "headrace_apps",
        "headrace_savepoints_total",
        "headrace_transition_duration_seconds_bucket",
        "headrace_app_last_batch_age_seconds",
    ):
        assert series in used, series


def test_the_name_check_catches_an_unknown_metric() -> None:
    assert _metric_names('sum by (app) (rate(headrace_made_up_total{app=~"$app"}[5m]))') == {"headrace_made_up_total"}


def test_panels_have_unique_ids_and_prometheus_targets() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            assert target["datasource"]["type"] == "prometheus"
            assert target["expr"].count("(") == target["expr"].count(")"), target["expr"]
