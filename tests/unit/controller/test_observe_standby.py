"""Which standby pod shares its current driver's node (`observe.standby_beside`): only then are the nodes asked
whether another could take it."""

from __future__ import annotations

from typing import Any

import pytest

from headrace.api import names
from headrace.controller.observe import standby_beside

APP = {"status": {"run": {"driverPod": "clicks-r1-a1-driver"}}}


def _pod(attempt: int, node: str | None, *, phase: str = "Running", deleting: bool = False, **labels: str) -> Any:
    metadata: dict[str, Any] = {"name": f"clicks-r1-a{attempt}-driver", "labels": labels}
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-28T04:00:00Z"
    return {"metadata": metadata, "spec": {"nodeName": node} if node else {}, "status": {"phase": phase}}


DRIVER = _pod(1, "w1", **{names.WRITER: "true"})
STANDBY = {names.STANDBY: "true"}


@pytest.mark.parametrize(
    ("pods", "beside"),
    [
        ([DRIVER, _pod(2, "w1", **STANDBY)], True),
        ([DRIVER, _pod(2, "w1", phase="Pending", **STANDBY)], True),  # bound, not yet started
        ([DRIVER, _pod(2, "w2", **STANDBY)], False),  # apart
        ([DRIVER, _pod(2, None, phase="Pending", **STANDBY)], False),  # not scheduled yet
        ([DRIVER, _pod(2, "w1", deleting=True, **STANDBY)], False),  # going
        ([DRIVER, _pod(2, "w1", phase="Failed", **STANDBY)], False),  # ended (replaced as StandbyFailed)
        ([DRIVER, _pod(2, "w1")], False),  # a pre-warmed driver, not a standby
        ([_pod(1, "w1", deleting=True), _pod(2, "w1", **STANDBY)], False),  # the driver is going: promote
        ([_pod(2, "w1", **STANDBY)], False),  # no current driver pod
    ],
)
def test_a_standby_beside_the_current_driver(pods: list[dict[str, Any]], beside: bool) -> None:
    found = standby_beside(APP, pods)
    assert (found is not None) is beside
    if beside:
        assert found is not None and found["metadata"]["name"] == "clicks-r1-a2-driver"
