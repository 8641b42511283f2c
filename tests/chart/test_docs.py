"""Generated and cross-checked documentation: the field reference, reason strings and the Argo CD snippet."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from headrace.api import docs, models

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def test_field_reference_is_generated_from_the_models() -> None:
    current = (DOCS / "reference.md").read_text()
    assert current == docs.reference_markdown(), (
        "docs/reference.md is stale: run `uv run python -m headrace.api.docs > docs/reference.md`"
    )


def test_reference_lists_every_spec_field_with_its_change_kind() -> None:
    text = docs.reference_markdown()
    kinds = docs.change_kinds(models.StreamingAppSpec, "spec")
    assert kinds["spec.executor.instances"] == models.ChangeKind.SCALE
    assert kinds["spec.state.partitions"] == models.ChangeKind.REDEPLOY
    assert kinds["spec.restartPolicy.backoff.maxSeconds"] == models.ChangeKind.IGNORE
    for path, kind in kinds.items():
        row = next(line for line in text.splitlines() if line.replace("[]", "").startswith(f"| `{path}` |"))
        assert row.endswith(f"| {docs.CHANGE_TEXT[kind]} |"), row
    for name in models.StreamingSavepointSpec.model_fields:
        assert f"| `spec.{name}` |" in text
    for name in models.StreamingAppStatus.model_fields:
        assert f"| `status.{name}` |" in text


def test_pipes_in_patterns_are_escaped() -> None:
    assert "`^(local://\\|/).+\\.py$`" in docs.reference_markdown()


POSITIONS = {
    "condition": 2,
    "report_error": 0,
    "event": 0,
    "phase": 0,
    "_failure": 3,
    "_terminal_failure": 1,
    "Event": 1,
}


def _planner_reasons() -> set[str]:
    """Every literal reason the planner writes into a condition or an event (AST of headrace/core/*.py)."""
    reasons: set[str] = set()
    for module in sorted((ROOT / "operator" / "headrace" / "core").glob("*.py")):
        reasons.update(_literal_reasons(ast.parse(module.read_text())))
    return reasons


def _literal_reasons(tree: ast.AST) -> set[str]:
    reasons: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        index = POSITIONS.get(name)
        if index is None or len(node.args) <= index:
            continue
        argument = node.args[index]
        if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
            reasons.add(argument.value)
        elif isinstance(argument, ast.BoolOp):  # e.g. `pod.reason or "DriverFailed"`
            reasons.update(
                value.value
                for value in argument.values
                if isinstance(value, ast.Constant) and isinstance(value.value, str)
            )
    return reasons


def test_operations_guide_lists_every_reason_the_planner_emits() -> None:
    reasons = _planner_reasons()
    assert {"InvalidSpec", "UpgradeRefused", "DriverLost", "DriverFailed"} <= reasons
    guide = (DOCS / "operations.md").read_text()
    missing = sorted(reason for reason in reasons if f"`{reason}`" not in guide)
    assert not missing, f"docs/operations.md does not explain these reasons: {missing}"


def test_argocd_snippet_in_the_docs_matches_the_chart_scripts() -> None:
    guide = (DOCS / "helm-argocd.md").read_text()
    for script in sorted((ROOT / "charts" / "headrace" / "argocd").glob("*.lua")):
        indented = "\n".join(("    " + line).rstrip() for line in script.read_text().splitlines())
        assert indented in guide, f"the argocd-cm snippet in docs/helm-argocd.md differs from {script.name}"


def test_metrics_reference_lists_every_exported_metric() -> None:
    from .test_dashboard import exported_series

    guide = (DOCS / "metrics.md").read_text()
    documented = {name for name in exported_series() if not name.endswith("_created")}
    counters_and_gauges = {name for name in documented if not name.endswith(("_bucket", "_sum", "_count"))}
    missing = sorted(name for name in counters_and_gauges if f"`{name}`" not in guide)
    assert not missing, f"docs/metrics.md does not describe {missing}"


def test_the_documented_command_writes_the_reference() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "headrace.api.docs"], capture_output=True, text=True, check=True, timeout=60
    )
    assert completed.stdout == (DOCS / "reference.md").read_text()
