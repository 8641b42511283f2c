"""The phase clock: each start-up phase once, in seconds from the process start, into the metrics."""

from __future__ import annotations

import subprocess
import sys
import time

from headrace.api import runtime_contract as contract
from headrace.runtime.metrics import RuntimeMetrics
from headrace.runtime.phases import PhaseClock, process_start_time


def test_each_phase_is_recorded_once_from_the_process_start() -> None:
    metrics = RuntimeMetrics()
    now = [100.0]
    phases = PhaseClock(metrics, started_at=90.0, clock=lambda: now[0])
    for phase in contract.STARTUP_PHASES:
        assert metrics.registry.get_sample_value("headrace_runtime_phase_seconds", {"phase": phase}) == 0
    assert phases.mark(contract.PHASE_JVM_STARTED)
    now[0] = 112.5
    assert phases.mark(contract.PHASE_FIRST_BATCH)
    assert not phases.mark(contract.PHASE_JVM_STARTED)  # the first time counts
    assert phases.as_json() == {contract.PHASE_JVM_STARTED: 10.0, contract.PHASE_FIRST_BATCH: 22.5}
    sample = metrics.registry.get_sample_value
    assert sample("headrace_runtime_phase_seconds", {"phase": contract.PHASE_FIRST_BATCH}) == 22.5
    assert sample("headrace_runtime_phase_seconds", {"phase": contract.PHASE_QUERIES_STARTED}) == 0
    assert phases.summary() == "jvm_started 10.0s, first_batch_committed 22.5s"


def test_process_start_time_is_this_process() -> None:
    """Read in a process started for the purpose: the test's own (a pytest worker) may have run for hours."""
    before = time.time()
    out = subprocess.run(
        [sys.executable, "-c", "from headrace.runtime.phases import process_start_time; print(process_start_time())"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    # the boot time in /proc/stat is whole seconds and the start time clock ticks: a second either way
    assert before - 1.0 <= float(out) <= time.time() + 1.0
    assert process_start_time() <= time.time()
