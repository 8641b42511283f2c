"""Every failure reason the planner names itself is in the typed vocabulary, so the restart counter
has a label for it (a reason missing there would count as Other, as NoProgress once did)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

from headrace.api.runtime_contract import TerminationReason
from headrace.api.vocabulary import RESTART_REASON_LABELS, KubernetesFailureReason, OperatorFailureReason

PLANNER = Path(__file__).resolve().parents[3] / "operator" / "headrace" / "core" / "planner.py"


def _failure_reasons(function: str = "_failure", position: int = 3) -> set[str]:
    """The reasons passed to `_failure(builder, spec, pod, reason, message)`: literals, `x or "Reason"`, and
    module constants."""
    tree = ast.parse(PLANNER.read_text())
    constants = {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    reasons: set[str] = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", "") == function and len(node.args) > position):
            continue
        argument = node.args[position]
        values = argument.values if isinstance(argument, ast.BoolOp) else [argument]
        reasons.update(value.value for value in values if isinstance(value, ast.Constant))
        reasons.update(constants[value.id] for value in values if isinstance(value, ast.Name) and value.id in constants)
    return reasons


def test_the_planners_failure_reasons_are_typed_and_labelled() -> None:
    named = _failure_reasons()
    assert {"DriverLost", "DriverDeleted", "NoProgress", "DriverExited", "DriverFailed"} <= named
    assert named <= set(get_args(OperatorFailureReason))
    assert set(get_args(OperatorFailureReason)) | set(get_args(KubernetesFailureReason)) | {"Other"} == set(
        RESTART_REASON_LABELS
    )


def test_the_reasons_the_planner_assumes_of_a_terminated_runtime_are_the_runtimes() -> None:
    assumed = _failure_reasons("_terminal_failure", 1)
    assert {"RestoreIncompatible", "CheckpointBehind"} <= assumed
    assert assumed <= set(get_args(TerminationReason))
