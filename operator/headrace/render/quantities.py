"""Spark memory strings (`2g`, `512m`) to Kubernetes quantities, with the non-heap overhead added."""

from __future__ import annotations

_UNIT_MIB = {"k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024, "": 1 / (1024 * 1024)}
MIN_OVERHEAD_MIB = 384


def spark_memory_mib(text: str) -> int:
    """MiB in a Spark memory string (a bare number is bytes)."""
    unit = text[-1].lower() if text[-1].isalpha() else ""
    number = int(text[:-1] if unit else text)
    return max(1, int(number * _UNIT_MIB[unit]))


def pod_memory(text: str, overhead_factor: float) -> str:
    """Memory request and limit of a pod whose JVM heap is `text` (heap plus overhead, like Spark)."""
    heap = spark_memory_mib(text)
    return f"{heap + max(MIN_OVERHEAD_MIB, int(heap * overhead_factor))}Mi"
