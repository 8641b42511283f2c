"""Chaos on the local cluster (issue 13), the short version: the quick start's example on Kafka with a producer,
one fault of each kind back to back at random moments (testbed.faults: driver pod deleted, driver SIGKILL,
executor deleted, operator leader SIGKILL, API server stopped, S3 server stopped, driver frozen with SIGSTOP,
operator restart during a savepoint). After each, an independent read of the sink: no window twice, no count
wrong, none missing behind the newest window it holds; no fault may need a person. Windows the app has not
emitted yet after a fault (it lags the producer for a while) are judged at the end: after the producer's flush,
once the app has caught up, the sink must hold every produced event exactly once.
The order's seed is printed; HEADRACE_CHAOS_SEED replays it. The long run with figures is bench/chaos.py.

Cost: 8 faults one after another take 12-13 minutes on the 2 loaded cores (three of them wait for a new driver
to start and commit: 75-180 s each), more than the suite's budget allows, so the module runs only with
HEADRACE_CHAOS=1 (`HEADRACE_CHAOS=1 uv run pytest tests/e2e/test_chaos.py`).
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator

import pytest

from testbed import chaos, faults

from .conftest import E2E

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(600),
    pytest.mark.skipif(
        os.environ.get("HEADRACE_CHAOS") != "1", reason="12-13 min: set HEADRACE_CHAOS=1 to run the chaos module"
    ),
]
OUTAGE_SECONDS = 30.0
SEED = int(os.environ.get("HEADRACE_CHAOS_SEED") or random.randrange(1_000_000))  # noqa: S311 - printed, replayable
SCHEDULE = faults.schedule(1, SEED, pauses=(1.0, 5.0))


@pytest.fixture(scope="module")
def figures() -> chaos.Figures:
    return chaos.Figures()


@pytest.fixture(scope="module")
def run(e2e: E2E, figures: chaos.Figures) -> Iterator[chaos.Chaos]:
    if e2e.control_plane is None or e2e.object_store is None:
        pytest.skip("the chaos suite stops the local cluster's API and S3 servers (not HEADRACE_E2E_KUBECONFIG)")
    print(f"chaos seed {SEED} (HEADRACE_CHAOS_SEED): {[fault.kind for fault in SCHEDULE]}")
    with chaos.chaos_app(e2e) as app:
        runner = chaos.Chaos(e2e, app, outage_seconds=OUTAGE_SECONDS, recovery_timeout=300, stall_timeout=180)
        runner.start_producing()
        try:
            yield runner
        finally:
            runner.stop_producing()
            print("\n".join(chaos.summary(figures)))
            runner.settle()


@pytest.mark.parametrize("fault", SCHEDULE, ids=[fault.kind.split(" (")[0].replace(" ", "-") for fault in SCHEDULE])
def test_the_fault_is_survived_with_nothing_duplicated_wrong_or_lost(
    run: chaos.Chaos, figures: chaos.Figures, fault: faults.Fault
) -> None:
    outcome = run.one(fault)
    figures.outcomes.append(outcome)
    print(chaos.describe(outcome))
    assert outcome.check is not None and outcome.check.ok, chaos.describe(outcome)
    assert not outcome.person, f"a person had to step in: {outcome.person} ({outcome.note})"
    assert outcome.survived


def test_once_caught_up_the_sink_holds_every_produced_event_exactly_once(
    run: chaos.Chaos, figures: chaos.Figures
) -> None:
    assert {outcome.kind for outcome in figures.outcomes} == set(faults.KINDS), "run the whole module"
    figures.final = run.final_check()
    assert figures.final.ok, chaos.describe(chaos.Outcome("final check", None, check=figures.final))
    assert figures.final.records == len(run.app.input.counted())
