"""`kubectl drain` of the driver's node on the multi-node cluster (issue 23): a handover, not a crash.

The app's PodDisruptionBudget refuses the eviction of its writing driver, so the drain retries; the cordon tells the
operator to warm the next driver on the other worker while the old one keeps processing, then to stop the old one
at a batch boundary and promote the new one (the same run, its next attempt); the drain then finds the driver gone
and completes. The processing pause is the longest gap between committed batches around the move; the sink then
holds every event exactly once.
"""

from __future__ import annotations

import time

import pytest

from headrace.api import names
from testbed import scenario
from testbed.environment import Environment
from testbed.kind.apps import (
    DRAIN_REFUSED,
    committing_app,
    current_driver,
    drain_node,
    event_reasons,
    longest_pause,
)
from testbed.kind.cluster import PodmanKindCluster

from .apps import assert_every_event_counted_once

pytestmark = pytest.mark.e2e

DRAIN_TIMEOUT = 300


def test_a_drained_nodes_driver_moves_prewarmed_and_the_budget_holds_the_drain_until_then(
    kind_cluster: PodmanKindCluster, headrace: Environment
) -> None:
    with committing_app(headrace) as app:
        app.wait(
            lambda: (driver := current_driver(app)) is not None and driver.metadata.labels.get(names.WRITER) == "true",
            120,
            "the writer",
        )
        with scenario.Writer(app.input):
            old = current_driver(app)
            node = old.spec.node_name
            began = time.time()
            code, output = drain_node(kind_cluster, node, DRAIN_TIMEOUT)
            drained = time.time() - began
            assert code == 0, output
            assert DRAIN_REFUSED in output, f"the drain was never held by the budget:\n{output}"
            # The log names an attempt's pod before the pod exists: wait for the pod it names.
            new = app.wait(lambda: current_driver(app), 120, "the driver pod the status names")
            assert new.metadata.name != old.metadata.name and new.spec.node_name != node
            run = app.status()["run"]
            assert (run["number"], run["attempt"]) == (1, 2), run  # the same checkpoint: moved, not restarted
            moved = {"DriverMoving", "UpgradePrewarmed", "StandbyPromoted"}
            app.wait(lambda: moved <= event_reasons(app), 60, f"the events {sorted(moved)}; the drain said:\n{output}")
            app.wait(app.driver_commits, 120, "a batch by the moved driver")
            pause = longest_pause(app.commit_times_after(began - 10))
            print(f"drain of {node}: {drained:.0f} s; longest pause between batches around the move: {pause:.1f} s")
        assert_every_event_counted_once(app)
