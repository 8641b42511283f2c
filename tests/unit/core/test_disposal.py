"""Disposal of a deleted StreamingSavepoint's files (issue 13, finding 7): the decision table and the path checks."""

from __future__ import annotations

from dataclasses import replace

import pytest

from headrace.core.disposal import (
    DEADLINE_SECONDS,
    MAX_TRIES,
    AppFacts,
    DisposalFacts,
    Dispose,
    Release,
    Retry,
    after_failed_call,
    decide_disposal,
    disposal_target,
)

ROOT = "s3a://bucket/savepoints"
OWN = "s3a://bucket/savepoints/analytics/clicks/clicks-periodic-1"
RUNNING = AppFacts(savepoint_root=ROOT, phase="Running", driver_address="10.0.0.9")
FACTS = DisposalFacts(
    namespace="analytics", name="clicks-periodic-1", app_name="clicks", phase="Succeeded", path=OWN, app=RUNNING
)


def facts(**changes: object) -> DisposalFacts:
    return replace(FACTS, **changes)  # type: ignore[arg-type]


def app(**changes: object) -> AppFacts:
    return replace(RUNNING, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        (FACTS, Dispose("10.0.0.9", OWN)),
        # the driver qualifies what it wrote; the operator deletes its own path for this savepoint
        (facts(path=OWN + "/"), Dispose("10.0.0.9", OWN)),
        (facts(phase="Failed"), Dispose("10.0.0.9", OWN)),  # a failed copy may have left files
        (facts(path=None, phase=None), Release("the savepoint was never written: nothing to delete")),
        (facts(path=None, phase="Failed"), Release("the savepoint was never written: nothing to delete")),
        (facts(phase="InProgress"), Retry(5.0, "the savepoint is still being taken")),
        (facts(path=None, phase="InProgress", tries=3), Retry(40.0, "the savepoint is still being taken")),
        (facts(app=app(driver_address=None, phase="Restarting")), Retry(5.0, "no running driver of 'clicks' yet")),
        (facts(app=app(driver_address=None, phase="Deploying"), tries=9), Release("gave up", left=OWN)),
        (facts(waited_seconds=DEADLINE_SECONDS), Release("gave up", left=OWN)),
        (facts(tries=MAX_TRIES), Release("gave up after 8 tries", left=OWN)),
        (facts(app=app(driver_address=None, phase="Suspended")), Release("no running driver", left=OWN)),
        (facts(app=app(driver_address=None, phase="Failed")), Release("no running driver", left=OWN)),
        (facts(app=None), Release("StreamingApp 'clicks' does not exist", left=OWN)),
        (facts(app=app(needed_paths=frozenset({OWN}))), Release("still restores from it", left=OWN)),
        (facts(app=app(needed_names=frozenset({"clicks-periodic-1"}))), Release("still restores from it", left=OWN)),
        (facts(app=app(savepoint_root=None)), Release("no spec.state.savepointDir", left=OWN)),
        # the root changed since the savepoint was taken: its files are not under the app's root any more
        (facts(app=app(savepoint_root="s3a://bucket/elsewhere")), Release("is not this savepoint's", left=OWN)),
    ],
)
def test_decision(case: DisposalFacts, expected: Dispose | Retry | Release) -> None:
    decided = decide_disposal(case)
    assert type(decided) is type(expected)
    if isinstance(expected, Dispose):
        assert decided == expected
    elif isinstance(expected, Retry):
        assert isinstance(decided, Retry) and decided.seconds == expected.seconds and expected.why in decided.why
    else:
        assert isinstance(decided, Release) and decided.left == expected.left and expected.why in decided.why


@pytest.mark.parametrize(
    ("root", "recorded", "problem"),
    [
        (ROOT, "s3a://bucket/savepoints/analytics/clicks/sp", None),
        ("file:///data/savepoints", "file:/data/savepoints/analytics/clicks/sp", None),  # as Hadoop qualifies it
        ("/data/savepoints", "file:/data/savepoints/analytics/clicks/sp", None),
        ("hdfs:///savepoints", "hdfs://namenode:8020/savepoints/analytics/clicks/sp", None),  # the default FS
        ("s3a://bucket/savepoints", "s3a://other/savepoints/analytics/clicks/sp", "is not this savepoint's"),
        ("s3a://bucket/savepoints", "gs://bucket/savepoints/analytics/clicks/sp", "is not this savepoint's"),
        ("gs://bucket/savepoints", "gs://bucket/savepoints/analytics/clicks/sp", None),  # as the GCS connector has it
        ("gs://bucket/savepoints", "gs://other/savepoints/analytics/clicks/sp", "is not this savepoint's"),
        ("gs://bucket/savepoints", "s3a://bucket/savepoints/analytics/clicks/sp", "is not this savepoint's"),
        ("s3a://bucket/savepoints", "s3a://bucket/savepoints/analytics/clicks", "is not this savepoint's"),
        ("s3a://bucket/savepoints", "s3a://bucket/savepoints/analytics/clicks/sp/deeper", "is not this savepoint's"),
        ("s3a://bucket/savepoints", "s3a://bucket/savepoints/analytics/clicks/../clicks/sp", ".. segments"),
        ("s3a://bucket/savepoints", "s3a://bucket/savepoints/analytics/clicks/%2e%2e", "escape"),
        ("s3a://bucket/savepoints", "s3a://bucket/savepoints/analytics/clicks/sp?x=1", "query"),
        ("s3a://bucket/savepoints", "s3a://bucket/savepoints//analytics/clicks/sp", "empty"),
        ("s3a://bucket/a/../savepoints", "s3a://bucket/savepoints/analytics/clicks/sp", ".. segments"),
        ("s3a://bucket", "s3a://bucket/analytics/clicks/sp", None),
        ("s3a://bucket/savepoints", "relative/analytics/clicks/sp", "not an absolute path"),
    ],
)
def test_disposal_target_is_only_the_savepoints_own_directory(root: str, recorded: str, problem: str | None) -> None:
    target, why = disposal_target(root, "analytics", "clicks", "sp", recorded)
    if problem is None:
        assert why is None and target == f"{root.rstrip('/')}/analytics/clicks/sp"
    else:
        assert target is None and why is not None and problem in why


def test_a_tenant_app_name_cannot_point_outside_its_directory() -> None:
    target, why = disposal_target(ROOT, "analytics", "..", "sp", "s3a://bucket/savepoints/analytics/../sp")
    assert target is None and why is not None and ".." in why


def test_failed_calls_back_off_then_leave_the_files() -> None:
    current, delays = FACTS, []
    while True:
        decided = after_failed_call(current, "HTTP 503", refused=False)
        if isinstance(decided, Release):
            break
        delays.append(decided.seconds)
        current = replace(current, tries=current.tries + 1)
    assert delays == [10.0, 20.0, 40.0, 60.0, 60.0, 60.0, 60.0]  # bounded: released at the 8th failure
    assert decided.left == OWN and "HTTP 503" in decided.why
    refused = after_failed_call(FACTS, "HTTP 400: not under the root", refused=True)
    assert isinstance(refused, Release) and refused.left == OWN and "refused" in refused.why
