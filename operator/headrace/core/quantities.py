"""Spark memory strings (`2g`, `512m`) to MiB and Kubernetes quantities, with the non-heap overhead added.

Owns: how much memory a driver or executor pod requests for a JVM heap (the manifests render it, the
autoscaler's memory quota counts it).
Never: I/O.
"""

from __future__ import annotations

_UNIT_MIB = {"k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024, "": 1 / (1024 * 1024)}
MIN_OVERHEAD_MIB = 384
DRIVER_OVERHEAD_FACTOR = 0.4  # the driver also runs the Python interpreter of the user's script
EXECUTOR_OVERHEAD_FACTOR = 0.4  # and executors run Python workers


def spark_memory_mib(text: str) -> int:
    """MiB in a Spark memory string (a bare number is bytes)."""
    unit = text[-1].lower() if text[-1].isalpha() else ""
    number = int(text[:-1] if unit else text)
    return max(1, int(number * _UNIT_MIB[unit]))


def pod_memory_mib(text: str, overhead_factor: float, overhead: str | None = None) -> int:
    """MiB a pod whose JVM heap is `text` requests: heap plus `overhead` (a spec's memoryOverhead) or, unset,
    `overhead_factor` of the heap, at least MIN_OVERHEAD_MIB (like Spark)."""
    heap = spark_memory_mib(text)
    if overhead is not None:
        return heap + spark_memory_mib(overhead)
    return heap + max(MIN_OVERHEAD_MIB, int(heap * overhead_factor))


def pod_memory(text: str, overhead_factor: float, overhead: str | None = None) -> str:
    """Memory request and limit of a pod whose JVM heap is `text`, as a Kubernetes quantity."""
    return f"{pod_memory_mib(text, overhead_factor, overhead)}Mi"
