"""Pure summaries of Structured Streaming progress reports.

Owns: turning a progress JSON document (``StreamingQueryProgress.json``) into the compact summary
the control endpoint and metrics report: rates, batch duration, watermark and its lag, state rows
and memory, the source backlog where a source reports one (Kafka: latest vs end offsets) and the
sources' partitions (what more executors can use).
Never: talks to Spark, reads the clock or keeps state.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

EPOCH_WATERMARK = "1970-01-01T00:00:00.000Z"


@dataclass(frozen=True)
class ProgressSummary:
    """What the runtime reports about one query's latest micro-batch."""

    batch_id: int
    timestamp: str
    input_rows: int
    input_rows_per_second: float
    processed_rows_per_second: float
    duration_ms: int
    watermark: str | None
    watermark_lag_seconds: float | None
    state_rows: int
    state_memory_bytes: int
    source_backlog: float | None
    committed_at: str | None = None
    source_partitions: int | None = None  # Kafka partitions the batch read, over the query's sources
    state_operators: int = 0  # stateful operators of the query (0: stateless)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def parse_timestamp(value: str) -> datetime:
    """Parse Spark's ISO-8601 timestamps (``2026-11-21T23:56:37.886Z``)."""
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _number(value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    return 0.0 if math.isnan(number) else number


def _offsets(value: Any) -> dict[str, Any] | None:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    return value if isinstance(value, dict) else None


def kafka_backlog(latest: Any, end: Any) -> float | None:
    """Records between a Kafka source's end offsets and the latest offsets, summed over partitions.

    Offsets are ``{"topic": {"partition": offset}}``; returns None for any other source.
    """
    latest_offsets, end_offsets = _offsets(latest), _offsets(end)
    if latest_offsets is None or end_offsets is None:
        return None
    total = 0.0
    for topic, partitions in latest_offsets.items():
        ends = end_offsets.get(topic)
        if not isinstance(partitions, dict) or not isinstance(ends, dict):
            return None
        for partition, offset in partitions.items():
            total += max(0.0, _number(offset) - _number(ends.get(partition, offset)))
    return total


def kafka_partitions(latest: Any) -> int | None:
    """Partitions in a Kafka source's offsets (``{"topic": {"partition": offset}}``); None for any other source."""
    offsets = _offsets(latest)
    if offsets is None or not all(isinstance(partitions, dict) for partitions in offsets.values()):
        return None
    return sum(len(partitions) for partitions in offsets.values())


def source_partitions(sources: list[dict[str, Any]]) -> int | None:
    """Partitions over the sources that report offsets per partition (Kafka), or None if none does."""
    counts = [count for source in sources if (count := kafka_partitions(source.get("latestOffset"))) is not None]
    return sum(counts) if counts else None


def source_backlog(sources: list[dict[str, Any]]) -> float | None:
    """Total backlog over the sources that report one, or None if none does."""
    backlogs = []
    for source in sources:
        metrics = source.get("metrics") or {}
        backlog = kafka_backlog(source.get("latestOffset"), source.get("endOffset"))
        if backlog is None and "maxOffsetsBehindLatest" in metrics:
            backlog = _number(metrics["maxOffsetsBehindLatest"])
        if backlog is not None:
            backlogs.append(backlog)
    return sum(backlogs) if backlogs else None


def watermark_lag_seconds(timestamp: str, watermark: str | None) -> float | None:
    """Seconds between the batch's trigger time and its event-time watermark (None without one)."""
    if watermark is None or watermark == EPOCH_WATERMARK:
        return None
    return (parse_timestamp(timestamp) - parse_timestamp(watermark)).total_seconds()


def committed_at(timestamp: str, duration_ms: int) -> str | None:
    """When a batch finished: its trigger time plus its duration."""
    if not timestamp:
        return None
    finished = parse_timestamp(timestamp) + timedelta(milliseconds=duration_ms)
    return finished.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def summarize(progress: dict[str, Any]) -> ProgressSummary:
    """Summarize one progress report."""
    operators = progress.get("stateOperators") or []
    watermark = (progress.get("eventTime") or {}).get("watermark")
    if watermark == EPOCH_WATERMARK:  # Spark's value before a query has seen event time: no watermark yet
        watermark = None
    timestamp = str(progress.get("timestamp", ""))
    duration_ms = int(_number((progress.get("durationMs") or {}).get("triggerExecution")))
    return ProgressSummary(
        batch_id=int(progress.get("batchId", -1)),
        timestamp=timestamp,
        input_rows=int(_number(progress.get("numInputRows"))),
        input_rows_per_second=_number(progress.get("inputRowsPerSecond")),
        processed_rows_per_second=_number(progress.get("processedRowsPerSecond")),
        duration_ms=duration_ms,
        watermark=watermark,
        watermark_lag_seconds=watermark_lag_seconds(timestamp, watermark) if timestamp else None,
        state_rows=int(sum(_number(op.get("numRowsTotal")) for op in operators)),
        state_memory_bytes=int(sum(_number(op.get("memoryUsedBytes")) for op in operators)),
        source_backlog=source_backlog(progress.get("sources") or []),
        committed_at=committed_at(timestamp, duration_ms),
        source_partitions=source_partitions(progress.get("sources") or []),
        state_operators=len(operators),
    )
