"""How the runtime ends: exit codes with a one-line JSON reason for Kubernetes.

Owns: the reasons the runtime reports, their exit codes (from the runtime contract) and writing
the termination message file when it is writable.
Never: decides when to exit; never raises while reporting (a missing file is not an error).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from headrace.api import runtime_contract as contract

log = logging.getLogger(__name__)
MAX_MESSAGE_CHARS = 3500  # Kubernetes keeps at most 4096 bytes of a termination message


@dataclass(frozen=True)
class Outcome:
    """Why the runtime stops, as an exit code and a CamelCase reason."""

    exit_code: int
    reason: contract.TerminationReason
    message: str

    def to_json(self) -> str:
        return json.dumps({"reason": self.reason, "message": self.message[:MAX_MESSAGE_CHARS]})


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
