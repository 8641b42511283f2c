"""Lifecycle benchmark on the local cluster (or HEADRACE_E2E_KUBECONFIG): recovery, rescale, upgrade, suspend.

Runs the windowed-counts example with a steady trickle of input files and prints, from one run:
recovery time after driver loss, in-place rescale time (up and down) with the longest gap between
committed batches during it (against the median gap before) and the driver restarts it caused,
savepoint-based rescale downtime (a state partition change through a savepoint and an offline
repartition), savepoint and last-state upgrade downtime, and resume time. Every "downtime" is from
the change to the first batch committed by the new driver.
Run: `uv run python bench/lifecycle.py`.
"""

from __future__ import annotations

import itertools
import statistics
import tempfile
import time
from pathlib import Path

from headrace.api import names
from testbed import scenario
from testbed.environment import Environment, deployed_example, environment


def _first_commit_of_new_driver(app: scenario.AppHandle, moment: float, old_driver: str, timeout: float = 900) -> float:
    """Seconds from `moment` (wall clock) to the first batch committed by a driver other than `old_driver`."""

    def committed() -> list[Path]:
        run = app.status().get("run") or {}
        return app.driver_commits() if run.get("driverPod") not in (None, old_driver) else []

    return min(path.stat().st_mtime for path in app.wait(committed, timeout, "a batch by the new driver")) - moment


def _driver(app: scenario.AppHandle) -> str:
    return str((app.status().get("run") or {}).get("driverPod"))


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

            driver = _driver(app)
            lost = time.time()
            app.core.delete_namespaced_pod(driver, namespace)
            figures["recovery_after_driver_loss_s"] = _first_commit_of_new_driver(app, lost, driver)

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
            figures["savepoint_rescale_downtime_s"] = _first_commit_of_new_driver(app, partitions, driver)

            driver, upgrade = _driver(app), time.time()
            args = [*app.app()["spec"]["application"]["args"], "--trigger-seconds", "3"]
            app.patch_spec({"application": {"args": args}})
            figures["savepoint_upgrade_downtime_s"] = _first_commit_of_new_driver(app, upgrade, driver)

            driver, upgrade = _driver(app), time.time()
            args = [*args, "--trigger-seconds", "2"]
            app.patch_spec({"upgradeMode": "last-state", "application": {"args": args}})
            figures["last_state_upgrade_downtime_s"] = _first_commit_of_new_driver(app, upgrade, driver)

        app.patch_spec({"job": {"state": "suspended"}})
        app.wait(lambda: app.status().get("phase") == "Suspended", 900, "Suspended")
        app.input.next_file()
        driver, resumed = _driver(app), time.time()
        app.patch_spec({"job": {"state": "running"}})
        figures["resume_to_first_batch_s"] = _first_commit_of_new_driver(app, resumed, driver)
    return figures


def main() -> None:
    """Print one line per figure."""
    with tempfile.TemporaryDirectory(prefix="headrace-bench-") as temp, environment(Path(temp)) as target:
        for name, value in run(target).items():
            print(f"{name}: {value:.1f}", flush=True)


if __name__ == "__main__":
    main()
