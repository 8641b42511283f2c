"""The work queue's shutdown: `wait_idle` reports whether a reconcile still runs (the Lease is released only then)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from headrace.controller import workqueue
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


def test_add_from_many_threads_processes_every_key_once_at_a_time() -> None:
    """kopf calls `add` from its handler threads: hammered from 8 threads (the loop in debug mode, which refuses
    loop calls from other threads), every key is processed after its last add, never twice at once."""
    keys = [("ns", f"app-{index}") for index in range(40)]
    lock = threading.Lock()
    running: set[Key] = set()
    overlaps: list[Key] = []
    processed_after: dict[Key, int] = {}
    adds_done = threading.Event()

    def process(key: Key) -> float | None:
        with lock:
            if key in running:
                overlaps.append(key)
            running.add(key)
            done = adds_done.is_set()
        try:
            threading.Event().wait(0.001)
        finally:
            with lock:
                running.discard(key)
                if done:
                    processed_after[key] = processed_after.get(key, 0) + 1
        return None

    errors: list[BaseException] = []

    def hammer(queue: WorkQueue, seed: int) -> None:
        try:
            for round_ in range(300):
                queue.add(keys[(seed * 7 + round_) % len(keys)])
                if round_ % 50 == 0:
                    queue.add_after(keys[round_ % len(keys)], 0.01)
        except BaseException as error:
            errors.append(error)

    async def scenario() -> None:
        queue = WorkQueue(process, workers=4)
        queue.start()
        threads = [threading.Thread(target=hammer, args=(queue, seed)) for seed in range(8)]
        for thread in threads:
            thread.start()
        await asyncio.to_thread(lambda: [thread.join() for thread in threads])
        adds_done.set()
        final = threading.Thread(target=lambda: [queue.add(key) for key in keys])  # the last add of each key
        final.start()
        await asyncio.to_thread(final.join)
        for _ in range(200):
            if len(processed_after) == len(keys):
                break
            await asyncio.sleep(0.05)
        await queue.stop()
        queue.wait_idle(5)

    asyncio.run(scenario(), debug=True)
    assert errors == []
    assert overlaps == []
    assert set(processed_after) == set(keys)


def test_add_from_a_thread_wakes_an_idle_worker() -> None:
    """Off the loop's thread, a key must wake a worker at once (not when some timer next wakes the loop)."""

    async def scenario() -> float:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[float] = loop.create_future()

        def process(_: Key) -> float | None:
            loop.call_soon_threadsafe(done.set_result, time.monotonic())
            return None

        queue = WorkQueue(process, workers=2)
        queue.start()
        await asyncio.sleep(0.05)  # the workers wait on an empty queue; nothing else is scheduled
        added: list[float] = []

        def add_later() -> None:
            time.sleep(0.2)  # the loop sleeps in its selector by now
            added.append(time.monotonic())
            queue.add(("ns", "late"))

        threading.Thread(target=add_later).start()
        try:
            processed = await asyncio.wait_for(done, 3)
        finally:
            await queue.stop()
        return processed - added[0]

    latency = asyncio.run(scenario())
    print(f"add from a thread -> processed: {latency * 1000:.1f} ms")
    assert latency < 1.0


def test_polls_of_silent_drivers_never_take_the_workers_an_event_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Twenty apps whose drivers do not answer are asked again by their timers (each call waits for its timeout,
    here 0.3 s); a new app's key added meanwhile is processed at once, never behind them."""
    monkeypatch.setattr(workqueue, "URGENT_DELAY_SECONDS", 0.01)
    lock = threading.Lock()
    polling, most, new_app_waited = [0], [0], [-1.0]
    added = [0.0]

    def process(key: Key) -> float | None:
        if key[1] == "new":
            new_app_waited[0] = time.monotonic() - added[0]
            return None
        with lock:
            polling[0] += 1
            most[0] = max(most[0], polling[0])
        time.sleep(0.3)
        with lock:
            polling[0] -= 1
        return None

    async def scenario() -> None:
        queue = WorkQueue(process, workers=4)
        queue.start()
        for index in range(20):
            queue.add_after(("ns", f"silent-{index}"), 0.02)  # a poll: due later than URGENT_DELAY_SECONDS
        await asyncio.sleep(0.1)  # the polls fill the workers they may take
        added[0] = time.monotonic()
        queue.add(("ns", "new"))
        await asyncio.sleep(0.2)
        await queue.stop()

    asyncio.run(scenario())
    assert 0 <= new_app_waited[0] < 0.1, new_app_waited  # without lanes: behind the polls, 0.3 s or more
    assert most[0] == 3


def test_each_key_reports_how_long_it_waited_and_in_which_lane(monkeypatch: pytest.MonkeyPatch) -> None:
    """One worker busy 0.2 s with the first app: the second waited that long (urgent); a timer's re-add is a poll."""
    monkeypatch.setattr(workqueue, "URGENT_DELAY_SECONDS", 0.01)
    waits: list[tuple[str, float]] = []

    def process(_: Key) -> float | None:
        time.sleep(0.2)
        return None

    async def scenario() -> None:
        queue = WorkQueue(process, workers=1, on_wait=lambda lane, seconds: waits.append((lane, seconds)))
        queue.start()
        queue.add(("ns", "first"))
        queue.add(("ns", "second"))
        queue.add_after(("ns", "polled"), 0.05)
        await asyncio.sleep(0.8)
        await queue.stop()

    asyncio.run(scenario())
    lanes = [lane for lane, _ in waits]
    assert lanes == ["urgent", "urgent", "poll"], waits
    assert waits[0][1] < 0.1
    assert 0.15 < waits[1][1] < 0.5  # behind the first app's 0.2 s
    assert 0.1 < waits[2][1] < 0.5  # queued at 0.05 s, taken at 0.4 s


def test_a_polls_driver_call_runs_before_it_is_queued_holding_no_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """One worker; five silent drivers are re-asked (each call waits 0.3 s for its timeout): the calls run in
    `prepare`, off the worker, so a new app is taken at once and each poll's reconciliation comes after its call."""
    monkeypatch.setattr(workqueue, "URGENT_DELAY_SECONDS", 0.01)
    lock = threading.Lock()
    asked: set[Key] = set()
    processed: list[tuple[Key, bool]] = []  # key, whether its driver had been asked before
    new_app_waited = [-1.0]
    added = [0.0]

    def prepare(key: Key) -> None:
        time.sleep(0.3)
        with lock:
            asked.add(key)

    def process(key: Key) -> float | None:
        if key[1] == "new":
            new_app_waited[0] = time.monotonic() - added[0]
        with lock:
            processed.append((key, key in asked))
        return None

    async def scenario() -> None:
        queue = WorkQueue(process, workers=1, prepare=prepare)
        queue.start()
        for index in range(5):
            queue.add_after(("ns", f"silent-{index}"), 0.02)
        await asyncio.sleep(0.1)  # the five calls are under way
        added[0] = time.monotonic()
        queue.add(("ns", "new"))
        await asyncio.sleep(0.6)
        await queue.stop()

    asyncio.run(scenario())
    assert 0 <= new_app_waited[0] < 0.1, new_app_waited  # with the call on the worker: 0.3 s or more
    polls = [(key, before) for key, before in processed if key[1] != "new"]
    assert len(polls) == 5 and all(before for _, before in polls), processed
