"""How the runtime ends: exit codes with a one-line JSON reason for Kubernetes.

Owns: the reasons the runtime reports, their exit codes (from the runtime contract) and writing
the termination message file when it is writable.
Never: decides when to exit; never raises while reporting (a missing file is not an error).
"""

from __future__ import annotations

import json
import logging
import traceback
from dataclasses import dataclass

from headrace.api import runtime_contract as contract

log = logging.getLogger(__name__)
MAX_MESSAGE_CHARS = 3500  # Kubernetes keeps at most 4096 bytes of a termination message
TRACE_FRAMES = 6  # the innermost Python frames of a failure's stack trace in its message
JAVA_FRAMES = 6  # the first `at ...` lines of a JVM exception's trace (Py4J puts the whole trace in the message)


@dataclass(frozen=True)
class Outcome:
    """Why the runtime stops, as an exit code and a CamelCase reason."""

    exit_code: int
    reason: contract.TerminationReason
    message: str

    def to_json(self) -> str:
        return json.dumps({"reason": self.reason, "message": self.message[:MAX_MESSAGE_CHARS]})


def describe(error: BaseException) -> str:
    """An exception as the failure's message: the error first (a JVM error's own trace cut to its first
    JAVA_FRAMES lines), then the innermost TRACE_FRAMES Python frames, so the whole stays small and readable."""
    lines: list[str] = []
    java = 0
    for line in "".join(traceback.format_exception_only(error)).rstrip().splitlines():
        java += line.lstrip().startswith("at ")
        if java <= JAVA_FRAMES or not line.lstrip().startswith("at "):
            lines.append(line)
    if java > JAVA_FRAMES:
        lines.append(f"\t... {java - JAVA_FRAMES} more JVM frames")
    if isinstance(error, SyntaxError) and len(lines) > 1:  # its location lines come first: the error leads
        lines = [lines[-1], *lines[:-1]]
    stack = traceback.extract_tb(error.__traceback__)
    runner = [index for index, frame in enumerate(stack) if frame.filename.endswith("runpy>")]
    frames = list(stack[runner[-1] + 1 :] if runner else stack)  # the script's own, not the runtime's way to run it
    if len(frames) <= TRACE_FRAMES:
        shown, label = frames, f"{len(frames)} frame(s)"
    else:  # the script's own outermost frame (the line that failed there), then the innermost ones
        shown = [frames[0], *frames[-(TRACE_FRAMES - 1) :]]
        label = f"the outermost and the innermost {TRACE_FRAMES - 1} of {len(frames)} frames"
    if shown:
        lines.append(f"Traceback ({label}):")
        lines.extend(entry.rstrip("\n") for entry in traceback.format_list(shown))
    return "\n".join(lines)


def completed(message: str = "all queries finished") -> Outcome:
    return Outcome(contract.EXIT_OK, "Completed", message)


def stopped_with_savepoint(path: str) -> Outcome:
    return Outcome(contract.EXIT_OK, contract.STOPPED_WITH_SAVEPOINT, f"{contract.STOPPED_WITH_SAVEPOINT_PREFIX}{path}")


def failed(reason: contract.TerminationReason, message: str) -> Outcome:
    return Outcome(contract.EXIT_FAILED, reason, message)


def usage(message: str) -> Outcome:
    return Outcome(contract.EXIT_USAGE, "InvalidInvocation", message)


def restore_incompatible(message: str) -> Outcome:
    return Outcome(contract.EXIT_RESTORE_INCOMPATIBLE, "RestoreIncompatible", message)


def checkpoint_behind(message: str) -> Outcome:
    return Outcome(contract.EXIT_CHECKPOINT_BEHIND, "CheckpointBehind", message)


def sink_ahead(message: str) -> Outcome:
    return Outcome(contract.EXIT_CHECKPOINT_BEHIND, "SinkAhead", message)


def lease_lost(message: str) -> Outcome:
    return Outcome(contract.EXIT_LEASE_LOST, "LeaseLost", message)


def write_termination_message(path: str, outcome: Outcome) -> bool:
    """Write the outcome to ``path``; return whether it was written."""
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(outcome.to_json() + "\n")
    except OSError as error:
        log.debug("termination message not written to %s: %s", path, error)
        return False
    return True
