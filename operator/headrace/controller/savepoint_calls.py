"""Taking a savepoint (the `TakeSavepoint` action) off the reconcile workers, and recording its outcome.

Owns: marking the StreamingSavepoint InProgress, then asking the driver on the savepoint runner (minutes while
the driver copies; inline by default), recording Succeeded or Failed on the StreamingSavepoint (whose watch event
wakes the app) and the savepoint metrics; which savepoints are being asked for now (`in_flight`: the planner
does not settle those as interrupted). Never: deciding when to take one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from headrace.adapters.driver import DriverUnavailable
from headrace.controller.drivers import Drivers
from headrace.controller.metrics import OperatorMetrics
from headrace.controller.status_recorder import StatusRecorder
from headrace.core.observation import Observation
from headrace.core.plan import SetSavepointStatus, TakeSavepoint
from headrace.core.timefmt import format_time

logger = logging.getLogger(__name__)


class SavepointCalls:
    """Thread-safe: reconcile workers start calls, the runner's threads finish them."""

    def __init__(
        self,
        drivers: Drivers,
        recorder: StatusRecorder,
        metrics: OperatorMetrics,
        clock: Callable[[], datetime],
        runner: Callable[[Callable[[], None]], object] | None = None,
    ) -> None:
        self.drivers = drivers
        self.recorder = recorder
        self.metrics = metrics
        self.clock = clock
        self._run = runner or (lambda call: call())
        self._in_flight: set[tuple[str, str]] = set()  # (namespace, StreamingSavepoint) being asked for
        self._lock = threading.Lock()

    def in_flight(self, namespace: str) -> frozenset[str]:
        """The StreamingSavepoints of a namespace whose driver call is under way."""
        with self._lock:
            return frozenset(item for space, item in self._in_flight if space == namespace)

    def take(self, body: dict[str, Any], action: TakeSavepoint) -> None:
        """Mark the StreamingSavepoint InProgress, then ask the driver through the runner (off the reconcile
        worker): the outcome is recorded on the StreamingSavepoint, whose change wakes the app again."""
        namespace = body["metadata"]["namespace"]
        self.recorder.savepoint(namespace, action.name, {"phase": "InProgress", "path": action.path})
        key = (namespace, action.name)
        with self._lock:
            self._in_flight.add(key)

        def call() -> None:
            try:
                self._call(body, action)
            except Exception:  # the StreamingSavepoint stays InProgress: the planner settles it as interrupted
                logger.exception("savepoint %s/%s: recording the outcome failed", *key)
            finally:
                with self._lock:
                    self._in_flight.discard(key)

        self._run(call)

    def _call(self, body: dict[str, Any], action: TakeSavepoint) -> None:
        namespace = body["metadata"]["namespace"]
        started = time.monotonic()
        try:
            record = self.drivers.savepoint(body, action)
        except DriverUnavailable as error:
            logger.warning("savepoint %s/%s failed: %s", namespace, action.name, error)
            failed = {"phase": "Failed", "message": str(error), "time": format_time(self.clock())}
            self.recorder.savepoint(namespace, action.name, failed, echo=False)  # its watch event wakes the app
            self.metrics.record_savepoint(action.reason, False, time.monotonic() - started)
            return
        batches = [query.get("batchId") for query in record.get("queries", []) if query.get("batchId") is not None]
        succeeded = {
            "phase": "Succeeded",
            "path": record.get("path", action.path),
            "batchId": max(batches) if batches else None,
            "sizeBytes": record.get("sizeBytes"),
            "time": format_time(self.clock()),
            "message": None,
        }
        self.recorder.savepoint(namespace, action.name, succeeded, echo=False)  # its watch event wakes the app
        self.metrics.record_savepoint(action.reason, True, time.monotonic() - started)

    def set_status(self, body: dict[str, Any], action: SetSavepointStatus) -> None:
        """Record an outcome the planner settled without asking a driver (an import, an interrupted savepoint)."""
        status = {"phase": action.phase, "path": action.path, "message": action.message or None}
        self.recorder.savepoint(
            body["metadata"]["namespace"], action.name, {**status, "time": format_time(self.clock())}
        )

    def count_settled(self, action: SetSavepointStatus, observation: Observation, now: datetime) -> None:
        """The metrics of a `set_status` outcome: an import is not timed, a savepoint interrupted by an operator
        restart is timed from its StreamingSavepoint's creation."""
        resource = observation.savepoint(action.name)
        reason = resource.reason if resource is not None else None
        imported = resource is not None and resource.import_path is not None
        created = resource.created_at if resource is not None and not imported else None
        seconds = (now - created).total_seconds() if created is not None else None
        self.metrics.record_savepoint(reason, action.phase == "Succeeded", seconds)
