"""Failpoints: parsing HEADRACE_FAILPOINTS, and a hard exit at an armed point (in a child process)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from headrace.controller import failpoints

SCRIPT = """
from headrace.controller import failpoints
failpoints.hit("after-status:Upgrade/TakeSavepoint")
print("passed after-status", flush=True)
with failpoints.around("DeletePod"):
    print("deleting", flush=True)
print("passed DeletePod", flush=True)
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", frozenset()),
        (" , ,", frozenset()),
        ("before:DeletePod", {"before:DeletePod"}),
        (
            " after-status:Upgrade/TakeSavepoint, after:TakeSavepoint ,after:TakeSavepoint",
            {"after-status:Upgrade/TakeSavepoint", "after:TakeSavepoint"},
        ),
    ],
)
def test_parse(text: str, expected: frozenset[str]) -> None:
    assert failpoints.parse(text) == expected


def _run(armed: str | None) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != failpoints.ENV}
    if armed is not None:
        env[failpoints.ENV] = armed
    return subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def test_unarmed_points_do_nothing() -> None:
    result = _run(None)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["passed after-status", "deleting", "passed DeletePod"]


def test_an_armed_point_exits_hard_with_one_line() -> None:
    result = _run("after-status:Upgrade/TakeSavepoint")
    assert result.returncode == failpoints.FAILPOINT_EXIT_CODE
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"headrace failpoint after-status:Upgrade/TakeSavepoint hit: exiting with code {failpoints.FAILPOINT_EXIT_CODE}"
    ]


@pytest.mark.parametrize(("point", "printed"), [("before:DeletePod", 1), ("after:DeletePod", 2)])
def test_around_an_action(point: str, printed: int) -> None:
    result = _run(f"unrelated,{point}")
    assert result.returncode == failpoints.FAILPOINT_EXIT_CODE
    assert result.stdout.splitlines() == ["passed after-status", "deleting"][:printed]
    assert point in result.stderr
