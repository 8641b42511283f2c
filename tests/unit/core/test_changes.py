"""Change classification: the largest kind among changed fields wins."""

from __future__ import annotations

import pytest

from headrace.api.models import ChangeKind
from headrace.core.changes import classify_change
from tests.unit.builders import spec


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({}, None),
        ({"savepoints": {"retain": 2}}, ChangeKind.IGNORE),
        ({"restartPolicy": {"maxRestartsInWindow": 1}}, ChangeKind.IGNORE),
        ({"executor": {"instances": 4}}, ChangeKind.SCALE),
        ({"executor": {"instances": 4, "memory": "2g"}}, ChangeKind.UPGRADE),
        ({"image": "other:1"}, ChangeKind.UPGRADE),
        ({"application": {"file": "/x.py", "args": ["--a"]}}, ChangeKind.UPGRADE),
        ({"state__partitions": 64}, ChangeKind.REDEPLOY),
        ({"state__partitions": 64, "executor": {"instances": 4}}, ChangeKind.REDEPLOY),
        ({"sparkConf": {"spark.sql.adaptive.enabled": "false"}}, ChangeKind.UPGRADE),
    ],
)
def test_classify(changes, expected) -> None:
    assert classify_change(spec(), spec(**changes)) == expected
