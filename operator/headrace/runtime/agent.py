"""The runtime's state inside the driver: query starts, restore, progress, control actions.

Owns: what happens when the script starts a query (a standby waits there until promoted, and with a
driver Lease every start waits until it is held; managed checkpoint, bounded trigger, handing it to the
``Restorer`` before it runs, tracking, refusing starts once a stop began), listener events, the control
actions (status, savepoint, stop-with-savepoint, rescale, promote) and waiting for the queries to end.
A query start, a savepoint's choice of queries and a stop exclude each other.
Never: parses HTTP or the environment, patches PySpark (``patching``), decides file selection
(``checkpoint_files``) or restore compatibility (``restore``).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any

from py4j.protocol import Py4JError  # type: ignore[import-untyped]
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.streaming.readwriter import DataStreamWriter

from headrace.api import runtime_contract as contract
from headrace.runtime import termination, warmup
from headrace.runtime.checkpoint_files import behind_problem, last_batch_id, sink_beyond_checkpoint_problem
from headrace.runtime.control import ActionError
from headrace.runtime.hadoop_fs import HadoopFileSystem, join
from headrace.runtime.lease import LeaseGuard
from headrace.runtime.listener import RuntimeListener
from headrace.runtime.metrics import RuntimeMetrics
from headrace.runtime.patching import StartCall, start_unintercepted
from headrace.runtime.phases import PhaseClock
from headrace.runtime.progress import summarize
from headrace.runtime.registry import QueryRegistry, TrackedQuery
from headrace.runtime.restore import RestoreIncompatibleError
from headrace.runtime.restoring import Restorer, gate_problems
from headrace.runtime.savepoint import (
    SavepointContext,
    SavepointError,
    SavepointSource,
    default_path,
    dispose_savepoint,
    take_savepoint,
)
from headrace.runtime.settings import RuntimeSettings

log = logging.getLogger(__name__)
EXIT_GRACE_SECONDS = 10.0


def trigger_interval_seconds(handle: Any) -> float | None:
    """A query's processing-time trigger interval (0: the default trigger, batches back to back); None for any
    other trigger (available-now, once, continuous) or when Spark does not say."""
    try:
        trigger = handle._jsq.streamingQuery().trigger()
        if trigger.getClass().getSimpleName() != "ProcessingTimeTrigger":
            return None
        return float(trigger.intervalMs()) / 1000.0
    except (Py4JError, AttributeError) as error:
        log.warning("could not read the query's trigger interval: %s", str(error).splitlines()[0][:200])
        return None


class CheckpointBehindError(BaseException):
    """A query's checkpoint has fewer commits than earlier attempts of the run made: exit, never start over.

    A BaseException, so that a script's `except Exception` cannot swallow it."""


class SinkAheadError(CheckpointBehindError):
    """A query's file sink logged batches its checkpoint never planned: Spark would skip them unwritten."""


class StartRefusedError(BaseException):
    """The script started a query after a stop-with-savepoint began; the runtime is exiting.

    A ``BaseException`` so a script's ``except Exception`` cannot retry the start.
    """


class Agent:
    """One per driver process; the patches, listener and control endpoint all call into it."""

    def __init__(
        self,
        settings: RuntimeSettings,
        metrics: RuntimeMetrics,
        now: Callable[[], datetime],
        phases: PhaseClock | None = None,
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self.phases = phases
        self.registry = QueryRegistry()
        self._now = now
        self._spark: SparkSession | None = None
        self._fs: HadoopFileSystem | None = None
        self._restorer: Restorer | None = None
        self._operation = threading.Lock()  # one savepoint or stop at a time
        self._start_lock = threading.RLock()  # held by a query start (restore included) and a snapshot
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        self._stop_outcome = termination.failed("StopWithSavepointFailed", "stop-with-savepoint did not finish")
        self._promoted = threading.Event()  # set from the start unless this driver is a standby
        if not settings.standby:
            self._promoted.set()
        self._phase: contract.RuntimePhase = "Standby" if settings.standby else "Starting"
        self._at_gate = False  # a standby whose script waits at its first query start
        self._requested_executors: int | None = None
        self._registered: tuple[int, str] | None = None  # executors registered, and since when (as last seen)
        self._registered_lock = threading.Lock()
        self.last_savepoint: contract.LastSavepoint | None = None
        self.lease: LeaseGuard | None = None  # HEADRACE_DRIVER_LEASE: queries start only while it is held

    # --- query starts (called by the patched DataStreamWriter) ---------------------------------

    def start_query(self, writer: DataStreamWriter, call: StartCall, launch: Callable[[], Any]) -> Any:
        self._await_promotion(writer, call)
        self._await_lease(call)
        with self._start_lock:
            if self._stopping.is_set():
                raise StartRefusedError(
                    f"query {call.query_name or '(unnamed)'} was started after stop-with-savepoint began; not started"
                )
            self._attach(writer._spark)
            key = self.registry.next_key(call.query_name)
            checkpoint, managed = self._place_checkpoint(writer, call, key)
            self._refuse_if_behind(key, checkpoint)
            if self.settings.bounded:
                writer.trigger(availableNow=True)
            tracked = TrackedQuery(
                key=key,
                name=call.query_name,
                checkpoint=checkpoint,
                managed=managed,
                relaunch=launch,
                writer=writer,
                handle=None,
                sink_path=call.sink_path,
                sink_format=call.format,
            )
            if managed and self._restorer is not None:
                self._restorer.prepare(tracked)
            if self._restorer is None or not self._restorer.restores(key):  # a restore checks its sink itself
                self._refuse_if_sink_ahead(tracked)
            tracked.handle = launch()
            tracked.trigger_interval_seconds = trigger_interval_seconds(tracked.handle)
            self.registry.add(tracked)
            self.metrics.register_query(key)
            if self.phases is not None:
                self.phases.mark(contract.PHASE_QUERIES_STARTED)
            if self._phase == "Starting":
                self._phase = "Running"
            log.info("query %s started with checkpoint %s", key, checkpoint or "(Spark temporary)")
            return tracked.handle

    def _await_promotion(self, writer: DataStreamWriter, call: StartCall) -> None:
        """A standby blocks its script's first query start (outside the start lock, before anything touches the
        checkpoint or the restore copy) until promoted; the SIGTERM handler still ends the process meanwhile.
        A pre-warmed upgrade's first checks that this query can read the running driver's state (never waiting at
        the gate when it cannot: the upgrade is refused with the running driver untouched)."""
        if self._promoted.is_set():
            return
        self._refuse_at_gate_if_incompatible(writer, call)
        self._warm_up(writer._spark)
        log.info(
            "standby: the script reached its first query start (%s); waiting to be promoted",
            call.query_name or "unnamed",
        )
        self._at_gate = True
        while not self._promoted.wait(1.0):
            pass

    def _warm_up(self, spark: SparkSession) -> None:
        """Before waiting at the gate, run the warm-up query (unless HEADRACE_WARMUP=false): a promotion meanwhile
        cuts it short, and whatever happens to it the driver goes on to wait."""
        if not self.settings.warmup:
            return
        log.info("standby: warming up (a synthetic stateful query in a scratch directory) before waiting")
        outcome = warmup.warm_up(spark, self._promoted, start_unintercepted)
        log.info("standby: warm-up ran %s", outcome.describe())
        if self.phases is not None:
            self.phases.mark(contract.PHASE_WARMED_UP)

    def _refuse_at_gate_if_incompatible(self, writer: DataStreamWriter, call: StartCall) -> None:
        """HEADRACE_PREWARM_CHECKPOINT: raise RestoreIncompatibleError when the first query's stateful operators
        cannot read the state of the same query in the running driver's checkpoint. Only the first query is
        checked here (the script reaches no further before its promotion); the others are checked as they start,
        against the savepoint, as on any restore. A query with a checkpointLocation of its own is not checked.
        A comparison that cannot be made (the checkpoint unreadable now: storage down, no permission) is skipped
        with a warning, not a refusal: the same check runs against the savepoint when the query starts."""
        compared = self.settings.prewarm_checkpoint
        if not compared or call.checkpoint_location:
            return
        key = self.registry.peek_key(call.query_name)
        try:
            problems = gate_problems(HadoopFileSystem.of_session(writer._spark), join(compared, key), writer)
        except (Py4JError, OSError) as error:
            log.warning(
                "pre-warmed: could not compare query %s with the running driver's checkpoint %s (%s); it is checked "
                "against the savepoint when it starts",
                key,
                compared,
                str(error).splitlines()[0][:300] if str(error) else type(error).__name__,
            )
            return
        if problems:
            raise RestoreIncompatibleError(
                f"query {key}: " + "; ".join(problems) + f" (the running driver's checkpoint {compared}, checked "
                "before that driver is stopped: it keeps running)"
            )
        log.info("pre-warmed: query %s can read the state of the running driver's checkpoint %s", key, compared)

    def _await_lease(self, call: StartCall) -> None:
        """With a driver Lease, block every query start until the Lease is held (the guard takes it only once it is
        released or expired, and ends the process at once if it is lost)."""
        if self.lease is None or self.lease.held:
            return
        log.info("query %s waits for the driver Lease %s", call.query_name or "unnamed", self.lease.api.name)
        while not self.lease.wait_held(1.0):
            pass

    def promote(self, restore_from: str | None = None, allow_repartition: bool = False) -> dict[str, Any]:
        """Let a standby start its queries (idempotent: `promoted` is False when it was not waiting). `restore_from`:
        the savepoint to restore when the driver was created before it was taken (a pre-warmed savepoint upgrade);
        a restore source the driver was started with stays."""
        with self._start_lock:
            waiting = not self._promoted.is_set()
            if waiting:
                if restore_from and not self.settings.restore_from:
                    self.settings = replace(
                        self.settings, restore_from=restore_from, allow_repartition=allow_repartition
                    )
                    log.info("promoted with savepoint %s to restore", restore_from)
                self._phase = "Starting"
                if self.phases is not None:
                    self.phases.mark(contract.PHASE_PROMOTED)
                log.info("promoted: starting the queries")
                if self.lease is not None:
                    self.lease.allow()
                self._promoted.set()
            return {"promoted": waiting, "phase": self._phase}

    def _refuse_if_behind(self, key: str, checkpoint: str) -> None:
        expected = self.settings.expected_commits.get(key)
        if expected is None or not checkpoint or self._fs is None:
            return
        committed = last_batch_id(self._fs.list_names(join(checkpoint, "commits")))
        problem = behind_problem(key, checkpoint, expected, committed)
        if problem is not None:
            raise CheckpointBehindError(problem)
        log.info("query %s: checkpoint commits reach batch %s (earlier attempts: %d)", key, committed, expected)

    def _refuse_if_sink_ahead(self, tracked: TrackedQuery) -> None:
        sink = tracked.file_sink_path
        if not sink or not tracked.checkpoint or self._fs is None:
            return
        planned = last_batch_id(self._fs.list_names(join(tracked.checkpoint, "offsets")))
        sink_batch = last_batch_id(self._fs.list_names(join(sink, "_spark_metadata")))
        problem = sink_beyond_checkpoint_problem(tracked.key, sink, tracked.checkpoint, planned, sink_batch)
        if problem is not None:
            raise SinkAheadError(problem)

    def _place_checkpoint(self, writer: DataStreamWriter, call: StartCall, key: str) -> tuple[str, bool]:
        if call.checkpoint_location:
            return call.checkpoint_location, False
        if not self.settings.checkpoint_dir:
            log.warning(
                "query %s: no checkpointLocation and no HEADRACE_CHECKPOINT_DIR; Spark uses a temporary one", key
            )
            return "", False
        checkpoint = join(self.settings.checkpoint_dir, key)
        writer.option("checkpointLocation", checkpoint)
        return checkpoint, True

    def _attach(self, spark: SparkSession) -> None:
        """On the first query start: listener, file system, and the restore copy of every query."""
        if self._spark is not None:
            return
        self._spark = spark
        self._fs = HadoopFileSystem.of_session(spark)
        spark.streams.addListener(RuntimeListener(self))
        if self.settings.restore_from:
            self._restorer = Restorer(self.settings, spark, self._fs)
            self._restorer.copy_all()

    def session_stop_requested(self, session: SparkSession) -> bool:
        log.info("the script asked to stop the SparkSession; the runtime stops it when it exits")
        return False

    # --- listener events -------------------------------------------------------------------------

    def query_progressed(self, query_id: str, progress: dict[str, Any]) -> None:
        tracked = self.registry.by_id(query_id)
        if tracked is None:
            return
        summary = summarize(progress)
        tracked.summary = summary
        tracked.last_committed_at = summary.committed_at
        tracked.totals.add(summary)
        try:
            self._executors()  # notes a change of the registered executors at batch boundaries too
        except Py4JError:
            log.debug("executors not read after batch %s", summary.batch_id)
        self.metrics.observe_progress(tracked.key, summary)
        if self.phases is not None:
            self.phases.mark(contract.PHASE_FIRST_BATCH)

    def query_terminated(self, query_id: str, error: str | None) -> None:
        tracked = self.registry.by_id(query_id)
        log.info("query %s terminated%s", tracked.key if tracked else query_id, f": {error}" if error else "")

    # --- control actions -------------------------------------------------------------------------

    def status(self) -> contract.StatusDocument:
        document: contract.StatusDocument = {
            "app": {"name": self.settings.app_name, "namespace": self.settings.app_namespace},
            "runId": self.settings.run_id,
            "attempt": self.settings.attempt,
            "mode": self.settings.mode,
            "phase": self._phase,
            "queries": [query.status() for query in self.registry.all()],
            "executors": self._executors(),
            "restoredFrom": self.settings.restore_from,
            "lastSavepoint": self.last_savepoint,
            "atGate": self._at_gate and not self._promoted.is_set(),
        }
        if self.phases is not None:
            started = datetime.fromtimestamp(self.phases.started_at, UTC).isoformat(timespec="milliseconds")
            document["startedAt"] = started.replace("+00:00", "Z")
            document["phases"] = self.phases.as_json()
        return document

    def _executors(self) -> contract.ExecutorCounts:
        if self._spark is None:
            return {"requested": self._requested_executors, "registered": None, "cores": None, "registeredSince": None}
        context = self._spark.sparkContext
        requested = self._requested_executors
        if requested is None:
            configured = context.getConf().get("spark.executor.instances")
            requested = int(configured) if configured else None
        registered = len(context._jsc.sc().statusTracker().getExecutorInfos()) - 1  # minus the driver
        if registered > 0:
            cores = registered * int(context.getConf().get("spark.executor.cores", "1"))
        else:  # local mode runs its tasks in the driver, on the local master's threads
            cores = context.defaultParallelism if str(context.master or "").startswith("local") else 0
        return {
            "requested": requested,
            "registered": registered,
            "cores": cores,
            "registeredSince": self._since(registered),
        }

    def _since(self, registered: int) -> str:
        """When the number of registered executors last changed, as seen by this method's calls."""
        with self._registered_lock:
            if self._registered is None or self._registered[0] != registered:
                now = self._now().isoformat(timespec="milliseconds").replace("+00:00", "Z")
                self._registered = (registered, now)
            return self._registered[1]

    def savepoint(self, path: str | None, reason: str) -> dict[str, Any]:
        if not self._operation.acquire(blocking=False):
            raise ActionError(HTTPStatus.CONFLICT, "another savepoint or stop is in progress")
        try:
            if self._stopping.is_set():
                raise ActionError(HTTPStatus.CONFLICT, "the job is stopping")
            return self._snapshot(path, reason, stopped=False)
        finally:
            self._operation.release()

    def _snapshot(self, path: str | None, reason: str, stopped: bool) -> dict[str, Any]:
        with self._start_lock:  # no query start (restore, repartition) while choosing and copying
            return self._snapshot_unlocked(path, reason, stopped)

    def _snapshot_unlocked(self, path: str | None, reason: str, stopped: bool) -> dict[str, Any]:
        if self._spark is None or self._fs is None or not self.registry.all():
            raise ActionError(HTTPStatus.CONFLICT, "no query has started yet")
        target = path or (
            default_path(self.settings.savepoint_dir, self.settings.app_name, self._now())
            if self.settings.savepoint_dir
            else None
        )
        if target is None:
            raise ActionError(HTTPStatus.BAD_REQUEST, "no 'path' given and HEADRACE_SAVEPOINT_DIR is not set")
        sources = [
            SavepointSource(query.key, query.checkpoint, query.query_id, query.name, query.file_sink_path)
            for query in self.registry.all()
            if query.checkpoint
        ] + self._unstarted_sources()
        context = SavepointContext(
            app_name=self.settings.app_name,
            app_namespace=self.settings.app_namespace,
            run_id=self.settings.run_id,
            spark_version=self._spark.version,
            state_backend=self.settings.state_backend,
            reason=reason,
            stopped=stopped,
        )
        previous_phase, self._phase = self._phase, "Savepointing"
        try:
            record = take_savepoint(self._fs, sources, target, context, self._now)
        except SavepointError as error:
            self.metrics.observe_savepoint(False, 0.0, 0)
            raise ActionError(HTTPStatus.CONFLICT, str(error)) from None
        finally:
            self._phase = previous_phase
        self.metrics.observe_savepoint(True, record["durationSeconds"], record["sizeBytes"])
        self.last_savepoint = contract.LastSavepoint(
            path=record["path"],
            completedAt=record["completedAt"],
            sizeBytes=record["sizeBytes"],
            reason=record["reason"],
        )
        return record

    def _unstarted_sources(self) -> list[SavepointSource]:
        """Managed checkpoints with commits whose query the script has not started in this process.

        A restored copy, or an earlier attempt's checkpoint, of a query the script starts after
        another one: a savepoint without it would restore that query without state into a sink
        that already has batches. Nothing runs them, so their logs are as they were left.
        """
        root = self.settings.checkpoint_dir
        if not root or self._fs is None:
            return []
        started = {query.key for query in self.registry.all()}
        sources = []
        for name in self._fs.list_names(root):
            checkpoint = join(root, name)
            if name in started or name.startswith(".") or name.endswith(".restoring"):
                continue
            if not self._fs.list_names(join(checkpoint, "commits")):
                continue
            log.info("query %s has not started in this process; its checkpoint is saved as it is", name)
            sink = self._restorer.saved_sink_path(name) if self._restorer is not None else None
            sources.append(SavepointSource(name, checkpoint, self._checkpoint_query_id(checkpoint), None, sink))
        return sources

    def _checkpoint_query_id(self, checkpoint: str) -> str:
        assert self._fs is not None
        try:
            return str(json.loads(self._fs.read_text(join(checkpoint, "metadata")))["id"])
        except (OSError, ValueError, KeyError) as error:
            log.warning("%s: no query id in its metadata file (%s)", checkpoint, error)
            return ""

    def stop_with_savepoint(self, path: str | None, reason: str) -> dict[str, Any]:
        if not self._promoted.is_set():
            raise ActionError(HTTPStatus.CONFLICT, "a standby driver runs no queries: nothing to stop")
        if not self._operation.acquire(blocking=False):
            raise ActionError(HTTPStatus.CONFLICT, "another savepoint or stop is in progress")
        try:
            with self._start_lock:  # a start in progress (restore, repartition) finishes first
                self._stopping.set()  # later starts are refused
            self._phase = "Stopping"
            try:
                self._stop_at_batch_boundary()
                record = self._snapshot(path, reason, stopped=True)
            except BaseException as error:
                self._stop_outcome = termination.failed("StopWithSavepointFailed", f"{type(error).__name__}: {error}")
                self._stopped.set()
                raise
            self._stop_outcome = termination.stopped_with_savepoint(record["path"])
            return record
        finally:
            self._operation.release()

    def _stop_at_batch_boundary(self) -> None:
        """Stop every query, then replay its pending batch with a once-trigger so offsets == commits.

        A once-trigger runs exactly one batch: the planned one (Spark re-runs an uncommitted
        offsets entry before planning anew). Afterwards no query may be active in the session.
        """
        assert self._spark is not None
        queries = self.registry.all()
        for query in queries:
            query.handle.stop()
        for query in queries:
            if not query.checkpoint or not self._has_pending_batch(query.checkpoint):
                log.info("query %s stopped between batches", query.key)
                continue
            query.writer.trigger(once=True)
            query.handle = query.relaunch()
            query.handle.awaitTermination()
            log.info("query %s replayed its planned batch and stopped", query.key)
        for stray in self._spark.streams.active:
            log.warning("query %s was active outside the runtime's tracking; stopping it", stray.name or stray.id)
            stray.stop()
        still_active = [str(query.name or query.id) for query in self._spark.streams.active]
        if still_active:
            raise RuntimeError(f"queries still active after the stop: {still_active}")

    def _has_pending_batch(self, checkpoint: str) -> bool:
        """Whether the offsets log is ahead of the commits log (a batch was planned, not committed)."""
        assert self._fs is not None
        planned = last_batch_id(self._fs.list_names(join(checkpoint, "offsets")))
        committed = last_batch_id(self._fs.list_names(join(checkpoint, "commits")))
        return planned is not None and planned != committed

    def after_stop_response(self) -> None:
        """Let the main thread exit; exit anyway if the script keeps it busy."""
        self._stopped.set()
        timer = threading.Timer(EXIT_GRACE_SECONDS, self._force_exit)
        timer.daemon = True
        timer.start()

    def _force_exit(self) -> None:
        log.warning("the script did not return after stop-with-savepoint; exiting")
        termination.write_termination_message(self.settings.termination_message_path, self._stop_outcome)
        self.release_lease()
        os._exit(self._stop_outcome.exit_code)

    def dispose_savepoint(self, path: str) -> dict[str, Any]:
        """Delete one savepoint directory of this app (the operator's disposeOnDelete); refused (400) for any
        path that is not a direct child of HEADRACE_SAVEPOINT_DIR."""
        if self._fs is None:
            raise ActionError(HTTPStatus.CONFLICT, "no SparkContext yet")
        try:
            return dispose_savepoint(self._fs, self.settings.savepoint_dir, path)
        except SavepointError as error:
            raise ActionError(HTTPStatus.BAD_REQUEST, str(error)) from None

    def rescale(self, executors: int) -> dict[str, Any]:
        if self._spark is None:
            raise ActionError(HTTPStatus.CONFLICT, "no SparkContext yet")
        jvm: Any = self._spark.sparkContext._jvm
        context = self._spark.sparkContext._jsc.sc()
        identifiers = jvm.scala.jdk.javaapi.CollectionConverters.asJava(context.getExecutorIds())
        current = sorted((str(item) for item in identifiers), key=lambda identifier: (len(identifier), identifier))
        surplus = current[executors:]
        if surplus:
            context.killExecutors(jvm.PythonUtils.toSeq(surplus))
        no_locality = jvm.PythonUtils.toScalaMap(jvm.java.util.HashMap())
        accepted = bool(context.requestTotalExecutors(executors, 0, no_locality))
        if not accepted:
            raise ActionError(
                HTTPStatus.CONFLICT,
                f"the cluster manager ({self._spark.sparkContext.master}) does not support changing executors",
            )
        self._requested_executors = executors
        return {"requested": executors, "killed": surplus, "executors": self._executors()}

    # --- the end ---------------------------------------------------------------------------------

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    @property
    def lease_lost(self) -> str | None:
        """Why the driver Lease was lost (None: it was not): the JVM is being ended with every write, so what fails
        from then on is that stop, not the script."""
        return self.lease.lost if self.lease is not None else None

    def operation_in_progress(self) -> bool:
        """Whether a savepoint or a stop-with-savepoint is being taken (SIGTERM lets it finish)."""
        if not self._operation.acquire(blocking=False):
            return True
        self._operation.release()
        return False

    def wait_for_operation(self) -> None:
        """Block until no savepoint or stop-with-savepoint is being taken."""
        with self._operation:
            pass

    def outcome_on_termination(self, terminated: termination.Outcome) -> termination.Outcome:
        """What a SIGTERM exit reports: the stop's outcome once a stop-with-savepoint ended, else `terminated`."""
        return self._stop_outcome if self._stopped.is_set() else terminated

    def stop_outcome(self) -> termination.Outcome:
        self._stopped.wait()
        return self._stop_outcome

    def _first_failure(self) -> termination.Outcome | None:
        for query in self.registry.all():
            if query.handle.isActive:
                continue
            error = query.handle.exception()
            if error is not None:
                return termination.failed("QueryFailed", f"query {query.key} failed: {error}")
        return None

    def wait_for_queries(self) -> termination.Outcome:
        """Block until every query ended (or a stop-with-savepoint finished); return the outcome."""
        while True:
            if self._stopping.is_set():
                return self.stop_outcome()
            failure = self._first_failure()
            if failure is not None and not self._stopping.is_set():
                return failure
            active = self.registry.active()
            if not active:
                if self._stopping.is_set():
                    continue
                self._phase = "Finished"
                return termination.completed()
            try:
                active[0].handle.awaitTermination(1)
            except StreamingQueryException:
                continue

    def release_lease(self) -> None:
        """Give the driver Lease up (its writes have ended), so the next driver takes it without waiting."""
        if self.lease is not None:
            self.lease.release()

    def shutdown_spark(self) -> None:
        """Stop every query and the session (the script's own ``stop()`` calls were deferred); nothing once the
        Lease was lost (the JVM is ended: every call to it would only fail)."""
        if self._spark is None or self.lease_lost is not None:
            return
        for query in self._spark.streams.active:
            query.stop()
        self._spark.stop()
