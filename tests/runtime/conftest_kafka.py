"""Kafka fixtures for the runtime tests (imported by tests/runtime/conftest.py when present).

Owns: one real KRaft broker per test session and the Spark Kafka connector jars. The broker's JVM
runs in its own process group and is killed, and its directory removed, even when tests fail.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.kafka import KafkaBroker, spark_kafka_jars


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[KafkaBroker]:
    """A started single-node Kafka broker on loopback, shared by the session."""
    with KafkaBroker() as broker:
        yield broker


@pytest.fixture(scope="session")
def kafka_jars() -> list[Path]:
    """The spark-sql-kafka connector and the dependencies PySpark does not ship."""
    return spark_kafka_jars()
