"""Driver failures classified: which ones a restart cannot heal, when an app is failing at start, and the bounded
text of a failure's event.

Owns: the errors that no restart fixes (a Python SyntaxError or ImportError, a usage error, a Spark setting Spark
itself refuses), the StartupFailing verdict (attempts that keep failing before their first committed batch), and
fitting a failure's stack trace into an event.
Never: I/O or the clock; never decides whether or when to restart (restarts.py and the planner do).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Final

from headrace.api.models import ProgressSummary, RestartStatus, RunStatus
from headrace.core.timefmt import parse_time

STARTUP_FAILING: Final = "StartupFailing"
EVENT_MESSAGE_LIMIT: Final = 1024  # what the operator posts of an event's message (adapters.kube)

# Errors in a failure's message that no restart of the same spec heals, and why.
_UNHEALABLE_MESSAGES: Final = (
    (
        re.compile(r"^(SyntaxError|IndentationError|TabError)\b", re.MULTILINE),
        "the script does not compile (a Python syntax error)",
    ),
    (
        re.compile(r"^(ModuleNotFoundError|ImportError)\b", re.MULTILINE),
        "the script imports a module the image does not have",
    ),
    (
        re.compile(r"\[INVALID_SPARK_CONFIG\b|\bInvalid Spark config:"),
        "Spark refuses its configuration (spec.sparkConf, or the driver's and executors' settings)",
    ),
)
_USAGE_EXIT: Final = re.compile(r"\bexited with 2$")  # the runtime's ScriptExited message for sys.exit(2)


def unhealable(reason: str | None, message: str | None) -> str | None:
    """Why a failure cannot heal by restarting the same spec (None when a restart may well heal it)."""
    body = message or ""
    if reason == "InvalidInvocation":
        return "the runtime refused its invocation (exit code 2: the application file or its settings)"
    if reason == "ScriptExited" and _USAGE_EXIT.search(body):
        return "the script exited with 2, the exit code of a usage error (e.g. argparse refusing spec.application.args)"
    return next((why for pattern, why in _UNHEALABLE_MESSAGES if pattern.search(body)), None)


def committed_in_attempt(progress: ProgressSummary | None, run: RunStatus | None) -> bool:
    """Whether the current attempt's driver reported its first committed batch (its container start is kept in
    whole seconds, the batch's time to the millisecond: an earlier attempt's batch is always before it)."""
    if progress is None or progress.firstBatchAt is None or run is None or run.startedAt is None:
        return False
    first: datetime = parse_time(progress.firstBatchAt)
    return first >= parse_time(run.startedAt)


def count_startup_failure(restarts: RestartStatus, *, committed: bool) -> RestartStatus:
    """After a failure: attempts in a row that failed before their first committed batch (0 when this one had
    committed)."""
    return restarts.model_copy(update={"startupFailures": 0 if committed else restarts.startupFailures + 1})


def startup_failing(restarts: RestartStatus, threshold: int) -> str | None:
    """The Degraded StartupFailing message when the app keeps failing before its first committed batch: the last
    failure cannot heal by a restart, or `threshold` attempts in a row failed before committing (None otherwise)."""
    failures = restarts.startupFailures
    if failures == 0:
        return None
    last = f"{restarts.lastFailureReason}: {restarts.lastFailureMessage or ''}".strip()
    why = unhealable(restarts.lastFailureReason, restarts.lastFailureMessage)
    if why is not None:
        return (
            f"{why}; restarting cannot fix this: change the spec (image, application, args or sparkConf) and the "
            f"next attempt runs it. Failed {failures} time(s) in a row before a committed batch; last failure: {last}"
        )
    if failures >= threshold:
        return (
            f"failed {failures} times in a row before a committed batch (restartPolicy.startupFailureThreshold "
            f"{threshold}); last failure: {last}"
        )
    return None


def event_message(summary: str, detail: str, limit: int = EVENT_MESSAGE_LIMIT) -> str:
    """A failure's event: `summary` (what happened and what follows), then as many whole lines of `detail` (the
    rest of the error and its bounded stack trace) as fit in `limit` characters, saying how many were left out."""
    lines = detail.splitlines()
    kept: list[str] = []
    for line in lines:
        if len("\n".join([summary, *kept, line])) + len(_LEFT_OUT.format(len(lines))) > limit:
            break
        kept.append(line)
    left = len(lines) - len(kept)
    return ("\n".join([summary, *kept]) + (_LEFT_OUT.format(left) if left else ""))[:limit]


_LEFT_OUT: Final = "\n... {} more line(s) in status.restarts.lastFailureMessage"
