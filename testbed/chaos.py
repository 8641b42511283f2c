"""The chaos run: the quick start's example on Kafka with a producer, faults injected one after another (or in
groups injected at one moment), and after each an independent read of the sink. Shared by tests/e2e/test_chaos.py
(by default every kind once in testbed.faults' groups; one by one with HEADRACE_CHAOS=1) and bench/chaos.py.

Owns: deploying the example for chaos (the quick start's own `apply_example`: Kafka source, state in the S3
bucket; a short heartbeat timeout so a frozen driver is replaced within the run), injecting each fault of a
schedule (testbed.faults) and measuring its recovery, the intervention a person would make when the
system does not recover on its own (counted, never hidden), the sink check after each fault, and the
figures of a run (faults injected and survived, records checked, recovery per kind: median and max).
What "recovered" means per kind (seconds from the injection; for the 30 s outages, from the service's return):
- driver pod deleted, SIGKILL, SIGSTOP: the first batch committed by a new driver;
- executor deleted: the first batch committed once a replacement executor runs;
- operator leader SIGKILL: the Lease renewed by a live operator (the app commits throughout);
- API server stopped: the API answers, a live operator renewed the Lease, a batch was committed since;
- S3 server stopped: a batch committed since, the app Running;
- operator restart during a savepoint: that StreamingSavepoint Succeeded.
In a group, each recovery is awaited side by side with the others and timed from its own injection the same way,
so it includes whatever the group's other faults cost it (an outage's return, for one).
Never: asserts (the test does) or prints (the test and the bench do).
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import statistics
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kubernetes import client

from headrace.api import models, names
from testbed import faults, operator_pods, quickstart, scenario, sink
from testbed.environment import Environment
from testbed.scenario import OPERATOR_NAMESPACE

HEARTBEAT_TIMEOUT = "30s"  # restartPolicy.heartbeatTimeout of the chaos app (the default is 2m)
POLL_SECONDS = 0.5


@dataclass
class Outcome:
    """One injected fault: how long the app took to recover (None: it did not on its own), what a person had to do,
    and the sink check that followed."""

    kind: str
    recovery_seconds: float | None
    person: str = ""  # what a person had to do ('' when nothing)
    check: sink.SinkCheck | None = None
    note: str = ""

    @property
    def survived(self) -> bool:
        """Recovered on its own, and the sink was right afterwards."""
        return self.recovery_seconds is not None and self.check is not None and self.check.ok


@dataclass
class Figures:
    """The figures of one chaos run."""

    outcomes: list[Outcome] = field(default_factory=list)
    final: sink.SinkCheck | None = None  # the sink against every input event, after the flush

    @property
    def injected(self) -> int:
        """Faults injected."""
        return len(self.outcomes)

    @property
    def survived(self) -> int:
        """Faults after which the app recovered by itself with a correct sink."""
        return sum(outcome.survived for outcome in self.outcomes)

    def recovery(self) -> dict[str, tuple[int, float | None, float | None]]:
        """Per kind: (injected, median, max) of the recovery seconds of those that recovered by themselves."""
        table: dict[str, tuple[int, float | None, float | None]] = {}
        for kind in faults.KINDS:
            of_kind = [outcome for outcome in self.outcomes if outcome.kind == kind]
            seconds = [o.recovery_seconds for o in of_kind if o.recovery_seconds is not None]
            if of_kind:
                table[kind] = (
                    len(of_kind),
                    statistics.median(seconds) if seconds else None,
                    max(seconds) if seconds else None,
                )
        return table

    def needed_person(self) -> list[Outcome]:
        """The faults a person had to step in for."""
        return [outcome for outcome in self.outcomes if outcome.person]


@dataclass
class _Armed:
    """One fault made ready: `fire` injects it without waiting; `recover(since)` waits for its recovery and times it
    from `since` (the injection; for an outage, its service's return after `end`)."""

    fire: Callable[[], object]
    recover: Callable[[float], Outcome]
    end: Callable[[], object] | None = None
    since: float = 0.0


@contextlib.contextmanager
def chaos_app(
    target: Environment, files: int = 5, heartbeat_timeout: str = HEARTBEAT_TIMEOUT, partitions: int = 8
) -> Iterator[scenario.AppHandle]:
    """The quick start's example (Kafka topic and namespace of its own, state in the bucket in `partitions` state
    partitions, the restart policy's `heartbeat_timeout`), committing batches; its namespace is deleted
    afterwards."""
    example = scenario.windowed_counts_manifest(target.data_root)  # its restart policy, plus the heartbeat timeout
    policy = {**example["spec"]["restartPolicy"], "heartbeatTimeout": heartbeat_timeout}
    state = {"partitions": partitions}
    with quickstart.example_app(target, files, "chaos", restartPolicy=policy, state=state) as handle:
        handle.wait(handle.commits, 600, "the chaos app's first committed batch")
        yield handle


def retrying(check: Callable[[], Any]) -> Any:
    """`check()`, or None while the API server (or anything it reads) does not answer."""
    try:
        return check()
    except Exception:
        return None


def _until(check: Callable[[], Any], timeout: float) -> float | None:
    """Poll `check` until truthy; the wall-clock time it first was, None after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if retrying(check):
            return time.time()
        time.sleep(POLL_SECONDS)
    return None


class Chaos:
    """Injects faults into one app on the local cluster and measures each recovery."""

    def __init__(
        self,
        target: Environment,
        app: scenario.AppHandle,
        *,
        outage_seconds: float = 30.0,
        recovery_timeout: float = 240.0,
        stall_timeout: float = 180.0,
    ) -> None:
        if target.control_plane is None or target.object_store is None:
            raise RuntimeError("the chaos run needs the local cluster (its API server and S3 server)")
        self.target, self.app = target, app
        self.control_plane, self.object_store = target.control_plane, target.object_store
        self.outage_seconds, self.recovery_timeout, self.stall_timeout = outage_seconds, recovery_timeout, stall_timeout
        self.api = app.core.api_client
        self._writer: scenario.Writer | None = None

    # --- the run --------------------------------------------------------------------------------

    def run(
        self, schedule: list[faults.Fault], log: Callable[[str], None] = print, figures: Figures | None = None
    ) -> Figures:
        """Every fault of `schedule` in turn with the producer writing throughout, a sink check after each, then
        the producer's flush and the sink against every event; into `figures` as it goes, if given."""
        figures = Figures() if figures is None else figures
        self.start_producing()
        try:
            for fault in schedule:
                figures.outcomes.append(self.one(fault))
                log(describe(figures.outcomes[-1]))
        finally:
            self.stop_producing()
        figures.final = self.final_check()
        return figures

    def start_producing(self) -> None:
        """Start the producer (a chunk of clicks every 2 s) for the faults."""
        if self._writer is None:
            self._writer = scenario.Writer(self.app.input, interval=2.0).__enter__()

    def stop_producing(self) -> None:
        """Stop the producer (before `final_check`'s flush)."""
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.__exit__()

    def settle(self, timeout: float = 300) -> None:
        """After the run: an operator leads again (the tests after it need one; an API outage can leave the
        operator in the kubelet's crash-loop backoff for a while)."""
        self.app.wait(lambda: retrying(lambda: operator_pods.leader_pod(self.api)), timeout, "an operator leading")

    def one(self, fault: faults.Fault) -> Outcome:
        """After the fault's pause: inject it, wait for the recovery, check the sink."""
        (outcome,) = self.together(faults.Group((fault.kind,), fault.pause))
        return outcome

    def together(self, group: faults.Group) -> list[Outcome]:
        """After the group's pause: inject its faults at one moment, wait for every recovery, check the sink once
        (the check is every outcome's)."""
        time.sleep(group.pause)
        outcomes = self.inject(*group.kinds)
        check = self.check_sink()
        for outcome in outcomes:
            outcome.check = check
        return outcomes

    def inject(self, *kinds: str) -> list[Outcome]:
        """Inject faults now, together, and wait for each recovery (stepping in, as a person would, if there is
        none). Each is first armed (what it acts on is read while everything answers), then the instant ones are
        fired, then the outages begin; once the outages are over, the recoveries are awaited side by side, each
        timed from its own injection (an outage's from its service's return)."""
        self._steady()
        armed = [self._arm(kind) for kind in kinds]
        instant = [fault for fault in armed if fault.end is None]
        outages = [fault for fault in armed if fault.end is not None]
        for fault in instant:
            fault.since = time.time()
            fault.fire()
        if outages:
            begun: list[_Armed] = []
            try:
                for fault in outages:
                    fault.fire()
                    begun.append(fault)
                time.sleep(self.outage_seconds)
            finally:
                for fault in begun:
                    assert fault.end is not None
                    fault.end()
                    fault.since = time.time()
        if len(armed) == 1:
            return [armed[0].recover(armed[0].since)]
        with ThreadPoolExecutor(len(armed)) as pool:
            outcomes = list(pool.map(lambda fault: fault.recover(fault.since), armed))
        others = {outcome.kind for outcome in outcomes}
        for outcome in outcomes:
            together = ", ".join(sorted(others - {outcome.kind}))
            outcome.note = f"{outcome.note}; with {together}" if outcome.note else f"with {together}"
        return outcomes

    def _arm(self, kind: str) -> _Armed:
        armers: dict[str, Callable[[], _Armed]] = {
            faults.DRIVER_POD_DELETED: self._driver_pod_deleted,
            faults.DRIVER_SIGKILL: self._driver_sigkill,
            faults.EXECUTOR_DELETED: self._executor_deleted,
            faults.OPERATOR_LEADER_KILLED: self._operator_leader_killed,
            faults.APISERVER_STOPPED: self._apiserver_stopped,
            faults.OBJECT_STORE_STOPPED: self._object_store_stopped,
            faults.DRIVER_SIGSTOP: self._driver_sigstop,
            faults.OPERATOR_RESTART_IN_SAVEPOINT: self._operator_restart_in_savepoint,
        }
        return armers[kind]()

    def _steady(self) -> None:
        """Before a fault: the app Running with a driver and an executor, committing batches."""
        app = self.app
        app.wait(lambda: retrying(lambda: app.status().get("phase") == "Running"), 300, "phase Running")
        app.wait(lambda: app.running(names.ROLE_DRIVER) and app.running(names.ROLE_EXECUTOR), 300, "driver, executor")
        since = time.time()
        app.wait(lambda: app.commits_after(since), 120, "a batch before the next fault")

    # --- the faults: each armed (what it acts on read now), fired later, its recovery awaited after ---------

    def _driver(self) -> Any:
        return self.app.running(names.ROLE_DRIVER)[0]

    def _new_driver_commits(self, kind: str, injected: float, old: str, person: Callable[[], str]) -> Outcome:
        """Recovered when a driver other than `old` commits a batch; otherwise a person steps in."""
        try:
            recovery = self.app.first_commit_of_new_driver(injected, old, self.recovery_timeout)
            return Outcome(kind, recovery, note=retrying(lambda: self._new_driver_phases(injected)) or "")
        except AssertionError:
            action = person()
            self.app.first_commit_of_new_driver(injected, old, self.recovery_timeout)
            return Outcome(kind, None, action, note=f"no new driver within {self.recovery_timeout:.0f}s")

    def _new_driver_phases(self, injected: float) -> str:
        """Where the recovery's time went: the new driver pod's creation and start, from the injection."""
        pod: Any = self.app.core.read_namespaced_pod(self.app.status()["run"]["driverPod"], self.app.namespace)
        created = pod.metadata.creation_timestamp.timestamp() - injected
        started = pod.status.start_time.timestamp() - injected if pod.status.start_time else None
        return f"new driver pod +{created:.0f}s, started +{started:.0f}s" if started is not None else ""

    def _delete_driver_by_hand(self, old: str) -> Callable[[], str]:
        def act() -> str:
            with contextlib.suppress(client.ApiException):
                self.app.core.delete_namespaced_pod(old, self.app.namespace, grace_period_seconds=0)
            return f"deleted driver pod {old}"

        return act

    def _new_driver_after(self, kind: str, old: str, fire: Callable[[], object], person: Callable[[], str]) -> _Armed:
        return _Armed(fire, lambda injected: self._new_driver_commits(kind, injected, old, person))

    def _driver_pod_deleted(self) -> _Armed:
        old = self._driver().metadata.name
        return self._new_driver_after(
            faults.DRIVER_POD_DELETED,
            old,
            lambda: self.app.core.delete_namespaced_pod(old, self.app.namespace),
            self._delete_driver_by_hand(old),
        )

    def _driver_sigkill(self) -> _Armed:
        pod = self._driver()
        container, old = faults.container_id(pod), pod.metadata.name
        return self._new_driver_after(
            faults.DRIVER_SIGKILL,
            old,
            lambda: faults.signal_container(container, signal.SIGKILL, only="java"),
            self._delete_driver_by_hand(old),
        )

    def _driver_sigstop(self) -> _Armed:
        pod = self._driver()
        container, old = faults.container_id(pod), pod.metadata.name

        def thaw_and_delete() -> str:
            with contextlib.suppress(RuntimeError):
                faults.signal_container(container, signal.SIGCONT)
            return self._delete_driver_by_hand(old)() + " (after SIGCONT)"

        return self._new_driver_after(
            faults.DRIVER_SIGSTOP, old, lambda: faults.signal_container(container, signal.SIGSTOP), thaw_and_delete
        )

    def _executor_deleted(self) -> _Armed:
        app = self.app
        old = app.running(names.ROLE_EXECUTOR)[0].metadata.name

        def replaced() -> bool:
            return any(pod.metadata.name != old for pod in app.running(names.ROLE_EXECUTOR))

        def recover(injected: float) -> Outcome:
            running = _until(replaced, self.recovery_timeout)
            if running is None:
                return Outcome(faults.EXECUTOR_DELETED, None, "nothing replaced the executor", note="no executor")
            stamps = app.wait(
                lambda: app.commit_times_after(running), self.recovery_timeout, "a batch on the new executor"
            )
            return Outcome(faults.EXECUTOR_DELETED, stamps[0] - injected)

        return _Armed(lambda: app.core.delete_namespaced_pod(old, app.namespace), recover)

    def _leads_since(self, moment: float) -> bool:
        """A live operator pod holds the Lease and renewed it after `moment` (a dead process renews nothing)."""
        holder, renewed = operator_pods.lease_renewed(self.api)
        pod = next((p for p in operator_pods.operator_pods(self.api) if p.metadata.name == holder), None)
        ready = pod is not None and all(status.ready for status in pod.status.container_statuses or [])
        return bool(ready and renewed is not None and renewed > moment + 1)

    def _operator_leader_killed(self) -> _Armed:
        leader = self.app.wait(lambda: operator_pods.leader_pod(self.api), 120, "the operator's leader")
        container = faults.container_id(leader)

        def recover(injected: float) -> Outcome:
            back = _until(lambda: self._leads_since(injected), self.recovery_timeout)
            if back is None:
                return self._restart_operator_by_hand(faults.OPERATOR_LEADER_KILLED)
            return Outcome(faults.OPERATOR_LEADER_KILLED, back - injected)

        return _Armed(lambda: faults.signal_container(container, signal.SIGKILL), recover)

    def _restart_operator_by_hand(self, kind: str) -> Outcome:
        for pod in operator_pods.operator_pods(self.api):
            self.app.core.delete_namespaced_pod(pod.metadata.name, OPERATOR_NAMESPACE)
        self.app.wait(lambda: operator_pods.leader_pod(self.api), 300, "an operator leading again")
        return Outcome(kind, None, "deleted the operator's pods", note="no operator led again")

    def _apiserver_stopped(self) -> _Armed:
        plane, app = self.control_plane, self.app

        def recover(back: float) -> Outcome:
            recovered = _until(lambda: self._leads_since(back) and app.commits_after(back), self.recovery_timeout)
            if recovered is None:
                return self._restart_operator_by_hand(faults.APISERVER_STOPPED)
            return Outcome(faults.APISERVER_STOPPED, recovered - back, note=f"stopped {self.outage_seconds:.0f}s")

        return _Armed(plane.stop_apiserver, recover, end=plane.start_apiserver)

    def _object_store_stopped(self) -> _Armed:
        store, app = self.object_store, self.app

        def committing(back: float) -> bool:
            return bool(app.commit_times_after(back)) and app.status().get("phase") == "Running"

        def recover(back: float) -> Outcome:
            recovered = _until(lambda: committing(back), self.recovery_timeout)
            if recovered is None:
                old = self._driver().metadata.name
                action = self._delete_driver_by_hand(old)()
                return Outcome(faults.OBJECT_STORE_STOPPED, None, action, note="no batch after S3 returned")
            first = app.commit_times_after(back)[0]
            return Outcome(faults.OBJECT_STORE_STOPPED, first - back, note=f"stopped {self.outage_seconds:.0f}s")

        return _Armed(store.stop_server, recover, end=store.start_server)

    def _savepoints(self) -> dict[str, dict[str, Any]]:
        listed: Any = self.app.custom.list_namespaced_custom_object(
            models.GROUP, models.VERSION, self.app.namespace, models.SAVEPOINT_PLURAL
        )
        items: list[dict[str, Any]] = listed["items"]
        return {item["metadata"]["name"]: item for item in items}

    def _operator_restart_in_savepoint(self) -> _Armed:
        """Armed once the triggered savepoint has begun; fired: the leader's pod deleted while the driver copies."""
        kind, app = faults.OPERATOR_RESTART_IN_SAVEPOINT, self.app
        before = set(self._savepoints())
        nonce = int(app.app()["spec"].get("savepoints", {}).get("triggerNonce", 0)) + 1
        app.patch_spec({"savepoints": {"triggerNonce": nonce}})

        def begun() -> tuple[str, str] | None:
            """The new StreamingSavepoint once the operator has asked the driver (or it is already done)."""
            for name, item in self._savepoints().items():
                phase = (item.get("status") or {}).get("phase")
                if name not in before and phase in ("InProgress", "Succeeded", "Failed"):
                    return name, str(phase)
            return None

        deadline = time.monotonic() + 120
        while not (found := retrying(begun)) and time.monotonic() < deadline:
            time.sleep(0.1)  # the restart has to land while the driver copies: look often
        if not isinstance(found, tuple):
            raise AssertionError(f"the triggered savepoint never began\n{app.diagnostics()}")
        name, phase = found
        leader = app.wait(lambda: operator_pods.leader_pod(self.api), 60, "the operator's leader")
        note = f"savepoint {phase} when the operator pod was deleted"

        def settled() -> str | None:
            phase = (self._savepoints()[name].get("status") or {}).get("phase")
            return str(phase) if phase in ("Succeeded", "Failed") else None

        def recover(injected: float) -> Outcome:
            done = _until(settled, self.recovery_timeout)
            final = retrying(settled)
            if done is not None and final == "Succeeded":
                return Outcome(kind, done - injected, note=note)
            message = retrying(lambda: self._savepoints()[name]["status"].get("message")) or "no outcome"
            app.patch_spec({"savepoints": {"triggerNonce": nonce + 1}})  # the person asks again
            earlier = {None, name, (app.status().get("latestSavepoint") or {}).get("name")}
            app.wait(lambda: (app.status().get("latestSavepoint") or {}).get("name") not in earlier, 300, "a savepoint")
            return Outcome(kind, None, f"triggered the savepoint again ({message})", note=note)

        return _Armed(lambda: app.core.delete_namespaced_pod(leader.metadata.name, OPERATOR_NAMESPACE), recover)

    # --- the sink -------------------------------------------------------------------------------

    def _output(self) -> Any:
        return self.app.data / "output" / "tumbling"

    def check_sink(self) -> sink.SinkCheck:
        """Read the sink independently, once, now: no window twice, every count equal to the input's, and none
        missing behind the newest window it holds (that one is lost, not late). The windows after it that the
        input's watermark has closed are counted as late, not judged: a fault leaves the app behind the producer
        for a while, and `final_check` judges every window once the app has caught up."""
        rows = sink.read_rows(self._output())
        expected = scenario.expected_tumbling_counts(self.app.input.counted())  # read after the rows
        found = sink.compare(rows, expected, sink.emitted_by_now(expected, rows))
        produced = self.app.input.counted()
        last = datetime.strptime(produced[-1]["event_time"], "%Y-%m-%dT%H:%M:%S.%fZ") if produced else None
        closed = sink.closed_windows(expected, last) if last is not None else set()
        return dataclasses.replace(found, late=len(closed - {key for key, _ in rows}))

    def final_check(self) -> sink.SinkCheck:
        """After the producer's flush: the sink against every input event (nothing lost, duplicated or wrong), read
        until it holds every window or has gained none for `stall_timeout` seconds (the app catching up on its
        backlog keeps adding windows; one that lost some stops short of them)."""
        self.stop_producing()
        return settled_sink(self.app, self.stall_timeout)


def settled_sink(app: scenario.AppHandle, stall_timeout: float) -> sink.SinkCheck:
    """Once the producer has stopped: the flush event, then the app's tumbling sink against every input event,
    read until it holds every window or has gained none for `stall_timeout` seconds."""
    expected = scenario.expected_tumbling_counts(app.input.counted())
    app.input.flush()
    wanted, held, progressed = set(expected), -1, time.monotonic()
    while True:
        rows = sink.read_rows(app.data / "output" / "tumbling")
        seen = {key for key, _ in rows}
        if seen >= wanted:
            break
        if len(seen) > held:
            held, progressed = len(seen), time.monotonic()
        elif time.monotonic() - progressed > stall_timeout:
            break
        time.sleep(2)
    return sink.compare(rows, expected, expected)


def summary(figures: Figures) -> list[str]:
    """The run's figures as text: totals, then a Markdown table of recovery per kind."""
    final = figures.final
    lines = [
        f"faults injected: {figures.injected}, survived without a person: {figures.survived}",
        f"sink checks: {sum(o.check is not None for o in figures.outcomes)} after faults, all right: "
        f"{all(o.check is not None and o.check.ok for o in figures.outcomes)}; final: "
        + (f"{final.records} records in {final.windows} windows, right: {final.ok}" if final else "not run"),
        f"needed a person: {[(o.kind, o.person) for o in figures.needed_person()] or 'none'}",
        "",
        "| fault | injected | recovered alone | recovery median (s) | recovery max (s) |",
        "|---|---:|---:|---:|---:|",
    ]
    for kind, (count, median, longest) in figures.recovery().items():
        alone = sum(o.recovery_seconds is not None for o in figures.outcomes if o.kind == kind)
        lines.append(
            f"| {kind} | {count} | {alone} | "
            + " | ".join(f"{value:.1f}" if value is not None else "-" for value in (median, longest))
            + " |"
        )
    return lines


def describe(outcome: Outcome) -> str:
    """One line about one fault."""
    recovery = f"{outcome.recovery_seconds:.1f}s" if outcome.recovery_seconds is not None else "did not recover"
    check = outcome.check
    if check is None:
        sink_text = "sink not checked"
    elif check.ok:
        sink_text = f"sink ok: {check.windows} windows, {check.records} records ({check.late} closed windows late)"
    else:
        sink_text = (
            f"SINK WRONG: {len(check.duplicated)} duplicated {check.duplicated[:3]}, {len(check.wrong)} wrong "
            f"{check.wrong[:3]}, {len(check.missing)} missing {check.missing[:3]} ({check.windows} windows read)"
        )
    person = f"; a person {outcome.person}" if outcome.person else ""
    note = f" ({outcome.note})" if outcome.note else ""
    return f"{outcome.kind}: recovered in {recovery}{note}; {sink_text}{person}"
