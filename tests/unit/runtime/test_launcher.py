"""How the driver's process ends when its Lease is lost (issue 23, the partition test): the guard's exit reports
LeaseLost before it ends the JVM, and what the script or its queries raise once their JVM is gone is that stop, never
ScriptFailed (a partitioned driver's self-stop was logged as "the script failed" 8 ms before "exiting 5: LeaseLost").
Its own failures stay ScriptFailed, QueryFailed and ScriptExited."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import pytest

from headrace.api import runtime_contract as contract
from headrace.runtime import launcher
from headrace.runtime.agent import Agent
from headrace.runtime.settings import settings_from_env

WHY = "the Lease could not be renewed for 10.2s (deadline 10s)"


@dataclass
class Stub:
    """What `run_script` asks of the agent."""

    lease_lost: str | None = None
    stopping: bool = False
    waited: bool = False

    def wait_for_queries(self) -> object:
        self.waited = True
        if self.lease_lost is not None:
            raise ConnectionRefusedError(111, "Connection refused")  # py4j to the JVM the guard ended
        return launcher.termination.completed()


@pytest.fixture(autouse=True)
def _restored_interpreter() -> Iterator[None]:
    """`run_script` sets sys.argv and puts the script's directory first on sys.path, as the driver process does."""
    argv, path = list(sys.argv), list(sys.path)
    yield
    sys.argv[:], sys.path[:] = argv, path


def _script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "job.py"
    path.write_text(body)
    return str(path)


RAISES_LIKE_A_DEAD_JVM = "raise ConnectionRefusedError(111, 'Connection refused')\n"


def test_a_script_failing_once_its_lease_is_lost_ends_as_lease_lost_not_as_its_failure(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    outcome = launcher.run_script(_script(tmp_path, RAISES_LIKE_A_DEAD_JVM), [], cast(Agent, Stub(lease_lost=WHY)))
    assert (outcome.exit_code, outcome.reason) == (contract.EXIT_LEASE_LOST, "LeaseLost")
    assert outcome.message.startswith(WHY)
    assert "the script failed" not in caplog.text


def test_queries_failing_once_the_lease_is_lost_end_as_lease_lost(tmp_path: Path) -> None:
    agent = Stub(lease_lost=WHY)  # the script returned; waiting for its queries meets the ended JVM
    outcome = launcher.run_script(_script(tmp_path, "pass\n"), [], cast(Agent, agent))
    assert agent.waited and outcome.reason == "LeaseLost"


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (RAISES_LIKE_A_DEAD_JVM, "ScriptFailed"),
        ("raise SystemExit(3)\n", "ScriptExited"),
        ("pass\n", "Completed"),
    ],
)
def test_with_the_lease_held_the_scripts_own_outcome_is_reported(tmp_path: Path, body: str, reason: str) -> None:
    assert launcher.run_script(_script(tmp_path, body), [], cast(Agent, Stub())).reason == reason


def test_the_guards_exit_reports_lease_lost_before_it_ends_the_jvm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "termination-log"
    settings = settings_from_env({"HEADRACE_TERMINATION_MESSAGE_PATH": str(path)})
    reported_at_kill: list[str] = []
    monkeypatch.setattr(launcher, "_kill_jvm", lambda: reported_at_kill.append(path.read_text()))

    def exited(code: int) -> None:
        raise SystemExit(code)

    monkeypatch.setattr(launcher.os, "_exit", exited)
    with pytest.raises(SystemExit) as ended:
        launcher.exit_lease_lost(settings, WHY)
    assert ended.value.code == contract.EXIT_LEASE_LOST
    (written,) = reported_at_kill
    assert json.loads(written)["reason"] == "LeaseLost"
    assert json.loads(written)["message"].startswith(WHY)
