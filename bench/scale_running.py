"""Operator scale with running pods: simulated nodes (KWOK), a restart storm, and a peer operator in the same run.

Each operator's run gets a control plane of its own (the same testbed binaries and flags, started fresh, so
no run sees another's objects) with KWOK's fake nodes (no JVM starts; KWOK marks a bound pod Running and
removes a deleted one at once). Scenarios:
- burst: N apps created at once (8 client threads); per app, create -> driver pod created and create ->
  driver Running (p50/p99/max); from the first create call, the time until every driver was created and
  until every driver was Running; the operator's CPU seconds and peak RSS (its whole process group:
  for the peer, its spark-submit JVMs too).
- storm: S of those Running drivers deleted at once (16 client threads, as a node loss would take them)
  -> every app has a new driver Running (p50/p99/max, all); an app that ever had two live drivers (neither
  being deleted) at once is counted, over the burst and the storm.
- sustained: apps created at a steady rate (`--rate`, apps/s, for `--seconds`), each call on its schedule;
  per app, create -> driver pod created and -> Running (p50/p99/max).
- with `--baseline DIR`, each scenario first runs another version's operator (its `headrace` package in DIR)
  on a cluster of its own, and the burst's figures are printed beside the current ones with their ratio.
- the same burst and storm for the Kubeflow Spark operator v2.4.0 (`testbed.spark_operator`) on the same
  fake nodes, printed beside Headrace's, with Headrace's figure divided by the peer's.
Run: `uv run python bench/operator_scale.py --running N [--storm S] [--rate R --seconds T] [--peer N]
[--baseline DIR]` (see `main` there).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException
from prometheus_client.parser import text_string_to_metric_families

from headrace.api import models, names
from operator_scale import _manifest, _per_app, _percentile, _request_counts
from testbed import kwok, procs, spark_operator
from testbed.controlplane import ControlPlane, create_namespace
from testbed.operator_process import OperatorProcess, install_crds

IMAGE = "localhost/headrace/spark:0.1.0"
MAIN_FILE = "local:///opt/headrace/apps/windowed-counts/app.py"
APPS_PER_FAKE_NODE = 100
WAIT_SECONDS = 900.0
CREATE_THREADS = 8
DELETE_THREADS = 16
SETTLE_SECONDS = 10.0
SUSTAINED_THREADS = 16  # client threads for the sustained rate (a create call can take longer than 1/rate)


# --- the two operators, described the same way ---------------------------------------------------


@dataclass(frozen=True)
class Launched:
    """A running operator: its pid and, for Headrace, the text of its /metrics (None for the peer)."""

    pid: int
    metrics: Callable[[], str] | None = None


@dataclass(frozen=True)
class Subject:
    """One operator under test: how to run it, what an app is, and how to tell an app's driver pods."""

    name: str
    group: str
    version: str
    plural: str
    manifest: Callable[[str], dict[str, Any]]
    driver_selector: str  # label selector of driver pods
    app_label: str  # the driver pod's label naming its app
    run: Callable[[ControlPlane, str, Path], contextlib.AbstractContextManager[Launched]]
    install: Callable[[client.ApiClient], None]  # its CRDs


def _headrace_manifest(name: str) -> dict[str, Any]:
    manifest: dict[str, Any] = _manifest(name)
    spec = manifest["spec"]
    spec["driver"] = {"podTemplate": {"spec": kwok.placement()}}
    # No runtime agent answers on a simulated node: the operator's status calls fail at once (KWOK's pod
    # addresses are on loopback, nothing listens), and this keeps those misses from replacing drivers.
    spec["restartPolicy"] = {"heartbeatTimeout": "1h"}
    return manifest


@contextlib.contextmanager
def _run_headrace(plane: ControlPlane, namespace: str, workdir: Path, source: Path | None = None) -> Iterator[Launched]:
    del namespace  # it watches every namespace
    env = {"PYTHONPATH": str(source)} if source is not None else {}  # another version's headrace package
    with OperatorProcess(plane.kubeconfig, workdir / "headrace", env, verbose=False) as operator:
        assert operator.process is not None
        yield Launched(operator.process.pid, operator.metrics)


def baseline_subject(source: Path) -> Subject:
    """Headrace as another version (its `headrace` package in `source`, e.g. an older commit's operator/)."""
    return dataclasses.replace(
        HEADRACE, name=f"Headrace baseline ({source})", run=functools.partial(_run_headrace, source=source)
    )


@contextlib.contextmanager
def _run_peer(plane: ControlPlane, namespace: str, workdir: Path) -> Iterator[Launched]:
    with spark_operator.SparkOperator(plane, namespace, workdir / "peer") as peer:
        assert peer.process is not None
        yield Launched(peer.process.pid)


HEADRACE = Subject(
    "Headrace",
    models.GROUP,
    models.VERSION,
    models.APP_PLURAL,
    _headrace_manifest,
    f"{names.ROLE}={names.ROLE_DRIVER}",
    names.APP,
    _run_headrace,
    install_crds,
)
PEER = Subject(
    f"Kubeflow Spark operator {spark_operator.VERSION}",
    spark_operator.GROUP,
    spark_operator.API_VERSION,
    spark_operator.PLURAL,
    lambda name: spark_operator.application_manifest(name, IMAGE, MAIN_FILE, kwok.placement()),
    "spark-role=driver",
    "sparkoperator.k8s.io/app-name",
    _run_peer,
    spark_operator.install_crds,
)


# --- what a pod watch sees ------------------------------------------------------------------------


@dataclass
class DriverLog:
    """Driver pods seen through a watch, by uid (the peer names an app's every driver alike): when each was
    first seen and first Running, which are live."""

    app_label: str
    created: dict[str, float] = field(default_factory=dict)  # pod uid -> first seen
    running: dict[str, float] = field(default_factory=dict)  # pod uid -> first seen Running
    app_of: dict[str, str] = field(default_factory=dict)  # pod uid -> app
    name_of: dict[str, str] = field(default_factory=dict)  # pod uid -> name
    live: dict[str, set[str]] = field(default_factory=dict)  # app -> uids of pods neither deleted nor being deleted
    doubled: set[str] = field(default_factory=set)  # apps that ever had two live drivers
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, kind: str, pod: Any, now: float) -> None:
        """Fold one watch event in."""
        app = (pod.metadata.labels or {}).get(self.app_label)
        if not app:
            return
        name = pod.metadata.uid
        with self.lock:
            self.app_of[name] = app
            self.name_of[name] = pod.metadata.name
            self.created.setdefault(name, now)
            if pod.status and pod.status.phase == "Running" and kind != "DELETED":
                self.running.setdefault(name, now)
            pods = self.live.setdefault(app, set())
            if kind == "DELETED" or pod.metadata.deletion_timestamp:
                pods.discard(name)
            else:
                pods.add(name)
                if len(pods) > 1:
                    self.doubled.add(app)

    def first(self, table: dict[str, float], after: float = 0.0) -> dict[str, float]:
        """App -> the earliest time in `table` (created or running) of its pods first seen after `after`."""
        with self.lock:
            result: dict[str, float] = {}
            for pod, moment in table.items():
                if self.created[pod] >= after:
                    app = self.app_of[pod]
                    result[app] = min(moment, result.get(app, moment))
            return result

    def running_pods(self) -> dict[str, str]:
        """App -> the name of one of its live pods that is Running."""
        with self.lock:
            return {app: self.name_of[uid] for app, uids in self.live.items() for uid in uids if uid in self.running}


def _watch(namespace: str, api: client.ApiClient, selector: str, log: DriverLog, stop: threading.Event) -> None:
    core = client.CoreV1Api(api)
    version = ""
    while not stop.is_set():
        stream = watch.Watch()
        try:
            for event in stream.stream(
                core.list_namespaced_pod,
                namespace,
                label_selector=selector,
                resource_version=version,
                timeout_seconds=5,
            ):
                log.record(event["type"], event["object"], time.monotonic())
                version = event["object"].metadata.resource_version
                if stop.is_set():
                    stream.stop()
        except ApiException as error:
            if error.status != 410:  # expired: list again from now
                raise
            version = ""


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of the process and of its children it waited for (spark-submit runs)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _group_rss(pgid: int) -> int:
    total = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError):
                if os.getpgid(int(entry)) == pgid:
                    total += procs.rss_bytes(int(entry))
    return total


class _GroupSampler(threading.Thread):
    def __init__(self, pgid: int) -> None:
        super().__init__(daemon=True)
        self.pgid, self.peak, self.stopped = pgid, 0, threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            self.peak = max(self.peak, _group_rss(self.pgid))
            time.sleep(0.2)


# --- scenarios -----------------------------------------------------------------------------------


def _spread(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": float("nan"), "p99": float("nan"), "max": float("nan")}
    return {"p50": statistics.median(values), "p99": _percentile(values, 0.99), "max": max(values)}


def _wait(condition: Callable[[], bool], seconds: float = WAIT_SECONDS) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@contextlib.contextmanager
def _cluster(subject: Subject, count: int, workdir: Path) -> Iterator[tuple[ControlPlane, client.ApiClient]]:
    """A control plane of its own (fresh etcd: no other run's objects) with the subject's CRDs and KWOK's nodes."""
    nodes = -(-count // APPS_PER_FAKE_NODE) + 1
    with ControlPlane(workdir / "plane") as plane, plane.api_client() as api:
        subject.install(api)
        with kwok.Kwok(plane.kubeconfig, api, workdir / "kwok", nodes):
            yield plane, api


@contextlib.contextmanager
def _watched(subject: Subject, api: client.ApiClient, namespace: str) -> Iterator[DriverLog]:
    """The subject's driver pods in `namespace`, logged by a watch thread until the block ends."""
    log, stop = DriverLog(subject.app_label), threading.Event()
    watcher = threading.Thread(target=_watch, args=(namespace, api, subject.driver_selector, log, stop), daemon=True)
    watcher.start()
    try:
        yield log
    finally:
        stop.set()
        watcher.join(timeout=10)


def _creator(
    subject: Subject, api: client.ApiClient, namespace: str, created: dict[str, float]
) -> Callable[[int], None]:
    """Creates app `index` and records when the call returned in `created`."""
    custom = client.CustomObjectsApi(api)

    def create(index: int) -> None:
        name = f"app-{index:04d}"
        custom.create_namespaced_custom_object(
            subject.group, subject.version, namespace, subject.plural, subject.manifest(name)
        )
        created[name] = time.monotonic()

    return create


def _latencies(log: DriverLog, created: dict[str, float]) -> dict[str, Any]:
    """Per app, create -> first driver pod created and -> first Running."""
    first_created, first_running = log.first(log.created), log.first(log.running)
    return {
        "to_created": _spread([first_created[app] - created[app] for app in first_created]),
        "to_running": _spread([first_running[app] - created[app] for app in first_running]),
    }


def run_subject(subject: Subject, count: int, storm: int, workdir: Path) -> dict[str, Any]:
    """A fresh cluster and operator: the burst of `count` apps, then the storm over `storm` of them."""
    with _cluster(subject, count, workdir) as (plane, api):
        namespace = create_namespace(api, "scale")
        created: dict[str, float] = {}
        create = _creator(subject, api, namespace, created)
        with _watched(subject, api, namespace) as log, subject.run(plane, namespace, workdir) as launched:
            pid = launched.pid
            time.sleep(2)
            idle_rss = _group_rss(pid)
            cpu_before = _cpu_seconds(pid)
            sampler = _GroupSampler(pid)
            sampler.start()
            counted = launched.metrics is not None  # Headrace: its requests are the kinds `_request_counts` counts
            requests_before = _request_counts(api) if counted else {}
            began = time.monotonic()
            with ThreadPoolExecutor(max_workers=CREATE_THREADS) as pool:
                list(pool.map(create, range(count)))
            all_running = _wait(lambda: len(log.first(log.running)) >= count)
            burst_cpu = _cpu_seconds(pid) - cpu_before
            first_created, first_running = log.first(log.created), log.first(log.running)
            result: dict[str, Any] = {
                "subject": subject.name,
                "apps": count,
                "all_running": all_running,
                **_latencies(log, created),
                "all_created_s": max(first_created.values(), default=began) - began,
                "all_running_s": max(first_running.values(), default=began) - began,
                "burst_cpu_s": burst_cpu,
                "idle_rss_mb": idle_rss / 2**20,
            }
            time.sleep(SETTLE_SECONDS)  # the operator records its Running drivers (before losing them in the storm)
            if counted:
                result["requests_per_app"] = _per_app(requests_before, _request_counts(api), count)
                result["burst_requests"] = sum(result["requests_per_app"].values())
            if storm:
                requests_before = _request_counts(api) if counted else {}
                result |= _storm(api, namespace, log, storm)
                result["storm_cpu_s"] = _cpu_seconds(pid) - cpu_before - burst_cpu
                if counted:
                    time.sleep(SETTLE_SECONDS)  # the replacements' Running recorded
                    result["storm_requests_per_app"] = _per_app(requests_before, _request_counts(api), storm)
                    result["storm_requests"] = sum(result["storm_requests_per_app"].values())
            sampler.stopped.set()
            sampler.join()
            result["peak_rss_mb"] = sampler.peak / 2**20
            result["doubled"] = len(log.doubled)
        return result


def run_sustained(subject: Subject, rate: float, seconds: float, workdir: Path) -> dict[str, Any]:
    """A fresh cluster and operator: apps created at `rate` per second for `seconds` (each create call made on
    its schedule from a pool of client threads); per app, create -> driver pod created and -> Running."""
    count = round(rate * seconds)
    with _cluster(subject, count, workdir) as (plane, api):
        namespace = create_namespace(api, "sustained")
        created: dict[str, float] = {}
        late: list[float] = []  # how far behind its schedule each create call started
        create_app = _creator(subject, api, namespace, created)

        def create(index: int, due: float) -> None:
            late.append(max(0.0, time.monotonic() - due))
            create_app(index)

        with _watched(subject, api, namespace) as log, subject.run(plane, namespace, workdir) as launched:
            pid = launched.pid
            time.sleep(2)
            cpu_before = _cpu_seconds(pid)
            began = time.monotonic()
            with ThreadPoolExecutor(max_workers=SUSTAINED_THREADS) as pool:
                for index in range(count):
                    due = began + index / rate
                    time.sleep(max(0.0, due - time.monotonic()))
                    pool.submit(create, index, due)
            calls_s = time.monotonic() - began
            all_running = _wait(lambda: len(log.first(log.running)) >= count)
            result: dict[str, Any] = {
                "subject": subject.name,
                "apps": count,
                "rate": rate,
                "seconds": seconds,
                "calls_s": calls_s,
                "late_p99_s": _percentile(late, 0.99) if late else float("nan"),
                "all_running": all_running,
                **_latencies(log, created),
                "cpu_s": _cpu_seconds(pid) - cpu_before,
                "doubled": len(log.doubled),
                "waits": _where_time_went(launched.metrics()) if launched.metrics is not None else {},
            }
        return result


# The operator's histograms that say where an app's time went: waiting for a worker, or being reconciled (mostly
# waiting on the API server: see the profile in docs/operations.md).
_TIME_SERIES = {
    "queue wait (urgent)": ("headrace_queue_wait_seconds", {"lane": "urgent"}),
    "queue wait (poll)": ("headrace_queue_wait_seconds", {"lane": "poll"}),
    "reconcile": ("headrace_reconcile_duration_seconds", {}),
}


def _where_time_went(metrics: str) -> dict[str, dict[str, float]]:
    """Per series in `_TIME_SERIES`: count, mean, and the p50 and p99 upper bucket bounds (seconds)."""
    families = {family.name: family for family in text_string_to_metric_families(metrics)}
    spreads: dict[str, dict[str, float]] = {}
    for label, (name, wanted) in _TIME_SERIES.items():
        family = families.get(name)
        if family is None:
            continue
        samples = [sample for sample in family.samples if wanted.items() <= sample.labels.items()]
        buckets = sorted(
            (float(sample.labels["le"]), sample.value) for sample in samples if sample.name.endswith("_bucket")
        )
        count = next((sample.value for sample in samples if sample.name.endswith("_count")), 0.0)
        total = next((sample.value for sample in samples if sample.name.endswith("_sum")), 0.0)
        if not count:
            continue

        def bound(fraction: float, buckets: list[tuple[float, float]] = buckets, count: float = count) -> float:
            return next(upper for upper, seen in buckets if seen >= fraction * count)

        spreads[label] = {"count": count, "mean": total / count, "p50": bound(0.5), "p99": bound(0.99)}
    return spreads


def print_sustained(result: dict[str, Any]) -> None:
    """The sustained scenario's figures, two lines (three with the operator's own metrics)."""
    print(
        f"{result['subject']}, {result['rate']:g} apps/s for {result['seconds']:g}s ({result['apps']} apps; create "
        f"calls took {result['calls_s']:.1f}s, p99 {result['late_p99_s']:.2f}s behind schedule) on KWOK nodes: "
        f"{_line('create->driver created', result['to_created'])}; {_line('create->Running', result['to_running'])}"
        f"{'' if result['all_running'] else ' (NOT all Running: timed out)'}; CPU {result['cpu_s']:.1f}s; "
        f"apps that ever had two live drivers: {result['doubled']}",
        flush=True,
    )
    if result.get("waits"):
        parts = [
            f"{label} {spread['count']:.0f}x mean {spread['mean']:.2f}s, p50 <= {spread['p50']:g}s, "
            f"p99 <= {spread['p99']:g}s"
            for label, spread in result["waits"].items()
        ]
        print(f"  where the time went (the operator's histograms): {'; '.join(parts)}", flush=True)


def _storm(api: client.ApiClient, namespace: str, log: DriverLog, count: int) -> dict[str, Any]:
    victims = sorted(log.running_pods().items())[:count]
    core = client.CoreV1Api(api)
    began = time.monotonic()
    with ThreadPoolExecutor(max_workers=DELETE_THREADS) as pool:
        list(pool.map(lambda item: core.delete_namespaced_pod(item[1], namespace), victims))
    deleted_s = time.monotonic() - began
    apps = {app for app, _ in victims}
    replaced = _wait(lambda: apps <= set(log.first(log.running, after=began)))
    new_running = {app: moment for app, moment in log.first(log.running, after=began).items() if app in apps}
    return {
        "storm": len(victims),
        "storm_delete_calls_s": deleted_s,
        "all_replaced": replaced,
        "to_replaced": _spread([moment - began for moment in new_running.values()]),
        "all_replaced_s": max(new_running.values(), default=began) - began,
    }


# --- the run and its table -----------------------------------------------------------------------


def run(
    counts: list[int],
    storm: int,
    peer: int,
    workdir: Path,
    *,
    baseline: Path | None = None,
    sustained: tuple[float, float] | None = None,
) -> list[dict[str, Any]]:
    """Headrace at each of `counts` (the storm over `storm` apps in each; with `baseline`, that version right
    before, and the ratios), the sustained rate (apps/s, seconds) likewise, then, if `peer`, Headrace and the
    peer at `peer` apps, side by side; each run on a control plane and KWOK nodes of its own."""
    results = []
    for index, count in enumerate(counts):
        if baseline is not None:
            before = run_subject(baseline_subject(baseline), count, min(storm, count), workdir / f"baseline-{index}")
            print_result(before)
        results.append(run_subject(HEADRACE, count, min(storm, count), workdir / f"headrace-{index}"))
        print_result(results[-1])
        if baseline is not None:
            print_side_by_side(results[-1], before, "baseline")
    if sustained is not None:
        rate, seconds = sustained
        if baseline is not None:
            before = run_sustained(baseline_subject(baseline), rate, seconds, workdir / "baseline-sustained")
            print_sustained(before)
        results.append(run_sustained(HEADRACE, rate, seconds, workdir / "headrace-sustained"))
        print_sustained(results[-1])
    if peer:
        ours = run_subject(HEADRACE, peer, min(storm, peer), workdir / "headrace-beside-peer")
        print_result(ours)
        theirs = run_subject(PEER, peer, min(storm, peer), workdir / "peer")
        print_result(theirs)
        results += [ours, theirs]
        print_side_by_side(ours, theirs)
    return results


def _line(label: str, spread: dict[str, float]) -> str:
    return f"{label} p50 {spread['p50']:.2f}s p99 {spread['p99']:.2f}s max {spread['max']:.2f}s"


def print_result(result: dict[str, Any]) -> None:
    """One subject's figures, a few lines."""
    print(
        f"{result['subject']}, N={result['apps']} on KWOK nodes: "
        f"{_line('create->driver created', result['to_created'])}; {_line('create->Running', result['to_running'])}; "
        f"all created {result['all_created_s']:.1f}s, all Running {result['all_running_s']:.1f}s"
        f"{'' if result['all_running'] else ' (NOT all Running: timed out)'}; CPU {result['burst_cpu_s']:.1f}s, "
        f"RSS idle {result['idle_rss_mb']:.0f} MB, peak {result['peak_rss_mb']:.0f} MB",
        flush=True,
    )
    _print_requests("burst, per app", result.get("requests_per_app"))
    if "storm" in result:
        print(
            f"  storm: {result['storm']} Running drivers deleted at once (calls took "
            f"{result['storm_delete_calls_s']:.1f}s) -> {_line('new driver Running', result['to_replaced'])}; "
            f"all replaced {result['all_replaced_s']:.1f}s{'' if result['all_replaced'] else ' (NOT all: timed out)'}"
            f"; CPU {result['storm_cpu_s']:.1f}s; apps that ever had two live drivers: {result['doubled']}",
            flush=True,
        )
        _print_requests("storm, per replaced app", result.get("storm_requests_per_app"))


def _print_requests(what: str, requests: dict[str, float] | None) -> None:
    """The operator's API requests as the API server counted them (Headrace only; see `_request_counts`): over the
    burst until every driver ran plus SETTLE_SECONDS, or over the storm likewise. Simulated drivers never answer
    the operator, so a status write per app records the first unanswered call (restartPolicy.heartbeatTimeout)."""
    if requests:
        listed = ", ".join(f"{key} {value:.2f}" for key, value in requests.items())
        print(f"  API requests ({what}): {sum(requests.values()):.1f} ({listed})", flush=True)


ROWS = (
    ("create->driver created p50 (s)", ("to_created", "p50")),
    ("create->driver created p99 (s)", ("to_created", "p99")),
    ("create->driver Running p50 (s)", ("to_running", "p50")),
    ("create->driver Running p99 (s)", ("to_running", "p99")),
    ("all drivers created (s)", ("all_created_s",)),
    ("all drivers Running (s)", ("all_running_s",)),
    ("operator CPU, burst (s)", ("burst_cpu_s",)),
    ("operator peak RSS (MB)", ("peak_rss_mb",)),
    ("API requests per app, burst", ("burst_requests",)),
    ("storm: all replaced (s)", ("all_replaced_s",)),
    ("storm: replaced p99 (s)", ("to_replaced", "p99")),
    ("storm: operator CPU (s)", ("storm_cpu_s",)),
    ("storm: API requests per app", ("storm_requests",)),
    ("apps with two live drivers", ("doubled",)),
)


def _value(result: dict[str, Any], path: tuple[str, ...]) -> float:
    value: Any = result
    for key in path:
        value = value.get(key, float("nan")) if isinstance(value, dict) else float("nan")
    return float(value)


def print_side_by_side(ours: dict[str, Any], theirs: dict[str, Any], other: str = "peer") -> None:
    """The table: each figure for both operators at the same N, and Headrace's divided by the other's."""
    print(f"\nSame testbed control plane and KWOK nodes, N={ours['apps']}, storm {ours.get('storm', 0)}:", flush=True)
    print(f"{'':32} {'Headrace':>10} {other:>10} {'ratio':>7}")
    for label, path in ROWS:
        mine, peer = _value(ours, path), _value(theirs, path)
        ratio = f"{mine / peer:.2f}" if peer else "-"
        print(f"{label:32} {mine:10.2f} {peer:10.2f} {ratio:>7}", flush=True)
    print(f"({other}: {theirs['subject']}; ratio < 1: Headrace smaller, i.e. faster or leaner)", flush=True)
