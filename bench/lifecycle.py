"""Lifecycle benchmark on the local cluster (or HEADRACE_E2E_KUBECONFIG): recovery, rescale, upgrade, suspend.

Runs the windowed-counts example as the quick start deploys it (`testbed.quickstart.example_app`): reading the
cluster's Kafka (a topic of its own, a producer adding 120 clicks every 1.5 s), state in the cluster's S3 bucket,
both queries, 8 state partitions. `--source files --state hostpath` is the bench's earlier configuration (input
files and state on a hostPath the node shares, 120 clicks every 2 s); `--interval S` sets the producer's pace.
It prints, from one run:
recovery time after driver loss, in-place rescale time (up and down) with the longest gap between
committed batches during it (against the median gap before) and the driver restarts it caused,
savepoint-based rescale downtime (a state partition change through a savepoint and an offline
repartition), savepoint and last-state upgrade downtime, and resume time. Every "downtime" is from
the change to the first batch committed by the new driver.
Run: `uv run python bench/lifecycle.py`.

`--recovery N` measures only cold recovery, N times on one deployment, and prints each run's phases
(seen by polling the API and the checkpoint every 0.2 s, from the deletion): old driver gone, new
driver pod created, Running, executor pod Running, first batch committed by the new driver, plus
the runtime's own phase metrics (JVM, SparkContext, executors registered, queries started) when the
new driver serves them, and the operator's restart backoff (`restart_backoff`, seconds it waited before the new
attempt: status.restarts.nextRetryAt minus the failure; `consecutive_failures`, the count that set it); then the
median and p90 of each. The backoff is the operator's restartPolicy: the first loss of a healthy run restarts at
once, each further loss before a driver has run `healthyAfter` (2m by default) waits `backoff.initialSeconds`
doubled per loss (1, 2, 4, 8 s with the example's policy). The bench sets healthyAfter 5s and waits for the reset
before each loss, so its recoveries hold no backoff; `--example-restart-policy` keeps the example's policy and
deletes the driver as soon as the new one has committed batches for 10 s, as a person deleting pods in a row
would (the backoff then shows in `restart_backoff`). `--legacy-start` runs the same with the
previous cold path (the driver JVM started by spark-submit's launcher, no class-data sharing archive
for driver and executors: HEADRACE_JVM_START=spark-submit on the driver; the SparkContext waiting for
executors; Hadoop's local file system forking chmod); `--json FILE` saves the runs
and `--baseline FILE` prints each phase's median against that file's as a ratio (two runs of the
bench one after the other, each under its own node lock hold). `--standby` measures the same with
`spec.standby.enabled` (each deletion once the standby waits at its gate: the "new driver" is the
promoted standby, created and Running before the loss); `--no-warmup` with it sets `spec.standby.warmup: false`
(the standby waits without running its warm-up query first: the baseline of the warm-up).

`--transition KIND --runs N` measures one transition N times (10 by default) on one deployment, each the
change of the spec to the first batch committed by the new driver, with the same phases (from the
change; "old driver gone" includes the savepoint, whose completion is a phase of its own where one is
taken): `savepoint-upgrade` and `last-state-upgrade` (a driver variable changed, under that
upgradeMode), `partitions` (state.partitions 8 -> 9 -> 10 ..., through a savepoint and an offline
repartition: each query's repartition is a batch of its own that reads no input, the phase `repartitioned`;
`first_batch` is the first batch after it) and `resume` (suspended first, not measured; from the resume);
with `--prewarm` every second upgrade is pre-warmed (`standby.prewarmUpgrades` set with the change), summed
up apart, the cold ones of the same deployment its baseline; `last_batch_before` is the last batch the old
driver committed (the processing pause is `first_batch` minus it). `--cold K` first measures K
cold recoveries of the same deployment, the ratio's baseline unless `--baseline FILE` is given (e.g.
`--recovery 10 --json cold.json` run just before).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import itertools
import json
import statistics
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

from headrace.api import names
from headrace.core.timefmt import parse_time
from testbed import REPOSITORY, quickstart, scenario
from testbed.environment import Environment, environment


@dataclass(frozen=True)
class Setup:
    """Where the bench app reads and keeps its state, and how fast the producer adds clicks."""

    source: str = "kafka"  # the cluster's Kafka (a topic of the app's own), or "files" on the hostPath
    state: str = "bucket"  # the cluster's S3 bucket, or "hostpath" beside the output
    interval: float = 1.5  # seconds between two chunks of 120 clicks

    @property
    def label(self) -> str:
        """As printed with the figures."""
        return f"source {self.source}, state {self.state}, 120 clicks every {self.interval:g} s"


QUICKSTART = Setup()
STATES = ("bucket", "hostpath")
FILES_INTERVAL = 2.0  # the producer's pace of the file configuration (the bench's before the quick start's)


@contextlib.contextmanager
def _deployed(target: Environment, setup: Setup, **overrides: object) -> Iterator[scenario.AppHandle]:
    """The example as the quick start applies it, in `setup`'s configuration with `overrides` in its spec, 3 chunks
    of clicks written, once it committed a batch; its namespace deleted afterwards."""
    bucket = setup.state == "bucket"
    with quickstart.example_app(target, 3, "bench", source=setup.source, bucket=bucket, **overrides) as app:
        app.wait(app.commits, 900, "the first batch")
        yield app


def _driver(app: scenario.AppHandle) -> str:
    return str((app.status().get("run") or {}).get("driverPod"))


def _gaps(app: scenario.AppHandle, start: float, end: float) -> list[float]:
    stamps = sorted(path.stat().st_mtime for path in app.commits() if start <= path.stat().st_mtime <= end)
    return [later - earlier for earlier, later in itertools.pairwise(stamps)]


def run(target: Environment, setup: Setup = QUICKSTART) -> dict[str, float]:
    """The whole scenario; returns the figures."""
    figures: dict[str, float] = {}
    with _deployed(target, setup, upgradeMode="savepoint") as app:
        namespace = app.namespace
        with scenario.Writer(app.input, interval=setup.interval):
            time.sleep(30)
            before = _gaps(app, time.time() - 30, time.time())
            figures["median_batch_gap_s"] = statistics.median(before) if before else float("nan")

            driver = _driver(app)
            lost = time.time()
            app.core.delete_namespaced_pod(driver, namespace)
            figures["recovery_after_driver_loss_s"] = app.first_commit_of_new_driver(lost, driver)

            restarts, driver, scaled = app.status()["restarts"]["total"], _driver(app), time.time()
            target.kubectl("scale", "sapp", scenario.APP, "-n", namespace, "--replicas=2")
            app.wait(lambda: len(app.running(names.ROLE_EXECUTOR)) == 2, 600, "two executors")
            figures["in_place_scale_up_s"] = time.time() - scaled
            down = time.time()
            target.kubectl("scale", "sapp", scenario.APP, "-n", namespace, "--replicas=1")
            app.wait(lambda: len(app.running(names.ROLE_EXECUTOR)) == 1, 600, "one executor")
            figures["in_place_scale_down_s"] = time.time() - down
            time.sleep(10)
            during = _gaps(app, scaled, time.time())
            figures["in_place_rescale_longest_batch_gap_s"] = max(during) if during else float("nan")
            figures["in_place_rescale_driver_restarts"] = float(app.status()["restarts"]["total"] - restarts)
            figures["in_place_rescale_driver_replaced"] = float(_driver(app) != driver)

            driver, partitions = _driver(app), time.time()
            app.patch_spec({"state": {"partitions": 12}})
            figures["savepoint_rescale_downtime_s"] = app.first_commit_of_new_driver(partitions, driver)

            driver, upgrade = _driver(app), time.time()
            args = [*app.app()["spec"]["application"]["args"], "--trigger-seconds", "3"]
            app.patch_spec({"application": {"args": args}})
            figures["savepoint_upgrade_downtime_s"] = app.first_commit_of_new_driver(upgrade, driver)

            driver, upgrade = _driver(app), time.time()
            args = [*args, "--trigger-seconds", "2"]
            app.patch_spec({"upgradeMode": "last-state", "application": {"args": args}})
            figures["last_state_upgrade_downtime_s"] = app.first_commit_of_new_driver(upgrade, driver)

        app.patch_spec({"job": {"state": "suspended"}})
        app.wait(lambda: app.status().get("phase") == "Suspended", 900, "Suspended")
        app.input.next_file()
        driver, resumed = _driver(app), time.time()
        app.patch_spec({"job": {"state": "running"}})
        figures["resume_to_first_batch_s"] = app.first_commit_of_new_driver(resumed, driver)
    return figures


POLL_SECONDS = 0.2
RUNTIME_PHASE_METRIC = "headrace_runtime_phase_seconds"  # seconds from the runtime's start, by phase
METRICS_PORT = 9464


def _poll_phases(checks: dict[str, Callable[[], bool]], since: float, timeout: float = 900) -> dict[str, float]:
    """Poll every check until each has been true once; seconds from `since` to the first time each was."""
    seen: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    while len(seen) < len(checks) and time.monotonic() < deadline:
        for name, check in checks.items():
            if name not in seen and check():
                seen[name] = time.time() - since
        time.sleep(POLL_SECONDS)
    return seen


def _runtime_phases(address: str | None) -> dict[str, float]:
    """The runtime's phase metric (seconds from its start), if the driver serves it."""
    if not address:
        return {}
    try:
        with urllib.request.urlopen(f"http://{address}:{METRICS_PORT}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return {}
    phases = {}
    for line in text.splitlines():
        if line.startswith(RUNTIME_PHASE_METRIC + "{"):
            labels, _, value = line.rpartition(" ")
            phase = labels.split('phase="', 1)[1].split('"', 1)[0]
            if float(value) > 0:
                phases[f"runtime_{phase}"] = float(value)
    return phases


def _phases(
    app: scenario.AppHandle,
    change: Callable[[str], object],
    extra: dict[str, Callable[[], bool]] | None = None,
    repartitions: bool = False,
) -> dict[str, float]:
    """Make `change` (given the running driver's pod name), which replaces that driver; the phases of its
    replacement (and any `extra` checks), in seconds from the change. With `repartitions` (the change restores
    with other state partitions), each query's first new batch is the offline repartition's, which reads no
    input: it is the phase `repartitioned` (the first such), and `first_batch` is the first batch after it."""
    old = _driver(app)
    old_executors = {pod.metadata.name for pod in app.pods(names.ROLE_EXECUTOR)}

    def driver_pods() -> list[str]:
        return [pod.metadata.name for pod in app.pods(names.ROLE_DRIVER)]

    def new_running() -> bool:
        return any(pod.metadata.name != old for pod in app.running(names.ROLE_DRIVER))

    def new_executor_running() -> bool:
        return any(pod.metadata.name not in old_executors for pod in app.running(names.ROLE_EXECUTOR))

    gone: list[float] = []  # when the old driver's pod was first seen gone

    def old_driver_gone() -> bool:
        if not gone and old not in driver_pods():
            gone.append(time.time())
        return bool(gone)

    def new_commits() -> list[float]:
        """By the current driver, after the change and once the old driver is gone: a standby's or a pre-warmed
        driver's pod started before them, and the old driver may commit to the same checkpoint until it stops."""
        floor = gone[0] if present else since
        paths = app.driver_commits()
        skipped = _first_of_each_query(paths, repartitions)
        return [path.stat().st_mtime for path in paths if path not in skipped and path.stat().st_mtime > floor]

    def committed() -> bool:
        status = app.status()
        if status.get("error"):  # the operator refused the change: nothing will come (its events say why)
            raise RuntimeError(f"the change was not applied: {status['error']}\n{app.diagnostics()}")
        driver = (status.get("run") or {}).get("driverPod")
        return driver not in (None, old) and (not present or old_driver_gone()) and bool(new_commits())

    present = old in driver_pods()  # not after a suspension
    checks = {"old_driver_gone": old_driver_gone} if present else {}
    checks |= {
        "new_driver_created": lambda: any(name != old for name in driver_pods()),
        "new_driver_running": new_running,
        "executor_running": new_executor_running,
        "first_batch": committed,
        **(extra or {}),
    }
    since = time.time()
    change(old)
    phases = _poll_phases(checks, since)
    first = min(new_commits()) - since
    phases["first_batch"] = first  # the commit file's own time, not the poll's
    if repartitions:
        phases["repartitioned"] = (
            min(path.stat().st_mtime for path in _first_of_each_query(app.driver_commits(), True)) - since
        )
    phases |= _last_batch_before(app, since, gone[0] if gone else since + first)
    status = app.core.read_namespaced_pod(_driver(app), app.namespace).status  # the new driver's
    started = status.start_time.timestamp() if status and status.start_time else None
    for name, seconds in _runtime_phases(status.pod_ip if status else None).items():
        if started is not None:  # the runtime counts from its process start, about the pod's start
            phases[name] = started - since + seconds
    return dict(sorted(phases.items(), key=lambda item: item[1]))


def _first_of_each_query(commits: list[Path], wanted: bool) -> set[Path]:
    """Each query's first of these commits (given in batch order, as `AppHandle.driver_commits` gives them), if
    `wanted`."""
    first: dict[str, Path] = {}
    for path in commits if wanted else []:
        first.setdefault(path.parents[1].name, path)  # <query>/commits/<batch>
    return set(first.values())


def _last_batch_before(app: scenario.AppHandle, since: float, moment: float) -> dict[str, float]:
    """The last batch committed before `moment` (the old driver gone, else the new driver's first batch), in
    seconds from `since`: the processing pause is `first_batch` minus this. Not a new driver's repartition batch."""
    earlier = [stamp for stamp in app.commit_times_after(since - 120) if stamp < moment]
    return {"last_batch_before": max(earlier) - since} if earlier else {}


def _backoff(restarts: dict[str, object]) -> dict[str, float]:
    """The restart backoff the operator decided on a failure it just recorded: seconds from the failure to
    `nextRetryAt` (gone already, or never set, when it restarted at once), and the consecutive failures behind it."""
    retry, failures = restarts.get("nextRetryAt"), restarts.get("failureTimes") or []
    waited = 0.0
    if isinstance(retry, str) and isinstance(failures, list) and failures:
        waited = max(0.0, (parse_time(retry) - parse_time(str(failures[-1]))).total_seconds())
    consecutive = restarts.get("consecutive")
    count = float(consecutive) if isinstance(consecutive, int) else 0.0
    return {"restart_backoff": waited, "consecutive_failures": count}


def _one_recovery(app: scenario.AppHandle) -> dict[str, float]:
    """Delete the running driver; the phases of its replacement, in seconds from the deletion, and the operator's
    restart backoff (`_backoff`, seen when it recorded the failure: the phase `failure_recorded`)."""
    before = (app.status().get("restarts") or {}).get("total", 0)
    backoff: dict[str, float] = {}

    def failure_recorded() -> bool:
        restarts = app.status().get("restarts") or {}
        if restarts.get("total", 0) <= before:
            return False
        backoff.update(_backoff(restarts))
        return True

    phases = _phases(
        app, lambda old: app.core.delete_namespaced_pod(old, app.namespace), {"failure_recorded": failure_recorded}
    )
    return phases | backoff


# Each recovery is the loss of a healthy run's driver: the driver has run longer than healthyAfter by the
# next deletion (it resets the backoff: a healthy run restarts at once), and the window allows every run.
# With the default 2m, every deletion after the first waited a doubling backoff (1, 2, 4, 8 s...) and the
# eleventh hit maxRestartsInWindow.
HEALTHY_RUN_POLICY = {"healthyAfter": "5s", "maxRestartsInWindow": 1000}
COUNTS = ("consecutive_failures",)  # entries of a run's phases that are counts, not seconds
LEGACY_START_ENV = {"name": "HEADRACE_JVM_START", "value": "spark-submit"}  # headrace.runtime.jvm's switch
# ... and Spark's and Hadoop's own defaults for what the runtime now sets otherwise (headrace.runtime.sparkconf:
# COLD_START_DEFAULTS, LOCAL_FS_CONF)
LEGACY_SPARK_CONF = {
    "spark.scheduler.minRegisteredResourcesRatio": "0.8",
    "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.LocalFileSystem",
    "spark.hadoop.fs.AbstractFileSystem.file.impl": "org.apache.hadoop.fs.local.LocalFs",
}


def _standby_waits(app: scenario.AppHandle) -> bool:
    """A standby beside the current driver waits at its script's first query start."""
    current = _driver(app)
    for pod in app.running(names.ROLE_DRIVER):
        if pod.metadata.labels.get(names.STANDBY) == "true" and pod.metadata.name != current:
            log = app.core.read_namespaced_pod_log(pod.metadata.name, app.namespace, container="driver")
            return "waiting to be promoted" in log
    return False


def _new_first_batch_events(app: scenario.AppHandle, seen: set[str], timeout: float = 30) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        new = [message for message in app.first_batch_events() if message not in seen]
        if new:
            return new
        time.sleep(1)
    return []


def _overrides(
    spark_conf: dict[str, str],
    legacy_start: bool = False,
    standby: bool = False,
    warmup: bool = True,
    example_policy: bool = False,
    **spec: object,
) -> dict[str, object]:
    """The bench app's spec on top of the example's: restarts of a healthy run at once (the example's own restart
    policy with `example_policy`), `spark_conf` added to its sparkConf, the previous cold path (`legacy_start`), a
    warm standby (with its warm-up query unless not `warmup`), and any other `spec` fields."""
    example = yaml.safe_load((REPOSITORY / "apps" / scenario.APP / "streamingapp.yaml").read_text())
    overrides: dict[str, object] = {}
    if not example_policy:
        overrides["restartPolicy"] = {**example["spec"]["restartPolicy"], **HEALTHY_RUN_POLICY}
    if legacy_start:
        driver = scenario.windowed_counts_manifest(Path())["spec"]["driver"]  # the same resources, plus the switch
        overrides["driver"] = {**driver, "env": [*driver.get("env", []), LEGACY_START_ENV]}
        spark_conf = {**LEGACY_SPARK_CONF, **spark_conf}
    if spark_conf:
        overrides["sparkConf"] = {**example["spec"].get("sparkConf", {}), **spark_conf}
    if standby:
        overrides["standby"] = {"enabled": True, "warmup": warmup}
    return {**overrides, **spec}


@contextlib.contextmanager
def _bench_app(target: Environment, setup: Setup, overrides: dict[str, object]) -> Iterator[scenario.AppHandle]:
    """The example deployed in `setup`'s configuration with `overrides`, once it committed a batch, under the
    producer."""
    with _deployed(target, setup, **overrides) as app, scenario.Writer(app.input, interval=setup.interval):
        yield app


def _steady(app: scenario.AppHandle, standby: bool = False, reset: bool = True) -> None:
    """Wait until the current driver runs steadily: batches keep coming, the backoff reset (unless not `reset`), a
    standby waits."""
    app.wait(app.driver_commits, 900, "a batch by the current driver")
    time.sleep(10)
    if reset:
        app.wait(lambda: not app.status()["restarts"].get("consecutive"), 120, "the backoff reset (healthyAfter)")
    if standby:
        app.wait(lambda: _standby_waits(app), 900, "a standby at its gate")


def _measured(
    app: scenario.AppHandle,
    label: str,
    measure: Callable[[], dict[str, float]],
    results: list[dict[str, float]],
    save: Path | None,
) -> None:
    """One measured run: its phases printed, added to `results` (written to `save`), the operator's account."""
    seen = set(app.first_batch_events())
    phases = measure()
    print(f"{label}: " + ", ".join(f"{k} {v:.1f}" for k, v in phases.items()), flush=True)
    results.append(phases)
    if save is not None:
        save.write_text(json.dumps(results, indent=1))
    for message in _new_first_batch_events(app, seen):
        print(f"  event FirstBatch: {message}", flush=True)  # the operator's account of the same change


def _recoveries(
    app: scenario.AppHandle, runs: int, standby: bool = False, save: Path | None = None, reset: bool = True
) -> list[dict[str, float]]:
    results: list[dict[str, float]] = []
    for number in range(1, runs + 1):
        _steady(app, standby, reset)
        _measured(app, f"recovery {number}", lambda: _one_recovery(app), results, save)
    return results


def recoveries(
    target: Environment,
    runs: int,
    spark_conf: dict[str, str],
    legacy_start: bool = False,
    standby: bool = False,
    *,
    warmup: bool = True,
    save: Path | None = None,
    setup: Setup = QUICKSTART,
    example_policy: bool = False,
) -> list[dict[str, float]]:
    """`runs` cold recoveries of one deployment in `setup`'s configuration under its producer (`spark_conf` added to
    the app's); the runs so far are written to `save` after each. With `example_policy`, the example's restart
    policy, each loss as soon as the new driver has run 10 s (the backoff of consecutive losses included)."""
    overrides = _overrides(spark_conf, legacy_start, standby, warmup, example_policy)
    with _bench_app(target, setup, overrides) as app:
        return _recoveries(app, runs, standby, save, reset=not example_policy)


BENCH_ENV = "BENCH_RUN"  # a driver variable nothing reads (HEADRACE_* are reserved): an upgrade and nothing else


def _upgrade(app: scenario.AppHandle, number: int) -> Callable[[str], object]:
    driver = app.app()["spec"]["driver"]
    env = [item for item in driver.get("env", []) if item.get("name") != BENCH_ENV]
    return lambda _: app.patch_spec({"driver": {"env": [*env, {"name": BENCH_ENV, "value": str(number)}]}})


def _partitions(app: scenario.AppHandle, number: int) -> Callable[[str], object]:
    """One state partition more each time, from the example's 8. Never fewer: a run restored with fewer partitions
    than its savepoint keeps the dropped ones' state directories, on which its next savepoint fails ("state/0/10
    has no state file for versions [11, ...]"), so 8 -> 12 -> 8 -> 12 stopped at the third change."""
    partitions = EXAMPLE_PARTITIONS + number
    return lambda _: app.patch_spec({"state": {"partitions": partitions}})


def _resume(app: scenario.AppHandle, number: int) -> Callable[[str], object]:
    """Suspend (not measured) and wait for it; the change is the resume."""
    app.patch_spec({"job": {"state": "suspended"}})
    app.wait(lambda: app.status().get("phase") == "Suspended", 900, "Suspended")
    return lambda _: app.patch_spec({"job": {"state": "running"}})


# Each kind: the app's upgradeMode, the change of run N (given the app; may prepare it first), whether the
# operator takes a savepoint before the new driver starts (its completion is a phase).
EXAMPLE_PARTITIONS = 8
TRANSITIONS: dict[str, tuple[str, Callable[[scenario.AppHandle, int], Callable[[str], object]], bool]] = {
    "savepoint-upgrade": ("savepoint", _upgrade, True),
    "last-state-upgrade": ("last-state", _upgrade, False),
    "partitions": ("savepoint", _partitions, True),
    "resume": ("savepoint", _resume, False),  # the suspension's savepoint is taken before the resume
}


def _savepoint_taken(app: scenario.AppHandle) -> Callable[[], bool]:
    before = app.status().get("latestSavepoint")
    return lambda: app.status().get("latestSavepoint") not in (None, before)


def transitions(
    target: Environment,
    kind: str,
    runs: int,
    cold: int = 0,
    spark_conf: dict[str, str] | None = None,
    *,
    save: Path | None = None,
    prewarmed: list[dict[str, float]] | None = None,
    setup: Setup = QUICKSTART,
) -> tuple[list[dict[str, float]], list[dict[str, float]]]:
    """`cold` cold recoveries, then `runs` transitions of `kind`, on one deployment in `setup`'s configuration under
    its producer (`spark_conf` added to the app's): each from the change of the spec to the first batch committed by
    the new driver. Returns the transitions' phases and the recoveries'; the runs so far are written to `save`
    (the recoveries to its name with `.cold.json`) after each. Given `prewarmed`, every second run is a pre-warmed
    upgrade, whose phases go there (and to `save`'s name with `.prewarmed.json`)."""
    mode, change_of, takes_savepoint = TRANSITIONS[kind]
    with _bench_app(target, setup, _overrides(spark_conf or {}, upgradeMode=mode)) as app:
        baseline = _recoveries(app, cold, save=save and save.with_suffix(".cold.json"))
        results: list[dict[str, float]] = []
        for number in range(1, runs + 1):
            _steady(app)
            change = change_of(app, number)
            warm = prewarmed is not None and number % 2 == 0
            if prewarmed is not None:  # applied without a restart; the next upgrade is pre-warmed or not by it
                app.patch_spec({"standby": {"prewarmUpgrades": warm}})
            extra = {"savepoint_taken": _savepoint_taken(app)} if takes_savepoint else None
            measure = functools.partial(_phases, app, change, extra, kind == "partitions")
            if warm and prewarmed is not None:
                warm_save = save and save.with_suffix(".prewarmed.json")
                _measured(app, f"{kind} {number} pre-warmed", measure, prewarmed, warm_save)
            else:
                _measured(app, f"{kind} {number}", measure, results, save)
    return results, baseline


def _median(results: list[dict[str, float]], name: str) -> float:
    return statistics.median([phases[name] for phases in results if name in phases])


def _summary(results: list[dict[str, float]], baseline: list[dict[str, float]] | None = None) -> None:
    names_seen = sorted({name for phases in results for name in phases}, key=lambda n: _median(results, n))
    for name in names_seen:
        values = sorted(phases[name] for phases in results if name in phases)
        p90 = values[min(len(values) - 1, round(0.9 * (len(values) - 1)))]
        unit = "" if name in COUNTS else " s"
        line = f"{name}: median {statistics.median(values):.1f}{unit}, p90 {p90:.1f}{unit}, n={len(values)}"
        if baseline and any(name in phases for phases in baseline):
            before = _median(baseline, name)
            line += f"; baseline median {before:.1f}{unit}, ratio {statistics.median(values) / before:.2f}"
        print(line, flush=True)


def main() -> None:
    """Print one line per figure."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--recovery", type=int, metavar="N", help="only cold recovery, N times")
    parser.add_argument(
        "--spark-conf", action="append", default=[], metavar="KEY=VALUE", help="add to the app's sparkConf"
    )
    parser.add_argument("--legacy-start", action="store_true", help="with --recovery: the previous cold path")
    parser.add_argument("--standby", action="store_true", help="with --recovery: with a warm standby driver")
    parser.add_argument(
        "--no-warmup", action="store_true", help="with --standby: the standby waits without its warm-up query"
    )
    parser.add_argument(
        "--transition", choices=sorted(TRANSITIONS), help="only this transition, --runs times on one deployment"
    )
    parser.add_argument("--prewarm", action="store_true", help="with --transition: every second upgrade pre-warmed")
    parser.add_argument("--runs", type=int, default=10, metavar="N", help="with --transition: how many (10)")
    parser.add_argument(
        "--cold", type=int, default=0, metavar="K", help="with --transition: K cold recoveries first, the baseline"
    )
    parser.add_argument(
        "--source", choices=quickstart.SOURCES, default=QUICKSTART.source, help="the app's input (the quick start's)"
    )
    parser.add_argument(
        "--state", choices=STATES, default=QUICKSTART.state, help="where its state lives (the quick start's bucket)"
    )
    parser.add_argument(
        "--interval", type=float, metavar="S", help="seconds between chunks of 120 clicks (1.5; 2 with files)"
    )
    parser.add_argument(
        "--example-restart-policy",
        action="store_true",
        help="with --recovery: the example's restart policy, losses in a row (the operator's backoff included)",
    )
    parser.add_argument("--json", type=Path, metavar="FILE", help="save the runs' phases")
    parser.add_argument("--baseline", type=Path, metavar="FILE", help="ratios against saved runs")
    options = parser.parse_args()
    spark_conf = dict(item.split("=", 1) for item in options.spark_conf)
    saved = json.loads(options.baseline.read_text()) if options.baseline else None
    default_interval = FILES_INTERVAL if options.source == "files" else QUICKSTART.interval
    setup = Setup(options.source, options.state, options.interval or default_interval)
    print(f"configuration: {setup.label}", flush=True)
    with tempfile.TemporaryDirectory(prefix="headrace-bench-") as temp, environment(Path(temp)) as target:
        if options.recovery:
            results = recoveries(
                target,
                options.recovery,
                spark_conf,
                options.legacy_start,
                options.standby,
                warmup=not options.no_warmup,
                save=options.json,
                setup=setup,
                example_policy=options.example_restart_policy,
            )
            _summary(results, saved)
            return
        if options.transition:
            prewarmed: list[dict[str, float]] = []
            results, cold = transitions(
                target,
                options.transition,
                options.runs,
                options.cold,
                spark_conf,
                save=options.json,
                prewarmed=prewarmed if options.prewarm else None,
                setup=setup,
            )
            if cold:
                print("cold recovery, same deployment:", flush=True)
                _summary(cold)
            print(f"{options.transition}:", flush=True)
            _summary(results, saved or cold)
            if options.prewarm:
                print(f"{options.transition}, pre-warmed (baseline: the ones above, not pre-warmed):", flush=True)
                _summary(prewarmed, results)
            return
        for name, value in run(target, setup).items():
            print(f"{name}: {value:.1f}", flush=True)


if __name__ == "__main__":
    main()
