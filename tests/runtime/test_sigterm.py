"""SIGTERM without a savepoint: the runtime exits at once (JVM included) and reports its start-up phases.

The checkpoint is consistent at any point, so stopping the queries and the SparkContext first only
delays the pod's end (and so the next attempt): measured here, the old stop took 1.9-4.3 s.
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest

from headrace.api import runtime_contract as contract

from .harness import RuntimeProcess, commits, write_events

pytestmark = pytest.mark.spark

EXIT_WITHIN_SECONDS = 1.5  # the old graceful stop took 1.9-4.3 s on 2 loaded cores
GROUP_GONE_WITHIN_SECONDS = 15.0


def _group_alive(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_sigterm_exits_at_once_with_phases_reported_and_the_next_attempt_resumes(tmp_path: Path) -> None:
    inputs, output, checkpoint = tmp_path / "in", tmp_path / "out", tmp_path / "checkpoints"
    write_events(inputs, 6, 20)
    args = ["--input", str(inputs), "--output", str(output), "--files-per-batch", "1"]
    env = {contract.ENV_CHECKPOINT_DIR: str(checkpoint), contract.ENV_STATE_PARTITIONS: "2"}
    first = RuntimeProcess(tmp_path, args, env, name="first")
    try:
        first.start()
        first.wait_until(lambda: len(commits(checkpoint / "q0")) >= 2, 300, "two commits")
        code, status = first.request("GET", contract.PATH_STATUS)
        assert code == 200
        phases = status.get("phases") or {}
        assert list(phases) == [phase for phase in contract.STARTUP_PHASES if phase in phases]  # in order reached
        assert set(phases) == set(contract.STARTUP_PHASES), phases  # local mode: no executor to wait for
        assert 0 < phases[contract.PHASE_JVM_STARTED] <= phases[contract.PHASE_FIRST_BATCH]
        assert status.get("startedAt", "").endswith("Z")
        metrics = first.metrics()
        for phase in contract.STARTUP_PHASES:
            match = re.search(rf'headrace_runtime_phase_seconds{{phase="{phase}"}} ([0-9.e+]+)', metrics)
            assert match is not None and float(match.group(1)) > 0, phase
        assert first.process is not None
        signalled = time.monotonic()
        first.process.send_signal(signal.SIGTERM)
        code = first.wait(timeout=60)
        exited = time.monotonic() - signalled
        deadline = time.monotonic() + GROUP_GONE_WITHIN_SECONDS
        while _group_alive(first.process.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _group_alive(first.process.pid), "the JVM outlived the runtime"
    finally:
        first.kill()
    assert code == contract.EXIT_FAILED
    assert first.termination()["reason"] == "Terminated"
    assert exited < EXIT_WITHIN_SECONDS, f"SIGTERM -> exit took {exited:.2f}s"
    committed = commits(checkpoint / "q0")
    again = RuntimeProcess(tmp_path, args, {**env, contract.ENV_ATTEMPT: "2"}, name="second")
    try:
        again.start()
        again.wait_until(lambda: commits(checkpoint / "q0")[-1] > committed[-1], 300, "a commit after the exit")
    finally:
        again.kill()
