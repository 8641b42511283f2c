"""The work queue's shutdown: `wait_idle` reports whether a reconcile still runs (the Lease is released only then)."""

from __future__ import annotations

import asyncio
import threading

from headrace.controller.workqueue import Key, WorkQueue


def test_wait_idle_waits_for_the_running_reconcile_after_stop() -> None:
    started, release = threading.Event(), threading.Event()

    def process(_: Key) -> float | None:
        started.set()
        release.wait(10)
        return None

    async def scenario() -> tuple[bool, bool]:
        queue = WorkQueue(process, workers=1)
        queue.start()
        queue.add(("ns", "app"))
        await asyncio.to_thread(started.wait, 10)
        await queue.stop()
        busy = queue.wait_idle(0.2)  # the reconcile is still running
        release.set()
        idle = await asyncio.to_thread(queue.wait_idle, 10)
        return busy, idle

    assert asyncio.run(scenario()) == (False, True)


def test_wait_idle_is_immediate_when_nothing_ran() -> None:
    queue = WorkQueue(lambda _: None, workers=1)
    assert queue.wait_idle(0)
