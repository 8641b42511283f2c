"""A work queue of app keys, like client-go's: one worker per key at a time, delayed re-adds, retries.

A key added while it is being processed is processed once more afterwards; a failing key is
retried with exponential backoff. The processing function runs in a thread (the Kubernetes client
is synchronous), on a bounded pool. `add` and `add_after` may be called from any thread (kopf runs
synchronous handlers in threads): off the loop's thread they hand the key to the loop with
`call_soon_threadsafe`, so the queue and its sets are only ever touched on the loop.

Two lanes: a key added by an event (`add`: an app created or changed, a driver pod lost) or re-added
soon after its last processing (a follow-up within `URGENT_DELAY_SECONDS`: the next step of a create) is
urgent; a key re-added later by its own timer (a poll: a driver's progress, the heartbeat re-ask of a
driver that does not answer, the resync) waits behind every urgent key, and polls never hold more than
`workers - reserved` workers at once. So asking a thousand silent drivers again (each call can wait for
its timeout) never keeps a new app's driver or a lost driver's replacement waiting for a worker; the
polls themselves still run, as many at once as the rest of the workers allow.
With `prepare` (the reconciler's `ask_ahead`: the call to the app's driver), a poll's slow part runs before the
key is queued, on a pool of its own: a poll then holds a worker only for its reconciliation, which uses that
answer, and a thousand silent drivers waiting out their timeouts hold no worker at all.

How long each key waited between being queued and a worker taking it is reported to `on_wait` (lane, seconds):
the operator's `headrace_queue_wait_seconds`, which tells a queue that grows from slow reconciles.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

logger = logging.getLogger(__name__)

Key = tuple[str, str]
Lane = Literal["urgent", "poll"]
PREPARE_THREADS = 64  # polls' driver calls at once (each waits at most its timeout; they hold no worker)
URGENT_DELAY_SECONDS = 2.0  # a re-add due sooner than this after processing is the next step, not a poll


class WorkQueue:
    """Deduplicating queue with `workers` concurrent workers."""

    def __init__(
        self,
        process: Callable[[Key], float | None],
        *,
        workers: int = 8,
        retry_base_seconds: float = 0.5,
        retry_max_seconds: float = 60.0,
        on_wait: Callable[[Lane, float], None] | None = None,
        prepare: Callable[[Key], None] | None = None,
        prepare_threads: int = PREPARE_THREADS,
    ) -> None:
        self._process = process
        self._workers = workers
        self._retry_base = retry_base_seconds
        self._retry_max = retry_max_seconds
        self._urgent: deque[Key] = deque()
        self._polls: deque[Key] = deque()
        self._polling = 0  # polls being processed
        self._poll_slots = max(1, workers - max(1, workers // 4))  # the rest is reserved for urgent keys
        self._wakeup = asyncio.Event()
        self._queued: dict[Key, float] = {}  # queued key -> when it was queued (monotonic)
        self._on_wait = on_wait or (lambda _lane, _seconds: None)
        self._poll_keys: set[Key] = set()  # queued keys that are polls (a key added urgently meanwhile is urgent)
        self._processing: set[Key] = set()
        self._dirty: set[Key] = set()
        self._failures: dict[Key, int] = {}
        self._timers: dict[Key, asyncio.TimerHandle] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="reconcile")
        self._prepare = prepare
        self._preparing: set[Key] = set()  # polls whose `prepare` runs (on its own pool) before they are queued
        self._prepare_pool = ThreadPoolExecutor(max_workers=prepare_threads, thread_name_prefix="ask-ahead")
        self._running = 0
        self._idle = threading.Condition()
        self._loop: asyncio.AbstractEventLoop | None = None

    def _on_loop(self, call: Callable[..., None], *args: object) -> None:
        """Run `call` now when on the loop's thread (or before `start`), else hand it to the loop."""
        loop = self._loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is None or running is loop:
            call(*args)
            return
        try:
            loop.call_soon_threadsafe(call, *args)
        except RuntimeError:  # the loop is closed: the operator is stopping
            logger.debug("work queue stopped; dropping %s", args)

    def add(self, key: Key) -> None:
        """Process `key` soon (once, however often it is added before a worker takes it); any thread."""
        self._on_loop(self._add, key)

    def _add(self, key: Key, *, poll: bool = False) -> None:
        if key in self._processing:
            self._dirty.add(key)
        elif key not in self._queued:
            self._queued[key] = time.monotonic()
            if poll:
                self._poll_keys.add(key)
                self._polls.append(key)
            else:
                self._urgent.append(key)
            self._wakeup.set()
        elif not poll and key in self._poll_keys:  # waiting as a poll, now wanted at once: moved to the urgent lane
            self._poll_keys.discard(key)
            self._polls.remove(key)
            self._urgent.append(key)
            self._wakeup.set()

    async def _next(self) -> tuple[Key, bool]:
        """The next key (urgent first; a poll only while a poll slot is free) and whether it is a poll."""
        while True:
            if self._urgent:
                return self._urgent.popleft(), False
            if self._polls and self._polling < self._poll_slots:
                key = self._polls.popleft()
                self._poll_keys.discard(key)
                return key, True
            self._wakeup.clear()
            await self._wakeup.wait()

    def add_after(self, key: Key, delay: float) -> None:
        """Process `key` after `delay` seconds (an earlier pending timer wins); any thread."""
        self._on_loop(self._add_after, key, delay)

    def _add_after(self, key: Key, delay: float) -> None:
        loop = asyncio.get_running_loop()
        due = loop.time() + delay
        timer = self._timers.get(key)
        if timer is not None and not timer.cancelled() and timer.when() <= due:
            return
        if timer is not None:
            timer.cancel()
        self._timers[key] = loop.call_at(due, self._fire, key, delay >= URGENT_DELAY_SECONDS)

    def _fire(self, key: Key, poll: bool) -> None:
        self._timers.pop(key, None)
        if not poll or self._prepare is None or key in self._queued or key in self._processing:
            self._add(key, poll=poll)
        elif key not in self._preparing:
            self._preparing.add(key)
            self._prepare_pool.submit(self._run_prepare, key)

    def _run_prepare(self, key: Key) -> None:
        """A poll's `prepare` (off the workers), then the poll is queued; any thread of the prepare pool."""
        assert self._prepare is not None
        try:
            self._prepare(key)
        except Exception:  # the reconciliation then asks the driver itself
            logger.exception("preparing the poll of %s/%s failed", *key)
        finally:
            self._on_loop(self._prepared, key)

    def _prepared(self, key: Key) -> None:
        self._preparing.discard(key)
        self._add(key, poll=True)

    async def _worker(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            key, poll = await self._next()
            self._on_wait("poll" if poll else "urgent", time.monotonic() - self._queued.pop(key))
            self._processing.add(key)
            self._polling += poll
            try:
                delay = await loop.run_in_executor(self._pool, self._run, key)
                self._failures.pop(key, None)
            except Exception:
                failures = self._failures.get(key, 0) + 1
                self._failures[key] = failures
                delay = min(self._retry_base * 2 ** (failures - 1), self._retry_max)
                logger.exception("reconciling %s/%s failed (%d in a row); retrying in %.1fs", *key, failures, delay)
            finally:
                self._processing.discard(key)
                self._polling -= poll
                if poll:
                    self._wakeup.set()  # a poll slot is free
            if key in self._dirty:
                self._dirty.discard(key)
                self._add(key)
            elif delay is not None:
                self._add_after(key, delay)

    def _run(self, key: Key) -> float | None:
        with self._idle:
            self._running += 1
        try:
            return self._process(key)
        finally:
            with self._idle:
                self._running -= 1
                self._idle.notify_all()

    def wait_idle(self, timeout_seconds: float) -> bool:
        """Block until no processing runs in the pool (e.g. after `stop`); True if none does by the timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self._running == 0, timeout_seconds)

    def start(self) -> None:
        """Start the workers on the running event loop."""
        self._loop = asyncio.get_running_loop()
        self._tasks = [asyncio.create_task(self._worker(), name=f"reconcile-{index}") for index in range(self._workers)]

    async def stop(self) -> None:
        """Stop the workers and timers (a reconcile already running in a thread finishes on its own)."""
        for timer in self._timers.values():
            timer.cancel()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._prepare_pool.shutdown(wait=False, cancel_futures=True)
