"""A real single-node Apache Kafka (KRaft) broker on loopback for tests and development.

Owns: the pinned Kafka and Spark-connector versions, the broker's configuration, formatting its
storage, running the JVM in its own process group on random free ports, a small confluent-kafka
client for topics, producing and reading back, and removing every file it made when it stops.
Also the jars local-mode Spark needs to read and write Kafka (`spark_kafka_jars`), and the client side
the cluster's producer helper uses (`create_topic`, `produce`).
A broker may also serve pods (`PodListener`): a second listener on the node's bridge gateway, advertised
under a Service name, so pods reach it as ``kafka.kafka.svc:9092`` (the cluster module runs that one).
`python -m testbed.kafka` runs one broker in the foreground until interrupted.
Never: used by the operator or the runtime; never listens beyond loopback and the node's bridge gateway.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import os
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed import maven, procs

KAFKA_VERSION = "4.1.1"
BROKER_COORDINATES = (
    f"org.apache.kafka:kafka_2.13:{KAFKA_VERSION}",
    # Kafka logs through slf4j 1.x; this binds it to the log4j2 configuration written below.
    "org.apache.logging.log4j:log4j-slf4j-impl:2.24.3",
)
# Maven Central (as reachable here) has no spark-sql-kafka 4.3.0 and no spark-token-provider-kafka
# after 4.1.0-preview1, so the connector is the newest published 4.x with that token provider pinned.
# It runs against PySpark 4.3.0's own jars (see tests/runtime/test_kafka_exactly_once.py).
SPARK_KAFKA_CONNECTOR = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"
SPARK_KAFKA_PINNED = ("org.apache.spark:spark-token-provider-kafka-0-10_2.13:4.1.0-preview1",)

LOOPBACK = "127.0.0.1"
START_TIMEOUT_SECONDS = 90.0
Record = str | bytes | tuple[str | bytes | None, str | bytes]

_LOG4J2 = """status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = ${sys:kafka.logs.dir}/broker.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = WARN
logger.apache.name = org.apache.kafka
logger.apache.level = WARN
"""


def broker_jars() -> list[Path]:
    """The Kafka broker and its runtime dependencies (resolved once into the cache)."""
    return maven.resolve(BROKER_COORDINATES, exclude_provided_by_spark=False)


def spark_kafka_jars() -> list[Path]:
    """Jars to add to `spark.jars` (or `--jars`) so local-mode PySpark can use the Kafka source and sink."""
    return maven.resolve([SPARK_KAFKA_CONNECTOR], exclude_provided_by_spark=True, pinned=SPARK_KAFKA_PINNED)


def new_cluster_id(draw: Callable[[], bytes] = lambda: uuid.uuid4().bytes) -> str:
    """A KRaft cluster id: 16 random bytes as URL-safe base64 without padding, as Kafka's `Uuid`.

    Like Kafka's `Uuid.randomUuid`, it never returns an id that starts with "-": `kafka-storage format -t -Xyz…`
    reads such an id as an option and fails ("argument --cluster-id/-t: expected one argument"), one start in 64.
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(draw()).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


@dataclass(frozen=True)
class PodListener:
    """A listener for pods: bound on `bind_address`:`bind_port` (the bridge gateway, behind a Service),
    advertised as `advertised` (the Service's name and port, e.g. ``kafka.kafka.svc:9092``)."""

    bind_address: str
    bind_port: int
    advertised: str


def broker_properties(
    broker_port: int, controller_port: int, log_dir: Path, pods: PodListener | None = None
) -> dict[str, str]:
    """Configuration of one combined broker+controller, replication factor 1, on loopback (plus a listener
    named PODS for `pods`, when given; brokers and host clients keep using the loopback one)."""
    listeners = [f"PLAINTEXT://{LOOPBACK}:{broker_port}", f"CONTROLLER://{LOOPBACK}:{controller_port}"]
    advertised = [f"PLAINTEXT://{LOOPBACK}:{broker_port}"]
    protocols = "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
    if pods is not None:
        listeners.append(f"PODS://{pods.bind_address}:{pods.bind_port}")
        advertised.append(f"PODS://{pods.advertised}")
        protocols += ",PODS:PLAINTEXT"
    return {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@{LOOPBACK}:{controller_port}",
        "listeners": ",".join(listeners),
        "advertised.listeners": ",".join(advertised),
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": protocols,
        "log.dirs": str(log_dir),
        "num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "false",
    }


def render_properties(properties: Mapping[str, str]) -> str:
    """A Java properties file."""
    return "".join(f"{key}={value}\n" for key, value in properties.items())


@dataclass(frozen=True)
class ConsumedRecord:
    """One record read back from a topic."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes


def _split_record(record: Record) -> tuple[str | bytes | None, str | bytes]:
    return record if isinstance(record, tuple) else (None, record)


class KafkaBroker(procs.ProcessInWorkdir):
    """A running single-node KRaft broker; use as a context manager so it is always stopped and removed."""

    def __init__(self, heap: str = "512m", *, workdir: Path | None = None, pods: PodListener | None = None) -> None:
        if workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="headrace-kafka-"))
        else:
            self.workdir = workdir
            self.workdir.mkdir(parents=True)
        self.broker_port = procs.free_port(LOOPBACK)
        self.controller_port = procs.free_port(LOOPBACK)
        self.pods = pods
        self._heap = heap
        self._process: procs.Process | None = None
        self.start_seconds = 0.0

    @property
    def bootstrap_servers(self) -> str:
        """The `bootstrap.servers` value for clients."""
        return f"{LOOPBACK}:{self.broker_port}"

    @property
    def pid(self) -> int | None:
        """Process id of the broker's JVM (the leader of its process group), once started."""
        return self._process.pid if self._process is not None else None

    @property
    def log_path(self) -> Path:
        """Where the JVM's stdout, stderr and log4j output go."""
        return self.workdir / "logs" / "broker.log"

    def _java(self, main_class: str, *args: str) -> list[str]:
        classpath = os.pathsep.join(str(p) for p in broker_jars())
        return [
            "java", f"-Xmx{self._heap}", "-XX:+UseG1GC", f"-Dkafka.logs.dir={self.workdir / 'logs'}",
            f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}",
            "-cp", classpath, main_class, *args,
        ]  # fmt: skip

    def start(self) -> KafkaBroker:
        """Format the storage and start the broker; returns once it answers metadata requests."""
        began = time.monotonic()
        config = self.workdir / "server.properties"
        properties = broker_properties(self.broker_port, self.controller_port, self.workdir / "data", self.pods)
        config.write_text(render_properties(properties))
        (self.workdir / "log4j2.properties").write_text(_LOG4J2)
        cluster_id = new_cluster_id()
        formatted = subprocess.run(
            self._java("kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}", "-c", str(config)),
            check=False, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        if formatted.returncode != 0:
            raise RuntimeError(f"kafka-storage format exited {formatted.returncode}: {formatted.stderr[-2000:]}")
        self._process = procs.spawn("kafka", self._java("kafka.Kafka", str(config)), self.log_path)
        procs.wait_until_healthy(
            self._process, self._answers, timeout_seconds=START_TIMEOUT_SECONDS, interval_seconds=0.5
        )
        self.start_seconds = time.monotonic() - began
        return self

    def _admin(self, **config: Any) -> Any:
        from confluent_kafka.admin import AdminClient

        return AdminClient({"bootstrap.servers": self.bootstrap_servers, "log_level": 4, **config})

    def _answers(self) -> bool:
        try:
            metadata = self._admin(log_level=0).list_topics(timeout=1)
        except Exception:
            return False
        return bool(metadata.brokers)

    def create_topic(self, name: str, partitions: int) -> None:
        """Create a topic (replication factor 1) and wait until it exists."""
        create_topic(self.bootstrap_servers, name, partitions)

    def produce(self, topic: str, records: Iterable[Record], partition: int | None = None) -> int:
        """Write records (values, or (key, value) pairs) with acks=all; returns how many were acknowledged."""
        return produce(self.bootstrap_servers, topic, records, partition)

    def consume_all(self, topic: str, timeout_seconds: float = 60.0) -> list[ConsumedRecord]:
        """Every record currently in the topic, read from the beginning of each partition."""
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap_servers, "group.id": f"headrace-{uuid.uuid4()}",
                             "enable.auto.commit": False, "isolation.level": "read_committed"})  # fmt: skip
        try:
            partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
            ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions}
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
            return _read_until(consumer, ends, time.monotonic() + timeout_seconds)
        finally:
            consumer.close()


def create_topic(bootstrap_servers: str, name: str, partitions: int, *, exist_ok: bool = False) -> None:
    """Create a topic (replication factor 1) and wait until it exists (`exist_ok`: an existing one is fine)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap_servers, "log_level": 4})  # must outlive the future
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
    try:
        futures[name].result(timeout=30)
    except KafkaException as error:
        if not (exist_ok and error.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS):
            raise


def produce(bootstrap_servers: str, topic: str, records: Iterable[Record], partition: int | None = None) -> int:
    """Write records (values, or (key, value) pairs) with acks=all; returns how many were acknowledged."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap_servers, "acks": "all", "linger.ms": 5})
    failures: list[str] = []

    def delivered(error: Any, _message: Any) -> None:
        if error is not None:
            failures.append(str(error))

    count = 0
    for record in records:
        key, value = _split_record(record)
        target = -1 if partition is None else partition  # -1: the partitioner chooses
        producer.produce(topic, value=value, key=key, partition=target, on_delivery=delivered)
        producer.poll(0)
        count += 1
    remaining = producer.flush(60)
    if failures or remaining:
        raise RuntimeError(f"produce to {topic}: {remaining} undelivered, errors: {failures[:3]}")
    return count


def _read_until(consumer: Any, ends: Mapping[int, int], deadline: float) -> list[ConsumedRecord]:
    """Poll until every partition's position reaches its end offset in `ends`."""
    records: list[ConsumedRecord] = []
    positions = dict.fromkeys(ends, 0)
    while any(positions[p] < ends[p] for p in ends):
        if time.monotonic() > deadline:
            raise TimeoutError(f"read {len(records)} records; positions {positions}, ends {dict(ends)}")
        message = consumer.poll(0.5)
        if message is None or message.error() is not None:
            continue
        records.append(ConsumedRecord(message.partition(), message.offset(), message.key(), message.value()))
        positions[message.partition()] = message.offset() + 1
    return records


def main(argv: list[str] | None = None) -> int:
    """Run one broker in the foreground, printing its bootstrap address, until interrupted."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--topic", action="append", default=[], help="NAME[:PARTITIONS] to create at start")
    args = parser.parse_args(argv)
    with KafkaBroker() as broker:
        for spec in args.topic:
            name, _, partitions = spec.partition(":")
            broker.create_topic(name, int(partitions or 1))
        print(f"Kafka {KAFKA_VERSION} on {broker.bootstrap_servers} (started in {broker.start_seconds:.1f}s)")
        print(f"log: {broker.log_path}; Ctrl-C stops it and removes {broker.workdir}", flush=True)
        for signum in (signal.SIGINT, signal.SIGTERM):  # SIGINT too: a background job starts with it ignored
            signal.signal(signum, signal.default_int_handler)
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
