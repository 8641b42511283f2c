"""Realistic input for the example apps, written as JSON lines files or to Kafka.

Owns: deterministic (seeded) event generators for clicks, payments and orders with payments, in
event-time order; writing batches as files with distinct, increasing modification times (Spark's
file source orders files by mtime in milliseconds; equal times can reorder them and drop events as
late); producing to Kafka with confluent-kafka.
Never: imports Spark or headrace.

    python apps/common/generate.py clicks --files DIR --batches 10 --per-batch 500
    python apps/common/generate.py payments --kafka localhost:9092 --topic payments --batches 20
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

Event = dict[str, Any]
EPOCH = datetime(2026, 11, 21, 9, 0, tzinfo=UTC)
PAGES = ["/", "/search", "/products/shoes", "/products/hats", "/cart", "/checkout", "/help", "/blog/spark"]


def iso(moment: datetime) -> str:
    """ISO-8601 in UTC with milliseconds, as the apps' JSON schemas expect."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def clicks(rng: random.Random, start: datetime, count: int, seconds: float, first_id: int = 0) -> list[Event]:
    """`count` click events spread evenly over `seconds` from `start`, mostly page views, 200 users."""
    step = seconds / max(count, 1)
    events = []
    for n in range(count):
        page = rng.choice(PAGES)
        query = rng.choice(["", "", "?utm_source=mail", "?q=red"])
        events.append(
            {
                "event_id": f"c{first_id + n:08d}",
                "user_id": f"u{rng.randrange(200):03d}",
                "event_type": rng.choices(["page_view", "click", "scroll"], weights=[8, 1, 1])[0],
                "url": page + query,
                "referrer": rng.choice(["", "https://search.example/", "https://news.example/"]),
                "event_time": iso(start + timedelta(seconds=n * step)),
            }
        )
    return events


def payments(rng: random.Random, start: datetime, count: int, seconds: float, first_id: int = 0) -> list[Event]:
    """Card payments over `seconds`; about one card in 50 runs the card-testing pattern (small, small, ..., large)."""
    step = seconds / max(count, 1)
    events: list[Event] = []
    n = 0
    while len(events) < count:
        moment = start + timedelta(seconds=n * step)
        card = f"card-{rng.randrange(500):04d}"
        burst = [round(rng.uniform(0.5, 3.0), 2) for _ in range(3)] + [round(rng.uniform(600, 2000), 2)]
        amounts = burst if rng.random() < 0.02 else [round(rng.lognormvariate(3.5, 1.0), 2)]
        for offset, amount in enumerate(amounts):
            events.append(_payment(first_id + len(events), card, amount, moment + timedelta(seconds=20 * offset)))
        n += len(amounts)
    return sorted(events[:count], key=lambda e: str(e["event_time"]))


def _payment(number: int, card: str, amount: float, moment: datetime) -> Event:
    return {
        "payment_id": f"p{number:08d}",
        "card_id": card,
        "amount": amount,
        "merchant": f"m{number % 37:02d}",
        "event_time": iso(moment),
    }


def orders_and_payments(
    rng: random.Random, start: datetime, count: int, seconds: float, first_id: int = 0
) -> tuple[list[Event], list[Event]]:
    """Orders over `seconds`; 90% are paid 5 s to 10 min later, the rest never."""
    step = seconds / max(count, 1)
    orders, paid = [], []
    for n in range(count):
        ordered = start + timedelta(seconds=n * step)
        order_id = f"o{first_id + n:08d}"
        orders.append(
            {
                "order_id": order_id,
                "customer_id": f"cust{rng.randrange(50):03d}",
                "amount": round(rng.uniform(5, 300), 2),
                "order_time": iso(ordered),
            }
        )
        if rng.random() < 0.9:
            paid_at = ordered + timedelta(seconds=rng.uniform(5, 600))
            paid.append(
                {
                    "payment_id": f"pay{first_id + n:08d}",
                    "order_id": order_id,
                    "method": rng.choice(["card", "paypal", "transfer"]),
                    "payment_time": iso(paid_at),
                }
            )
    return orders, sorted(paid, key=lambda e: str(e["payment_time"]))


def write_json_lines(directory: Path, name: str, events: Sequence[Event], mtime: float) -> Path:
    """Write one file atomically (a hidden temporary name, then rename) and set its modification time."""
    directory.mkdir(parents=True, exist_ok=True)
    temporary = directory / f".{name}.tmp"
    temporary.write_text("".join(json.dumps(e, separators=(",", ":")) + "\n" for e in events))
    os.utime(temporary, (mtime, mtime))
    final = directory / name
    temporary.rename(final)
    return final


def write_batches(directory: Path, batches: Sequence[Sequence[Event]], prefix: str, first_mtime: float) -> list[Path]:
    """One file per batch, with modification times one second apart so the file source keeps their order."""
    return [
        write_json_lines(directory, f"{prefix}-{index:05d}.json", batch, first_mtime + index)
        for index, batch in enumerate(batches)
    ]


def first_free_mtime(directory: Path, now: float) -> float:
    """A modification time after every file already in `directory` (so reruns append in order)."""
    existing = [p.stat().st_mtime for p in directory.rglob("*.json")] if directory.exists() else []
    return max([now, *(t + 1 for t in existing)])


def produce(bootstrap: str, topic: str, events: Sequence[Event], key_field: str) -> None:
    """Produce events as JSON values keyed by `key_field` (so one key stays in one partition)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for event in events:
        producer.produce(topic, key=str(event[key_field]), value=json.dumps(event, separators=(",", ":")))
        producer.poll(0)
    if producer.flush(60):
        raise RuntimeError(f"not every event reached {topic}")


def _batches(kind: str, rng: random.Random, args: argparse.Namespace) -> Iterator[dict[str, list[Event]]]:
    size, seconds = args.per_batch, args.batch_seconds
    for index in range(args.batches):
        start = args.start + timedelta(seconds=index * seconds)
        if kind == "orders":
            orders, paid = orders_and_payments(rng, start, size, seconds, index * size)
            yield {"orders": orders, "payments": paid}
        else:
            make = clicks if kind == "clicks" else payments
            yield {kind: make(rng, start, size, seconds, index * size)}


# The Kafka key of each kind of input: events of one user, card or order stay in one partition.
KEYS = {"clicks": "user_id", "payments": "card_id", "orders": "order_id"}


def main(argv: Sequence[str] | None = None) -> None:
    """Command line: write batches of one kind of event to files or Kafka."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=["clicks", "payments", "orders"])
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--files", type=Path, help="directory for JSON lines files (orders: orders/ and payments/)")
    target.add_argument("--kafka", help="bootstrap servers; topics are named after the streams unless --topic")
    parser.add_argument("--topic", default=None)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--per-batch", type=int, default=500)
    parser.add_argument("--batch-seconds", type=float, default=60.0, help="event time covered by one batch")
    parser.add_argument("--pause", type=float, default=0.0, help="wall-clock seconds between batches")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--start", type=datetime.fromisoformat, default=EPOCH, help="event time of the first event")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)  # noqa: S311 - test data, not security
    first_mtime = first_free_mtime(args.files, time.time()) if args.files else 0.0
    run = int(first_mtime)
    for index, streams in enumerate(_batches(args.kind, rng, args)):
        for stream, events in streams.items():
            if args.files:
                directory = args.files / stream if args.kind == "orders" else args.files
                write_json_lines(directory, f"{stream}-{run}-{index:05d}.json", events, first_mtime + index)
            else:
                produce(args.kafka, args.topic or stream, events, KEYS[args.kind])
        time.sleep(args.pause)


if __name__ == "__main__":
    main()
