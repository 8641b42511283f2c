"""The operator records what each query committed and hands it to the next attempt of the run; an attempt that
finds fewer commits exits CheckpointBehind and the app goes Failed with the fix (issue 13, finding 2)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from headrace.api import runtime_contract as contract
from headrace.api.models import StreamingAppStatus
from headrace.core.observation import DriverProgress, Observation
from headrace.core.plan import EnsureDriver, Plan
from headrace.core.planner import decide, spec_hash
from headrace.render import manifests
from headrace.runtime.checkpoint_files import sink_beyond_checkpoint_problem

from .builders import T0, later, pod, seen, spec, view


def step(status: StreamingAppStatus | None, observation: Observation, now=T0, app_spec=None) -> Plan:
    return decide(view(app_spec, status), observation, now)


def reporting(*committed: tuple[str, int]) -> Observation:
    return replace(seen(pod()), progress=DriverProgress(ready=True, committed=committed))


def test_committed_batches_grow_and_go_to_the_next_attempt() -> None:
    status = step(None, seen()).status
    status = step(status, reporting(("q0", 4), ("q1", 2)), later(1)).status
    assert status.progress is not None and status.progress.committedBatches == {"q0": 4, "q1": 2}
    status = step(status, reporting(("q0", 3)), later(31)).status  # a lagging report never lowers them
    assert status.progress is not None and status.progress.committedBatches == {"q0": 4, "q1": 2}
    restarted = step(status, seen(pod(phase="Failed", exit_code=1)), later(40)).status
    after_backoff = step(restarted, seen(pod(phase="Failed", exit_code=1)), later(400)).status
    old_gone = step(after_backoff, seen(), later(401))
    created = [action for action in old_gone.actions if isinstance(action, EnsureDriver)]
    assert created and created[0].attempt == 2
    assert created[0].expected_commits == (("q0", 4), ("q1", 2))


def test_a_new_run_starts_with_nothing_expected() -> None:
    status = step(None, seen()).status
    status = step(status, reporting(("q0", 9)), later(1)).status
    upgraded = spec(image="localhost/headrace/spark:0.2.0", upgradeMode="stateless")
    plan = step(status, reporting(("q0", 9)), later(5), app_spec=upgraded)
    assert plan.status.run is not None and plan.status.run.number == 2
    assert plan.status.progress is None
    gone = step(plan.status, seen(pod(deleting=True)), later(6), app_spec=upgraded)
    fresh = step(gone.status, seen(), later(7), app_spec=upgraded)
    created = [action for action in fresh.actions if isinstance(action, EnsureDriver)]
    assert created and created[0].run == 2 and created[0].expected_commits == ()


@pytest.mark.parametrize(
    ("reason", "message", "fix", "not_offered"),
    [
        (
            "CheckpointBehind",
            "query q0: the checkpoint s3a://x/q0 has no commits, but earlier attempts of this run committed batch 4",
            "upgradeMode stateless",
            "new output path",
        ),
        (
            "SinkAhead",
            "query q0: the file sink /out already logged batches up to 3 in its _spark_metadata, but ...",
            "new output path",
            "upgradeMode stateless",  # a new run against the same output would be refused too
        ),
    ],
)
def test_a_refused_start_fails_the_app_with_its_own_fix(reason: str, message: str, fix: str, not_offered: str) -> None:
    status = step(None, seen()).status
    status = step(status, reporting(("q0", 4)), later(1)).status
    exited = pod(phase="Failed", exit_code=contract.EXIT_CHECKPOINT_BEHIND, reason=reason, message=message)
    plan = step(status, seen(exited), later(10))
    assert plan.status.phase == "Failed"
    assert plan.actions == ()
    degraded = next(c for c in plan.status.conditions if c.type == "Degraded")
    assert degraded.reason == reason
    assert message in degraded.message and "restartNonce" in degraded.message
    assert fix in degraded.message and not_offered not in degraded.message


@pytest.mark.parametrize(
    ("planned", "sink_batch", "refused"),
    [
        (None, None, False),  # a new checkpoint, a new output
        (None, 0, True),  # a new checkpoint against an output an earlier checkpoint wrote
        (3, 3, False),  # the sink logged the batch the checkpoint planned (a replay Spark skips exactly once)
        (3, 2, False),  # the sink is behind: Spark writes the next batch
        (3, 7, True),  # the sink went on under another checkpoint
    ],
)
def test_a_sink_log_beyond_the_planned_batches_refuses_the_start(
    planned: int | None, sink_batch: int | None, refused: bool
) -> None:
    problem = sink_beyond_checkpoint_problem("q0", "/out", "/ckpt/q0", planned, sink_batch)
    assert (problem is not None) == refused
    if problem:
        assert "/out" in problem and "/ckpt/q0" in problem and f"0..{sink_batch}" in problem


def test_the_driver_pod_carries_the_expected_commits() -> None:
    app_spec = spec()
    attempt = manifests.Attempt(
        app="clicks",
        namespace="analytics",
        app_uid="uid",
        run=1,
        attempt=2,
        spec=app_spec,
        spec_hash=spec_hash(app_spec),
        checkpoint_dir="s3a://bucket/checkpoints/analytics/clicks/r1",
        expected_commits=(("q0", 4), ("q1", 2)),
    )
    pod_manifest = next(obj for obj in manifests.attempt_objects(attempt) if obj["kind"] == "Pod")
    env = {item["name"]: item.get("value") for item in pod_manifest["spec"]["containers"][0]["env"]}
    assert json.loads(env[contract.ENV_EXPECTED_COMMITS]) == {"q0": 4, "q1": 2}
