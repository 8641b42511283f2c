"""When the driver reached each start-up phase, so a recovery's seconds can be attributed.

Owns: the phase clock (seconds from the driver process's start, each phase recorded once, fed to
the metrics and the status document) and the watcher thread that sees the JVM, the SparkContext and
the executors appear. The query phases (started, first batch) are marked by the agent.
Never: decides anything; a phase it cannot see stays unset (its metric stays at zero).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Protocol

from headrace.api import runtime_contract as contract

log = logging.getLogger(__name__)
WATCH_SECONDS = 0.1
EXECUTOR_WATCH_SECONDS = 0.5
WATCH_LIMIT_SECONDS = 3600.0


class PhaseSink(Protocol):
    def observe_phase(self, phase: str, seconds: float) -> None: ...


def process_start_time() -> float:
    """Wall-clock time this process started (Linux ``/proc``), else now."""
    try:
        with open("/proc/self/stat", encoding="ascii") as stat_file:
            fields = stat_file.read().rsplit(")", 1)[1].split()
        with open("/proc/stat", encoding="ascii") as stat_file:
            boot = next(int(line.split()[1]) for line in stat_file if line.startswith("btime "))
        return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: starttime, in clock ticks
    except (OSError, ValueError, IndexError, StopIteration):
        return time.time()


class PhaseClock:
    """Seconds from the process start to the first time each phase was reached; thread-safe."""

    def __init__(self, sink: PhaseSink, started_at: float, clock: Callable[[], float] = time.time) -> None:
        self.started_at = started_at
        self._sink = sink
        self._clock = clock
        self._lock = threading.Lock()
        self._reached: dict[str, float] = {}

    def mark(self, phase: str) -> bool:
        """Record `phase` now unless already recorded; True the first time."""
        with self._lock:
            if phase in self._reached:
                return False
            seconds = max(self._clock() - self.started_at, 0.0)
            self._reached[phase] = seconds
        self._sink.observe_phase(phase, seconds)
        log.info("phase %s after %.2fs", phase, seconds)
        if phase == contract.PHASE_FIRST_BATCH:
            log.info("start-up: %s", self.summary())
        return True

    def reached(self, phase: str) -> bool:
        with self._lock:
            return phase in self._reached

    def as_json(self) -> dict[str, float]:
        """Phase -> seconds from the process start, in the order they were reached."""
        with self._lock:
            return {phase: round(seconds, 3) for phase, seconds in self._reached.items()}

    def summary(self) -> str:
        return ", ".join(f"{phase} {seconds:.1f}s" for phase, seconds in self.as_json().items())


def _registered_executors(context: object) -> int:
    tracker = context._jsc.sc().statusTracker()  # type: ignore[attr-defined]
    return len(tracker.getExecutorInfos()) - 1  # minus the driver


def _expected_executors(context: object) -> int:
    """The first executor is the phase (local mode has none): from then on tasks can run."""
    return 0 if str(context.master).startswith("local") else 1  # type: ignore[attr-defined]


def watch_spark(phases: PhaseClock) -> threading.Thread:
    """Mark the JVM, the SparkContext and the first registered executor as the script creates them."""

    def run() -> None:
        from pyspark import SparkContext

        deadline = time.monotonic() + WATCH_LIMIT_SECONDS
        while time.monotonic() < deadline:
            if SparkContext._gateway is not None:
                phases.mark(contract.PHASE_JVM_STARTED)
            context = SparkContext._active_spark_context
            if context is not None and getattr(context, "_jsc", None) is not None:  # the JVM's context exists
                phases.mark(contract.PHASE_SPARK_CONTEXT_READY)
                try:
                    if _registered_executors(context) >= _expected_executors(context):
                        phases.mark(contract.PHASE_EXECUTORS_REGISTERED)
                        return
                except Exception:
                    log.debug("executor count not read", exc_info=True)
                time.sleep(EXECUTOR_WATCH_SECONDS)
                continue
            time.sleep(WATCH_SECONDS)

    thread = threading.Thread(target=run, name="headrace-phases", daemon=True)
    thread.start()
    return thread
