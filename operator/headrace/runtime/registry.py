"""The queries the runtime started on behalf of the script, and what it knows about each.

Owns: naming queries (``query_key``), where their checkpoint is, how to relaunch them (for the
stop-with-savepoint replay), their latest progress summary and last committed batch, their batch totals
and trigger interval (the autoscaler's signals); thread-safe.
Never: talks to Spark itself beyond the handles it is given.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from headrace.api import runtime_contract as contract
from headrace.runtime.progress import ProgressSummary

FILE_SINK_FORMATS = ("parquet", "json", "csv", "orc", "text")
_UNSAFE_NAME_CHARACTERS = re.compile(r"[^A-Za-z0-9._-]")


def query_key(name: str | None, unnamed_index: int) -> str:
    """A stable directory name for a query: its name made path-safe, else ``q<start order>``."""
    if name:
        return _UNSAFE_NAME_CHARACTERS.sub("_", name)
    return f"q{unnamed_index}"


@dataclass
class BatchTotals:
    """What a query's batches added up to in this driver, counted when each batch's progress arrives."""

    batches: int = 0
    input_rows: int = 0
    busy_seconds: float = 0.0

    def add(self, summary: ProgressSummary) -> None:
        self.batches += 1
        self.input_rows += summary.input_rows
        self.busy_seconds += summary.duration_ms / 1000.0

    def to_json(self) -> contract.QueryTotals:
        return {"batches": self.batches, "inputRows": self.input_rows, "busySeconds": round(self.busy_seconds, 3)}


@dataclass
class TrackedQuery:
    """One query started through the patched ``DataStreamWriter``."""

    key: str
    name: str | None
    checkpoint: str
    managed: bool
    relaunch: Callable[[], Any]  # restarts the same query on the same writer (same checkpoint)
    writer: Any
    handle: Any
    sink_path: str | None = None
    sink_format: str | None = None
    summary: ProgressSummary | None = None
    last_committed_at: str | None = None
    totals: BatchTotals = field(default_factory=BatchTotals)
    trigger_interval_seconds: float | None = None  # a processing-time trigger's (0: batches back to back)

    @property
    def query_id(self) -> str:
        return str(self.handle.id)

    @property
    def run_id(self) -> str:
        return str(self.handle.runId)

    @property
    def file_sink_path(self) -> str | None:
        """The output directory when the sink is a file sink with its ``_spark_metadata`` log."""
        if self.sink_path and (self.sink_format or "parquet").lower() in FILE_SINK_FORMATS:
            return self.sink_path
        return None

    def status(self) -> dict[str, Any]:
        summary = self.summary
        return {
            "key": self.key,
            "id": self.query_id,
            "runId": self.run_id,
            "name": self.name,
            "checkpoint": self.checkpoint,
            "managedCheckpoint": self.managed,
            "active": bool(self.handle.isActive),
            "lastCommittedBatchId": summary.batch_id if summary else None,
            "lastCommittedAt": self.last_committed_at,
            "progress": summary.to_json() if summary else None,
            "totals": self.totals.to_json(),
            "triggerIntervalSeconds": self.trigger_interval_seconds,
        }


@dataclass
class QueryRegistry:
    """Every tracked query by key, in start order."""

    _queries: dict[str, TrackedQuery] = field(default_factory=dict)
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _unnamed: int = 0

    def peek_key(self, name: str | None) -> str:
        """The key `next_key` would give a query of this name now, without taking it."""
        with self._lock:
            return query_key(name, self._unnamed)

    def next_key(self, name: str | None) -> str:
        with self._lock:
            key = query_key(name, self._unnamed)
            if not name:
                self._unnamed += 1
            return key

    def add(self, query: TrackedQuery) -> None:
        with self._lock:
            self._queries[query.key] = query

    def all(self) -> list[TrackedQuery]:
        with self._lock:
            return list(self._queries.values())

    def by_id(self, query_id: str) -> TrackedQuery | None:
        with self._lock:
            for query in self._queries.values():
                if query.query_id == query_id:
                    return query
            return None

    def active(self) -> list[TrackedQuery]:
        return [query for query in self.all() if query.handle.isActive]
