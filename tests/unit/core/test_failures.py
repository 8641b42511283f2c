"""Failures classified (`core.failures`): errors no restart heals, StartupFailing, and a failure's bounded event;
then the planner's use of them, from a driver failing at start to its first committed batch."""

from __future__ import annotations

from datetime import timedelta

import pytest

from headrace.api import runtime_contract as contract
from headrace.api.models import ProgressSummary, RestartStatus, RunStatus, StreamingAppStatus
from headrace.core import failures
from headrace.core.observation import DriverProgress, Observation
from headrace.core.planner import decide
from headrace.core.timefmt import format_time
from tests.unit.builders import T0, later, pod, seen, spec, view

# The first lines of real messages: Spark 4.3's refusal of an executor option (local PySpark, SparkConf
# validateSettings), and the runtime's messages for a script that does not compile / import / parse its arguments.
SPARK_REFUSAL = (
    "py4j.protocol.Py4JJavaError: An error occurred while calling None.org.apache.spark.api.java.JavaSparkContext.\n"
    ": org.apache.spark.SparkException: [INVALID_SPARK_CONFIG.INVALID_EXECUTOR_MEMORY_OPTIONS] Invalid Spark config: "
    "spark.executor.extraJavaOptions is not allowed to specify max heap memory settings (was '-Xmx1g'). Use "
    "spark.executor.memory instead. SQLSTATE: 42616\n"
    "\tat org.apache.spark.SparkConf.validateSettings(SparkConf.scala:573)"
)
SYNTAX = "SyntaxError: '(' was never closed\n  File \"/opt/app.py\", line 1\n    x = (\n        ^"
IMPORT = (
    "ModuleNotFoundError: No module named 'kafka'\nTraceback (the innermost 1 of 1 frames):\n  File \"/opt/app.py\""
)

UNHEALABLE: list[tuple[str, str, str | None]] = [
    ("ScriptFailed", SPARK_REFUSAL, "Spark refuses its configuration"),
    ("ScriptFailed", SYNTAX, "does not compile"),
    ("ScriptFailed", IMPORT, "imports a module"),
    ("ScriptFailed", "ImportError: cannot import name 'x' from 'y'", "imports a module"),
    ("ScriptExited", "the script exited with 2", "usage error"),
    ("InvalidInvocation", "no such script: /opt/app.py", "refused its invocation"),
    # a restart may heal these
    ("ScriptExited", "the script exited with 1", None),
    ("ScriptExited", "the script exited with 22", None),
    ("QueryFailed", "query q failed: org.apache.kafka.common.errors.TimeoutException", None),
    ("ScriptFailed", "ValueError: SyntaxError is not at the start of a line", None),
    ("DriverLost", "driver pod clicks-r1-a1-driver disappeared", None),
    ("Error", "", None),
    (None, None, None),  # type: ignore[list-item]
]


@pytest.mark.parametrize(("reason", "message", "why"), UNHEALABLE)
def test_errors_no_restart_heals(reason: str | None, message: str | None, why: str | None) -> None:
    found = failures.unhealable(reason, message)
    assert (found is None) if why is None else (found is not None and why in found), found


def restarts(startup: int, reason: str = "Error", message: str = "exit code 1") -> RestartStatus:
    return RestartStatus(total=startup, consecutive=startup, startupFailures=startup, lastFailureReason=reason,
                         lastFailureMessage=message)  # fmt: skip


STARTUP: list[tuple[RestartStatus, int, str | None]] = [
    (restarts(0), 3, None),
    (restarts(1), 3, None),
    (restarts(2), 3, None),
    (restarts(3), 3, "failed 3 times in a row before a committed batch"),
    (restarts(1), 1, "failed 1 times in a row"),
    (restarts(1, "ScriptFailed", SYNTAX), 3, "restarting cannot fix this"),
    (restarts(0, "ScriptFailed", SYNTAX), 3, None),  # it had committed: not a start-up failure
]


@pytest.mark.parametrize(("status", "threshold", "expected"), STARTUP)
def test_startup_failing(status: RestartStatus, threshold: int, expected: str | None) -> None:
    message = failures.startup_failing(status, threshold)
    assert (message is None) if expected is None else (message is not None and expected in message), message
    if message is not None:
        assert str(status.lastFailureMessage).splitlines()[0] in message, "the error itself is named"


def test_committed_in_this_attempt_is_a_first_batch_after_its_start() -> None:
    run = RunStatus(number=1, attempt=2, checkpointDir="c", driverPod="p", specHash="h", startedAt=format_time(T0))
    before, after = format_time(T0 - timedelta(seconds=5)), format_time(T0 + timedelta(seconds=9))
    assert failures.committed_in_attempt(ProgressSummary(firstBatchAt=after), run)
    assert not failures.committed_in_attempt(ProgressSummary(firstBatchAt=before), run)  # the attempt before
    assert not failures.committed_in_attempt(ProgressSummary(), run)
    assert not failures.committed_in_attempt(None, run)
    assert not failures.committed_in_attempt(
        ProgressSummary(firstBatchAt=after), run.model_copy(update={"startedAt": None})
    )


def test_an_event_keeps_the_summary_and_whole_lines_of_the_trace_within_the_limit() -> None:
    trace = "\n".join(f'  File "/opt/app.py", line {n}, in f{n}' for n in range(100))
    message = failures.event_message("ScriptFailed: boom; restarting in 4s", trace, limit=300)
    assert len(message) <= 300 and message.startswith("ScriptFailed: boom; restarting in 4s\n  File")
    assert message.endswith("more line(s) in status.restarts.lastFailureMessage")
    kept = message.splitlines()[1:-1]
    assert kept and set(kept) <= set(trace.splitlines()), "whole lines only"
    assert failures.event_message("short", "one\ntwo") == "short\none\ntwo"
    assert failures.event_message("short", "") == "short"


# --- through the planner ----------------------------------------------------------------------------------------

FIRST_BATCH = DriverProgress(
    ready=True, started_at=later(100), phases=((contract.PHASE_FIRST_BATCH, 9.0),), committed=(("q", 0),)
)


def _failed(attempt: int, message: str, reason: str = "ScriptFailed") -> Observation:
    return seen(pod(attempt=attempt, phase="Failed", exit_code=1, reason=reason, message=message))


def _degraded(status: StreamingAppStatus) -> tuple[str, str]:
    condition = next(c for c in status.conditions if c.type == "Degraded")
    return condition.reason, condition.message


def test_an_error_no_restart_heals_is_startup_failing_at_once_and_while_the_next_attempt_runs() -> None:
    deployed = decide(view(None, None), seen(), T0).status
    failed = decide(view(None, deployed), _failed(1, SPARK_REFUSAL), later(20))
    assert failed.status.restarts.startupFailures == 1
    reason, message = _degraded(failed.status)
    assert reason == failures.STARTUP_FAILING and "Spark refuses its configuration" in message
    assert "INVALID_SPARK_CONFIG" in message, "the error itself"
    (event,) = [event for event in failed.events if event.reason == "DriverFailed"]
    assert "INVALID_SPARK_CONFIG" in event.message and len(event.message) <= failures.EVENT_MESSAGE_LIMIT

    # the next attempt runs (its queries not started yet): still StartupFailing, not RecentRestarts (Healthy in Argo)
    running = decide(view(None, failed.status), seen(pod(attempt=2, running_since=later(30))), later(31)).status
    assert running.phase == "Running"
    assert _degraded(running)[0] == failures.STARTUP_FAILING

    # its first batch: the count resets, and the next decision says RecentRestarts
    progress = Observation(drivers=(pod(attempt=2, running_since=later(30)),), progress=FIRST_BATCH)
    committed = decide(view(None, running), progress, later(112)).status
    assert committed.restarts.startupFailures == 0
    after = decide(view(None, committed), progress, later(113)).status
    assert _degraded(after)[0] == "RecentRestarts"


def test_failing_before_the_first_batch_threshold_times_in_a_row_is_startup_failing() -> None:
    app_spec = spec(restartPolicy={"backoff": {"initialSeconds": 1, "maxSeconds": 1}})
    status = decide(view(app_spec, None), seen(), T0).status
    reasons = []
    for attempt in range(1, 4):
        status = decide(
            view(app_spec, status), _failed(attempt, "exit code 1", reason="Error"), later(attempt * 10)
        ).status
        reasons.append(_degraded(status)[0])
        retried = decide(view(app_spec, status), seen(), later(attempt * 10 + 5))
        status = retried.status
    assert reasons == ["Error", "Error", failures.STARTUP_FAILING]
    assert status.restarts.startupFailures == 3


def test_a_failure_after_a_committed_batch_is_not_a_startup_failure() -> None:
    deployed = decide(view(None, None), seen(), T0).status
    progress = Observation(drivers=(pod(running_since=later(1)),), progress=FIRST_BATCH)
    running = decide(view(None, deployed), progress, later(112)).status
    failed = decide(view(None, running), _failed(1, SYNTAX), later(120)).status
    assert failed.restarts.startupFailures == 0
    assert _degraded(failed)[0] == "ScriptFailed"
