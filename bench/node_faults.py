"""Node faults on the three-node kind cluster (issue 23): the driver's worker powered off, partitioned from the
control plane while its driver keeps running, or drained, `--runs` times each, cold (the next driver starts once
the old one is fenced: its Lease expired, its pod force-deleted) or with a warm standby (`--standby`).

The app is the windowed-counts example as the multi-node tests deploy it (tests/multinode): its input, output and
checkpoint on the share every node mounts, a producer adding a file of clicks every 2 s throughout. Kafka and the
S3 bucket are not on the kind cluster yet, so these are not the quick start's figures (bench/lifecycle.py measures
those on the single-node cluster); they are what a node's loss adds on top of a driver's.

Per run: `first batch`, seconds from the fault to the first batch the next driver committed; `next driver made`
(cold), when the operator created it; for a drain, `drain` (kubectl drain's whole run, held by the app's
PodDisruptionBudget until the move) and `longest pause` between committed batches around it. At the end the sink
is checked: every window of the input once, with its exact count.

Run: `PYTHONPATH=. uv run python bench/node_faults.py --runs 10 [--standby] [--faults power-off,drain]` (cluster up
about 5 min, then 2-3 min a fault on 2 loaded cores); where others share the machine, under
`flock /work/logs/kind.lock`.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.lifecycle import _overrides, _standby_waits, _summary
from testbed import procs, scenario
from testbed.environment import Environment
from testbed.kind.apps import committing_app, current_driver, drain_node, longest_pause
from testbed.kind.cluster import PodmanKindCluster, running_cluster
from testbed.kind.headrace import control_plane_node, headrace_on_kind
from testbed.sink import wait_for_every_window

RECOVERY_TIMEOUT = 600
DRAIN_TIMEOUT = 300
Fault = Callable[[PodmanKindCluster, scenario.AppHandle], dict[str, float]]


def _recovery(app: scenario.AppHandle, old: str, since: float) -> dict[str, float]:
    """Seconds from `since` to the first batch of a driver other than `old`, and to its pod's creation (when the
    operator made it after `since`: a promoted standby was made before)."""
    phases = {"first batch": app.first_commit_of_new_driver(since, old, timeout=RECOVERY_TIMEOUT)}
    made = app.wait(lambda: current_driver(app), 120, "the driver the status names").metadata.creation_timestamp
    if made.timestamp() > since:
        phases["next driver made"] = made.timestamp() - since
    return phases


def power_off(cluster: PodmanKindCluster, app: scenario.AppHandle) -> dict[str, float]:
    """The driver's node killed with everything on it; powered on again (and Ready) after the recovery."""
    old = current_driver(app)
    lost = time.time()
    cluster.power_off(old.spec.node_name)
    try:
        return _recovery(app, old.metadata.name, lost)
    finally:
        cluster.power_on(old.spec.node_name)


def partition(cluster: PodmanKindCluster, app: scenario.AppHandle) -> dict[str, float]:
    """The driver's node cut off from the control plane while its driver runs on; healed after the recovery, then
    the node's old pod left to its kubelet."""
    old = current_driver(app)
    cut = time.time()
    cluster.partition(old.spec.node_name, control_plane_node(cluster))
    try:
        return _recovery(app, old.metadata.name, cut)
    finally:
        cluster.heal(old.spec.node_name)


def drain(cluster: PodmanKindCluster, app: scenario.AppHandle) -> dict[str, float]:
    """`kubectl drain` of the driver's node, uncordoned after it."""
    old = current_driver(app)
    began = time.time()
    code, output = drain_node(cluster, old.spec.node_name, DRAIN_TIMEOUT)
    if code != 0:
        raise RuntimeError(f"kubectl drain failed:\n{output}")
    drained = time.time() - began
    phases = _recovery(app, old.metadata.name, began)
    app.wait(lambda: len(app.commit_times_after(began + phases["first batch"])) >= 2, 120, "batches after the move")
    return {**phases, "drain": drained, "longest pause": longest_pause(app.commit_times_after(began - 10))}


FAULTS: dict[str, Fault] = {"power-off": power_off, "partition": partition, "drain": drain}


def _steady(cluster: PodmanKindCluster, app: scenario.AppHandle, standby: bool) -> None:
    """Both workers take new pods again (a node just healed or powered on keeps its taints for some seconds), the
    current driver commits, the backoff of the last loss has reset, and a standby (if any) waits."""
    cluster.wait_workers_schedulable()
    app.wait(app.driver_commits, 900, "a batch by the current driver")
    app.wait(lambda: not app.status()["restarts"].get("consecutive"), 300, "the backoff reset (healthyAfter)")
    if standby:
        app.wait(lambda: _standby_waits(app), 900, "a standby at its gate")


def run(
    target: Environment, cluster: PodmanKindCluster, faults: list[str], runs: int, *, standby: bool, save: Path | None
) -> dict[str, list[dict[str, float]]]:
    """Every fault `runs` times on one deployment, then the sink check; the runs so far written to `save`."""
    results: dict[str, list[dict[str, float]]] = {fault: [] for fault in faults}
    with committing_app(target, **_overrides({}, standby=standby)) as app:
        with scenario.Writer(app.input):
            for number in range(1, runs + 1):
                for fault in faults:
                    _steady(cluster, app, standby)
                    phases = FAULTS[fault](cluster, app)
                    print(f"{fault} {number}: " + ", ".join(f"{k} {v:.1f}" for k, v in phases.items()), flush=True)
                    results[fault].append(phases)
                    if save is not None:
                        save.write_text(json.dumps(results, indent=1))
        expected = scenario.expected_tumbling_counts(app.input.counted())
        app.input.flush()
        counted = wait_for_every_window(app, expected, timeout=600)
        wrong = {key: (counted.get(key), count) for key, count in expected.items() if counted.get(key) != count}
        print(f"sink: {len(expected)} windows, {sum(expected.values())} events, wrong or missing: {wrong}", flush=True)
    return results


def main() -> None:
    """Print each run's phases, then per fault the median and p90 of each."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=10, metavar="N", help="runs of each fault (10)")
    parser.add_argument("--faults", default=",".join(FAULTS), help=f"comma-separated, of {', '.join(FAULTS)}")
    parser.add_argument("--standby", action="store_true", help="with a warm standby driver")
    parser.add_argument("--json", type=Path, metavar="FILE", help="save the runs' phases")
    options = parser.parse_args()
    faults = options.faults.split(",")
    if unknown := set(faults) - set(FAULTS):
        parser.error(f"unknown faults {sorted(unknown)}: choose from {', '.join(FAULTS)}")
    print(f"configuration: kind, 3 nodes, files on the shared directory, {'standby' if options.standby else 'cold'}")
    with (
        procs.terminated_as_interrupt(),
        tempfile.TemporaryDirectory(prefix="headrace-node-bench-") as temp,
        running_cluster(Path(temp)) as cluster,
        headrace_on_kind(cluster) as target,
    ):
        results = run(target, cluster, faults, options.runs, standby=options.standby, save=options.json)
    for fault, phases in results.items():
        print(f"{fault}:", flush=True)
        _summary(phases)


if __name__ == "__main__":
    main()
