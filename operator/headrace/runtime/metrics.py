"""Prometheus metrics of the driver: per-query progress, savepoints, start-up phases.

Owns: the metric families (Prometheus naming, label ``query`` = the query key, bounded by the
script's queries; label ``phase`` = the runtime contract's start-up phases), initialising series at
zero, and serving them on the metrics port.
Never: reads Spark; callers feed it progress summaries and savepoint outcomes.
"""

from __future__ import annotations

import threading
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from headrace.api import runtime_contract as contract
from headrace.runtime.progress import ProgressSummary

MAX_QUERY_LABELS = 64
SOCKET_TIMEOUT_SECONDS = 30.0  # a scrape connection idle this long is closed
SAVEPOINT_RESULTS = ("success", "failure")


class RuntimeMetrics:
    """The runtime's metric families in their own registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._labels: set[str] = set()
        self._lock = threading.Lock()
        query = ["query"]
        self.input_rate = self._gauge("input_rows_per_second", "Input rows per second of the last batch", query)
        self.processed_rate = self._gauge(
            "processed_rows_per_second", "Processed rows per second of the last batch", query
        )
        self.batch_duration = self._gauge("batch_duration_seconds", "Duration of the last micro-batch", query)
        self.last_batch = self._gauge("last_committed_batch_id", "Id of the last committed micro-batch", query)
        self.watermark_lag = self._gauge(
            "watermark_lag_seconds", "Trigger time minus event-time watermark of the last batch", query
        )
        self.state_rows = self._gauge("state_rows", "Rows in the query's state stores", query)
        self.state_memory = self._gauge("state_memory_bytes", "Memory used by the query's state stores", query)
        self.source_backlog = self._gauge("source_backlog_records", "Records waiting in the sources", query)
        self.batches = Counter("headrace_query_batches", "Micro-batches completed", query, registry=self.registry)
        self.input_rows = Counter("headrace_query_input_rows", "Input rows processed", query, registry=self.registry)
        self.savepoints = Counter(
            "headrace_runtime_savepoints", "Savepoints taken by result", ["result"], registry=self.registry
        )
        self.savepoint_duration = Gauge(
            "headrace_runtime_last_savepoint_duration_seconds", "Duration of the last savepoint", registry=self.registry
        )
        self.savepoint_bytes = Gauge(
            "headrace_runtime_last_savepoint_bytes", "Size of the last savepoint", registry=self.registry
        )
        for result in SAVEPOINT_RESULTS:
            self.savepoints.labels(result=result)
        self.start_time = Gauge(
            "headrace_runtime_start_time_seconds",
            "Unix time the driver process started",
            registry=self.registry,
        )
        self.phase_seconds = Gauge(
            "headrace_runtime_phase_seconds",
            "Seconds from the driver process's start to each start-up phase (0 until reached)",
            ["phase"],
            registry=self.registry,
        )
        for phase in contract.STARTUP_PHASES:
            self.phase_seconds.labels(phase=phase)

    def _gauge(self, name: str, documentation: str, labels: list[str]) -> Gauge:
        return Gauge(f"headrace_query_{name}", documentation, labels, registry=self.registry)

    def register_query(self, query: str) -> bool:
        """Start a query's series at zero; False once the label bound is reached."""
        with self._lock:
            if query not in self._labels and len(self._labels) >= MAX_QUERY_LABELS:
                return False
            self._labels.add(query)
        for counter in (self.batches, self.input_rows):
            counter.labels(query=query)
        self.last_batch.labels(query=query).set(-1)
        return True

    def observe_progress(self, query: str, summary: ProgressSummary) -> None:
        if not self.register_query(query):
            return
        self.input_rate.labels(query=query).set(summary.input_rows_per_second)
        self.processed_rate.labels(query=query).set(summary.processed_rows_per_second)
        self.batch_duration.labels(query=query).set(summary.duration_ms / 1000.0)
        self.last_batch.labels(query=query).set(summary.batch_id)
        self.state_rows.labels(query=query).set(summary.state_rows)
        self.state_memory.labels(query=query).set(summary.state_memory_bytes)
        if summary.watermark_lag_seconds is not None:
            self.watermark_lag.labels(query=query).set(summary.watermark_lag_seconds)
        if summary.source_backlog is not None:
            self.source_backlog.labels(query=query).set(summary.source_backlog)
        self.batches.labels(query=query).inc()
        self.input_rows.labels(query=query).inc(summary.input_rows)

    def observe_savepoint(self, succeeded: bool, seconds: float, size: int) -> None:
        self.savepoints.labels(result="success" if succeeded else "failure").inc()
        self.savepoint_duration.set(seconds)
        if succeeded:
            self.savepoint_bytes.set(size)

    def observe_phase(self, phase: str, seconds: float) -> None:
        if phase in contract.STARTUP_PHASES:
            self.phase_seconds.labels(phase=phase).set(seconds)

    def serve(self, address: str, port: int, socket_timeout: float = SOCKET_TIMEOUT_SECONDS) -> Any:
        """Serve ``/metrics`` in a daemon thread; return the server (``shutdown()`` to stop). A connection that
        sends nothing for ``socket_timeout`` seconds is closed (a stalled scraper never keeps a thread)."""

        class Handler(WSGIRequestHandler):
            timeout = socket_timeout

            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = make_server(address, port, make_wsgi_app(self.registry), ThreadingWSGIServer, handler_class=Handler)
        threading.Thread(target=server.serve_forever, name="headrace-metrics", daemon=True).start()
        return server
