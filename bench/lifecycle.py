"""Lifecycle benchmark on the local cluster (or HEADRACE_E2E_KUBECONFIG): recovery, rescale, upgrade, suspend.

Runs the windowed-counts example with a steady trickle of input files and prints, from one run:
recovery time after driver loss, in-place rescale time and the longest pause between committed
batches during it (against the median gap before), savepoint-based rescale downtime (a state
partition change through a savepoint and an offline repartition), savepoint upgrade downtime, and
suspend -> resume time. Every "downtime" is from the spec change to the first batch committed after it.
Run: `uv run python bench/lifecycle.py`.
"""

from __future__ import annotations

import itertools
import statistics
import tempfile
import time
from pathlib import Path

from headrace.api import names
from headrace.testbed import scenario
from headrace.testbed.environment import Environment, deployed_example, environment


def _first_commit_after(app: scenario.AppHandle, moment: float, timeout: float = 900) -> float:
    """Seconds from `moment` (wall clock) to the first batch committed after it."""
    app.wait(lambda: app.commits_after(moment), timeout, "a committed batch")
    return min(path.stat().st_mtime for path in app.commits_after(moment)) - moment


def _gaps(app: scenario.AppHandle, start: float, end: float) -> list[float]:
    stamps = sorted(path.stat().st_mtime for path in app.commits() if start <= path.stat().st_mtime <= end)
    return [later - earlier for earlier, later in itertools.pairwise(stamps)]


def run(target: Environment) -> dict[str, float]:
    """The whole scenario; returns the figures."""
    figures: dict[str, float] = {}
    with deployed_example(target, 3, upgradeMode="savepoint") as app:
        namespace = app.namespace
        app.wait(app.commits, 900, "the first batch")
        with scenario.Writer(app.input, interval=2.0):
            time.sleep(30)
            before = _gaps(app, time.time() - 30, time.time())
            figures["median_batch_gap_s"] = statistics.median(before) if before else float("nan")

            driver = app.running(names.ROLE_DRIVER)[0]
            lost = time.time()
            app.core.delete_namespaced_pod(driver.metadata.name, namespace)
            figures["recovery_after_driver_loss_s"] = _first_commit_after(app, lost)

            scaled = time.time()
            target.kubectl("scale", "sapp", scenario.APP, "-n", namespace, "--replicas=2")
            app.wait(lambda: len(app.running(names.ROLE_EXECUTOR)) == 2, 600, "two executors")
            figures["in_place_rescale_s"] = time.time() - scaled
            time.sleep(10)
            during = _gaps(app, scaled, time.time())
            figures["in_place_rescale_longest_pause_s"] = max(during) if during else float("nan")
            figures["in_place_rescale_driver_restarts"] = float(app.status()["restarts"]["total"] - 1)

            partitions = time.time()
            app.patch_spec({"state": {"partitions": 12}})
            app.wait(lambda: app.status().get("run", {}).get("number", 1) >= 2, 900, "the repartitioned run")
            figures["savepoint_rescale_downtime_s"] = _first_commit_after(app, partitions)

            upgrade = time.time()
            spec = app.app()["spec"]
            args = [*spec["application"]["args"], "--trigger-seconds", "3"]
            app.patch_spec({"application": {**spec["application"], "args": args}})
            app.wait(lambda: app.status().get("run", {}).get("number", 1) >= 3, 900, "the upgraded run")
            figures["savepoint_upgrade_downtime_s"] = _first_commit_after(app, upgrade)

        app.patch_spec({"job": {"state": "suspended"}})
        app.wait(lambda: app.status().get("phase") == "Suspended", 900, "Suspended")
        app.input.next_file()
        resumed = time.time()
        app.patch_spec({"job": {"state": "running"}})
        figures["resume_to_first_batch_s"] = _first_commit_after(app, resumed)
    return figures


def main() -> None:
    """Print one line per figure."""
    with tempfile.TemporaryDirectory(prefix="headrace-bench-") as temp, environment(Path(temp)) as target:
        for name, value in run(target).items():
            print(f"{name}: {value:.1f}", flush=True)


if __name__ == "__main__":
    main()
