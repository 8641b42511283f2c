"""Both metrics endpoints scraped from a running app on a real cluster: every series docs/metrics.md
promises is there, with values that make sense for what the app did.

The operator's /metrics is read from the pod holding the leader Lease and the driver's from the
driver pod (port `metrics`, 9464), both over the pod network, as Prometheus would.
"""

from __future__ import annotations

import http.client
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from headrace.api import names
from headrace.controller.metrics import PHASES, RESTART_REASONS, RESULTS, SAVEPOINT_RESULTS, SAVEPOINT_TRIGGERS
from headrace.core.timefmt import parse_time
from headrace.core.transitions import TRANSITIONS
from headrace.runtime import metrics as runtime_metrics
from testbed import build, scenario
from testbed.environment import deployed_example
from testbed.operator_pods import Samples, container_port, leader_pod, scrape

from .conftest import E2E

pytestmark = pytest.mark.e2e
METRICS_DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
FILES = 3
# Documented as "where the source reports it": the file source has no backlog to report.
NOT_FROM_A_FILE_SOURCE = {"headrace_query_source_backlog_records"}
NOT_FROM_A_FILE_SOURCE_OPERATOR = {"headrace_app_source_backlog"}  # the app's backlog, from the same reports
# Documented as "while the app has a savepoint": the module's first savepoint is its last test's.
NO_SAVEPOINT_YET = {"headrace_app_last_savepoint_age_seconds"}
WATERMARK_DELAY = 30.0  # the example's `--watermark 30 seconds` (testbed.scenario)
RECENT_SECONDS = 600.0  # the last batch ran within this long before the scrape
CLOCK_SLACK = 2.0  # the operator's and this process's clocks (one machine) and sub-second rounding


def documented(section: str) -> set[str]:
    """The metric names in the tables of one `## ...` section of docs/metrics.md."""
    text = METRICS_DOC.read_text().split(f"## {section}", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `(headrace_[a-z_]+)` \|", text, flags=re.MULTILINE))


def series(samples: Samples, name: str) -> list[tuple[dict[str, str], float]]:
    assert name in samples, f"{name} is missing from the scrape"
    return samples[name]


def by_label(samples: Samples, name: str, label: str) -> dict[str, float]:
    return {labels[label]: value for labels, value in series(samples, name)}


def sample_names(family: str, samples: Samples) -> set[str]:
    """The exported sample names of a documented family (a histogram's are _count, _sum, _bucket)."""
    return {name for name in samples if name == family or name.startswith(family + "_")}


@pytest.fixture(scope="module")
def running(e2e: E2E) -> Iterator[scenario.AppHandle]:
    """The windowed-counts example, running and past its first committed batch, then one more file: a
    batch after the first carries an event-time watermark (the first runs with none). Its autoscaler is passive."""
    # Passive autoscaling (recommend only, never acts): the operator then exports the app's recommendation too.
    with deployed_example(e2e, FILES, autoscaler={"mode": "passive"}) as app:
        app.wait(lambda: app.status().get("phase") == "Running", 300, "phase Running")
        app.wait(app.commits, 300, "the first committed batch")
        app.input.next_file()
        yield app


def _operator_samples(e2e: E2E, running: scenario.AppHandle) -> Samples:
    with e2e.api_client() as api:
        pod = running.wait(lambda: leader_pod(api), 60, "the operator pod holding the Lease")
    return scrape(pod.status.pod_ip, container_port(pod, "metrics"))


def by_labels(samples: Samples, name: str, *labels: str) -> dict[tuple[str, ...], float]:
    return {tuple(found[label] for label in labels): value for found, value in series(samples, name)}


def test_operator_metrics_from_the_leader(e2e: E2E, running: scenario.AppHandle) -> None:
    last_batch = running.wait(
        lambda: (running.status().get("progress") or {}).get("lastBatchTime"), 60, "status.progress.lastBatchTime"
    )
    samples = _operator_samples(e2e, running)
    scraped_at = time.time()
    conditional = NOT_FROM_A_FILE_SOURCE_OPERATOR | NO_SAVEPOINT_YET
    missing = sorted(name for name in documented("Operator metrics") - conditional if not sample_names(name, samples))
    assert not missing, f"documented but not exported by the operator: {missing}"
    assert series(samples, "headrace_operator_leader") == [({}, 1.0)]
    reconciles = by_label(samples, "headrace_reconciles_total", "result")
    assert set(reconciles) == set(RESULTS) and min(reconciles.values()) >= 0
    assert reconciles["success"] > 0
    (count,) = [value for _, value in series(samples, "headrace_reconcile_duration_seconds_count")]
    (total,) = [value for _, value in series(samples, "headrace_reconcile_duration_seconds_sum")]
    assert count >= reconciles["success"] and 0 < total / count < 30
    apps = by_label(samples, "headrace_apps", "phase")
    assert set(apps) == set(PHASES) and min(apps.values()) >= 0
    assert apps["Running"] >= 1, apps
    restarts = by_label(samples, "headrace_driver_restarts_total", "reason")
    assert set(restarts) == set(RESTART_REASONS) and min(restarts.values()) >= 0
    assert by_label(samples, "headrace_actions_total", "action")["EnsureDriver"] >= 1
    events = by_label(samples, "headrace_events_total", "type")
    assert set(events) == {"Normal", "Warning"} and events["Normal"] >= 1
    savepoints = by_labels(samples, "headrace_savepoints_total", "trigger", "result")
    assert set(savepoints) == {(trigger, result) for trigger in SAVEPOINT_TRIGGERS for result in SAVEPOINT_RESULTS}
    assert min(savepoints.values()) >= 0
    timed = by_label(samples, "headrace_savepoint_duration_seconds_count", "trigger")
    assert set(timed) == set(SAVEPOINT_TRIGGERS) and min(timed.values()) >= 0
    # This app was deployed while this operator led: its first driver's start was timed.
    transitions = by_label(samples, "headrace_transition_duration_seconds_count", "transition")
    assert set(transitions) == set(TRANSITIONS) and min(transitions.values()) >= 0
    assert transitions["deploy"] >= 1, transitions
    took = by_label(samples, "headrace_transition_duration_seconds_sum", "transition")["deploy"]
    assert 0 < took / transitions["deploy"] < 300, took
    ages = by_labels(samples, "headrace_app_last_batch_age_seconds", "namespace", "app")
    age = ages[(running.namespace, running.name)]
    # set at a reconciliation after the batch the status names (or a later one), before the scrape
    assert 0 <= age <= scraped_at - parse_time(last_batch).timestamp() + CLOCK_SLACK, (age, last_batch)
    assert age < RECENT_SECONDS


def _driver_samples(running: scenario.AppHandle) -> Samples:
    pod = running.wait(lambda: running.running(names.ROLE_DRIVER), 60, "the driver pod")[0]
    return scrape(pod.status.pod_ip, container_port(pod, "metrics"))


def test_driver_metrics_from_the_running_app(running: scenario.AppHandle) -> None:
    events = running.input.counted()
    rows = len(events)

    def caught_up() -> Samples | None:
        """A scrape once every query has read every input row (the counters say exactly how many)."""
        samples = _driver_samples(running)
        read = by_label(samples, "headrace_query_input_rows_total", "query")
        return samples if read and set(read.values()) == {float(rows)} else None

    samples = running.wait(caught_up, 180, f"every query to count {rows} input rows")
    missing = sorted(
        name for name in documented("Driver metrics") - NOT_FROM_A_FILE_SOURCE if not sample_names(name, samples)
    )
    assert not missing, f"documented but not exported by the driver: {missing}"
    queries = set(by_label(samples, "headrace_query_batches_total", "query"))
    assert len(queries) == 2, queries  # the example's tumbling and sliding queries
    for name in ("headrace_query_batches_total", "headrace_query_batch_duration_seconds"):
        assert all(value > 0 for value in by_label(samples, name, "query").values()), name
    for name in (
        "headrace_query_last_committed_batch_id",
        "headrace_query_state_rows",
        "headrace_query_input_rows_per_second",
        "headrace_query_processed_rows_per_second",
    ):
        assert all(value >= 0 for value in by_label(samples, name, "query").values()), name
    lags = by_label(samples, "headrace_query_watermark_lag_seconds", "query")
    assert set(lags) == queries, lags
    # lag = trigger time - watermark, the watermark being an event time we wrote minus 30 s (the example's delay)
    moments = [datetime.fromisoformat(event["event_time"].replace("Z", "+00:00")).timestamp() for event in events]
    now = time.time()
    for lag in lags.values():
        assert (
            (now - RECENT_SECONDS) - (max(moments) - WATERMARK_DELAY) <= lag <= now - (min(moments) - WATERMARK_DELAY)
        )
    state_memory = by_label(samples, "headrace_query_state_memory_bytes", "query")
    assert all(value >= 0 for value in state_memory.values()), state_memory
    savepoints = by_label(samples, "headrace_runtime_savepoints_total", "result")
    assert set(savepoints) == set(runtime_metrics.SAVEPOINT_RESULTS) and min(savepoints.values()) >= 0


def test_a_savepoint_is_counted_and_timed_by_trigger(e2e: E2E, running: scenario.AppHandle) -> None:
    """A manual savepoint (the trigger nonce): counted as manual/succeeded and timed; the last in the module,
    as it moves the app through Savepointing."""
    before = _operator_samples(e2e, running)
    counted = by_labels(before, "headrace_savepoints_total", "trigger", "result")[("manual", "succeeded")]
    running.patch_spec({"savepoints": {"triggerNonce": 1}})
    running.wait(lambda: (running.status().get("latestSavepoint") or {}).get("path"), 180, "the manual savepoint")
    samples = _operator_samples(e2e, running)
    savepoints = by_labels(samples, "headrace_savepoints_total", "trigger", "result")
    # at least: other apps on this shared operator may take savepoints meanwhile
    assert savepoints[("manual", "succeeded")] >= counted + 1, savepoints
    timed = by_label(samples, "headrace_savepoint_duration_seconds_count", "trigger")["manual"]
    took = by_label(samples, "headrace_savepoint_duration_seconds_sum", "trigger")["manual"]
    assert timed >= 1 and 0 < took / timed < 120, (timed, took)


def _ui_page(port: int) -> str | None:
    """The Spark UI's jobs page through the local forward (None while nothing answers)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/jobs/", timeout=10) as response:
            return str(response.read().decode(errors="replace"))
    except (OSError, http.client.HTTPException):
        return None


def test_the_ui_service_answers_across_a_restart(e2e: E2E, running: scenario.AppHandle, tmp_path: Path) -> None:
    """`headrace ui` forwards a local port to the Spark UI through the app's Service `<app>-ui`; the driver pod is
    deleted (a restart from the checkpoint) and the same command, still running, reaches the new driver's UI
    through the same Service. The last in the module: it restarts the app."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    before = running.status()["run"]
    service = running.core.read_namespaced_service(names.ui_service(running.name), running.namespace)
    kubectl = build.binary("kubectl")
    env = {**os.environ, "PATH": f"{kubectl.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    command = [sys.executable, "-m", "headrace.cli", "ui", running.name, "-n", running.namespace]
    command += ["--kubeconfig", str(e2e.kubeconfig), "--port", str(port), "--retry", "1"]
    output = (tmp_path / "ui.log").open("w")
    process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        page = running.wait(lambda: _ui_page(port), 120, "the Spark UI through headrace ui")
        assert "Spark Jobs" in page, page[:500]
        (driver,) = running.running(names.ROLE_DRIVER)
        running.core.delete_namespaced_pod(driver.metadata.name, running.namespace)
        running.wait(
            lambda: (run := running.status().get("run") or {}).get("attempt", 0) > before["attempt"] and run,
            120,
            "the next attempt",
        )
        running.wait(
            lambda: [pod for pod in running.running(names.ROLE_DRIVER) if pod.metadata.labels.get(names.WRITER)],
            300,
            "the new driver running the queries",
        )
        page = running.wait(lambda: _ui_page(port), 180, "the Spark UI of the new driver, through the same command")
        assert "Spark Jobs" in page, page[:500]
        assert process.poll() is None  # the one command served both drivers
        after = running.core.read_namespaced_service(names.ui_service(running.name), running.namespace)
        assert after.metadata.uid == service.metadata.uid and after.spec.cluster_ip == service.spec.cluster_ip
    finally:
        os.killpg(process.pid, signal.SIGINT)  # the command and its kubectl (one session, started here)
        process.wait(30)
        output.close()
        print((tmp_path / "ui.log").read_text()[-2000:])
