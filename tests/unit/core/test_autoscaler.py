"""The autoscaler's decision as a table, and a simulated load ramp run through it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

import pytest

from headrace.core.autoscaler import (
    AutoscalerMemory,
    Decision,
    Reading,
    Sample,
    Signals,
    batch_overhead,
    decide_scaling,
    fitted_overheads,
    limits,
    overhead_at,
    reading,
    recommend,
    sample_between,
    window_stats,
)
from headrace.core.observation import BatchTotals, DriverProgress
from tests.unit.builders import T0, spec

START = T0 - timedelta(hours=1)  # the driver started long before: only the window matters
NOW = T0


def autoscaled(**autoscaler: Any) -> Any:
    overrides = {"mode": "active", **autoscaler}
    return spec(autoscaler=overrides)


def load(  # noqa: PLR0917 - the table reads best positionally
    rate: float,
    capacity: float,
    executors: int = 2,
    backlog: float = 0.0,
    growth: float = 0.0,
    minutes: float = 3.0,
    end: datetime = NOW,
) -> list[Sample]:
    """One sample every 5 s over `minutes` up to `end`: `rate` rows/s read, processed at `capacity` rows/s of batch
    time; the backlog ends at `backlog` after growing by `growth` records/s."""
    count = int(minutes * 12)
    busy = 5.0 * rate / capacity if capacity else 0.0
    assert busy <= 5.0, "an app reads no faster than it processes"
    return [
        Sample(
            at=end - timedelta(seconds=5 * (count - 1 - index)),
            seconds=5.0,
            input_rows=int(rate * 5),
            busy_seconds=busy,
            backlog=backlog - growth * 5 * (count - 1 - index),
            executors=executors,
        )
        for index in range(count)
    ]


def signals(samples: list[Sample], executors: int = 2, **fields: Any) -> Signals:
    return Signals(
        executors=executors,
        requested_executors=fields.pop("requested", executors),
        samples=samples,
        driver_started_at=fields.pop("started", START),
        **fields,
    )


SETTLED = AutoscalerMemory(executors=2, size_since=START)
# 4000 rows/s arriving at 2 executors that process 2000 (1000 each): the backlog grew to 360000 over the window.
# Needed: 4000 / 0.7 = 5714 rows/s, plus (360000 + 4000 x 30 s rescaling) / 300 s catching up = 1600: 8 executors
OVER = load(2000, 2000, backlog=360000, growth=2000)


def run(app_spec: Any, observed: Signals, memory: AutoscalerMemory = SETTLED) -> tuple[Decision, AutoscalerMemory]:
    return decide_scaling(app_spec, memory, observed, NOW)


def test_window_aggregates() -> None:
    stats = window_stats(load(rate=1000, capacity=2000, backlog=600, growth=2))
    assert stats.capacity == pytest.approx(2000)
    assert stats.busy == pytest.approx(0.5)
    assert stats.input_rate == pytest.approx(1002)  # read plus the backlog's growth
    assert stats.backlog == 600


CASES: list[tuple[str, Any, Signals, AutoscalerMemory, str, int]] = [
    ("off", spec(), signals(OVER), SETTLED, "Off", 2),
    (
        "during a transition",
        autoscaled(),
        signals(OVER, transition=True),
        SETTLED,
        "TransitionInProgress",
        2,
    ),
    ("while executors change", autoscaled(), signals(OVER, requested=4), SETTLED, "ExecutorsChanging", 2),
    (
        "before the window fills at this size",
        autoscaled(),
        signals(OVER),
        AutoscalerMemory(executors=2, size_since=NOW - timedelta(minutes=3, seconds=30)),
        "WindowFilling",
        2,
    ),
    (
        "after a driver start",
        autoscaled(),
        signals(OVER, started=NOW - timedelta(minutes=2)),
        SETTLED,
        "WindowFilling",
        2,
    ),
    (
        "a new size starts its window",
        autoscaled(),
        signals(load(2000, 2000, executors=3), executors=3),
        SETTLED,
        "WindowFilling",
        3,
    ),
    ("within the band", autoscaled(), signals(load(1400, 2000)), SETTLED, "WithinBand", 2),
    ("no batch at this size", autoscaled(), signals(load(1400, 2000, executors=1)), SETTLED, "NoBatches", 2),
    ("scale up", autoscaled(), signals(OVER), SETTLED, "ScaleUp", 8),
    # 300000 more records of backlog: + 1000 rows/s
    (
        "scale up with a larger backlog",
        autoscaled(),
        signals(load(2000, 2000, backlog=660000, growth=2000)),
        SETTLED,
        "ScaleUp",
        9,
    ),
    ("capped by maxExecutors", autoscaled(maxExecutors=4), signals(OVER), SETTLED, "ScaleUp", 4),
    ("at maxExecutors", autoscaled(maxExecutors=2), signals(OVER), SETTLED, "MaxExecutors", 2),
    ("below minExecutors", autoscaled(minExecutors=3), signals(load(1400, 2000)), SETTLED, "OutOfBounds", 3),
    # driver 1 core + 5 executors x 1 core
    ("capped by the cores quota", autoscaled(quota={"maxCores": 6}), signals(OVER), SETTLED, "ScaleUp", 5),
    # driver 1433 MiB + 3 executors x 1433 MiB
    (
        "capped by the memory quota",
        autoscaled(quota={"maxMemory": "6000m"}),
        signals(OVER),
        SETTLED,
        "ScaleUp",
        3,
    ),
    (
        "capped by the Kafka partitions",
        autoscaled(),
        signals(OVER, source_partitions=4),
        SETTLED,
        "ScaleUp",
        4,
    ),
    (
        "at the Kafka partitions",
        autoscaled(),
        signals(OVER, source_partitions=2),
        SETTLED,
        "SourcePartitions",
        2,
    ),
    (
        "stateful: capped by the state partitions",
        spec(autoscaler={"mode": "active"}, state={"checkpointDir": "s3a://b/c", "partitions": 6}),
        signals(OVER, stateful=True),
        SETTLED,
        "ScaleUp",
        6,
    ),
    (
        "stateful, at the state partitions: repartition",
        spec(autoscaler={"mode": "active"}, state={"checkpointDir": "s3a://b/c", "partitions": 2}),
        signals(OVER, stateful=True),
        SETTLED,
        "RepartitionNeeded",
        8,
    ),
    (
        "blocked above the size an ineffective scale-up was undone to",
        autoscaled(),
        signals(OVER),
        replace(SETTLED, blocked_above=2),
        "ScaleUpBlocked",
        2,
    ),
    (
        "rate limited",
        autoscaled(maxActionsPerHour=2),
        signals(OVER),
        replace(SETTLED, action_times=(NOW - timedelta(minutes=50), NOW - timedelta(minutes=10))),
        "RateLimited",
        2,
    ),
    (
        "an action older than an hour is forgotten",
        autoscaled(maxActionsPerHour=1),
        signals(OVER),
        replace(SETTLED, action_times=(NOW - timedelta(minutes=61),)),
        "ScaleUp",
        8,
    ),
    ("scale-down delayed", autoscaled(), signals(load(400, 2000)), SETTLED, "ScaleDownDelayed", 2),
    (
        "scale down after the delay",
        autoscaled(minExecutors=1),
        signals(load(400, 2000)),
        replace(SETTLED, scale_down_since=NOW - timedelta(minutes=10), scale_down_to=1),
        "ScaleDown",
        1,
    ),
    (
        "scale down to the most executors wanted during the delay",
        autoscaled(),
        signals(load(200, 2000, executors=4), executors=4),
        AutoscalerMemory(executors=4, size_since=START, scale_down_since=NOW - timedelta(minutes=11), scale_down_to=3),
        "ScaleDown",
        3,
    ),
    (
        "no scale-down below what the backlog needs",
        autoscaled(),
        signals(load(300, 2000, executors=4, backlog=150000), executors=4),
        replace(SETTLED, executors=4, scale_down_since=NOW - timedelta(minutes=11), scale_down_to=1),
        "ScaleDown",
        2,  # 300 / 0.7 + 150000 / 300 s = 929 rows/s at 500 per executor; without the backlog 1 would do
    ),
    (
        "no scale-down while the backlog grows",
        autoscaled(),
        signals(load(300, 2000, executors=4, backlog=3000, growth=10), executors=4),
        replace(SETTLED, executors=4),
        "BacklogGrowing",
        4,
    ),
    (
        "idle: scale down after the delay",
        autoscaled(),
        signals(load(0, 0)),
        replace(SETTLED, scale_down_since=NOW - timedelta(hours=1)),
        "ScaleDown",
        1,
    ),
    ("stuck: a backlog and no rows", autoscaled(), signals(load(0, 0, backlog=500)), SETTLED, "NoThroughput", 2),
    ("passive mode recommends", autoscaled(mode="passive"), signals(OVER), SETTLED, "ScaleUp", 8),
    ("batches back to back", autoscaled(), signals(OVER, back_to_back=True), SETTLED, "BackToBackBatches", 2),
    (
        "keeping up at an unknown fixed cost",
        autoscaled(),
        signals([replace(sample, batches=1) for sample in load(1900, 2000)]),
        SETTLED,
        "FixedCostUnknown",
        2,
    ),
    (
        "keeping up at a known fixed cost",
        autoscaled(),
        signals([replace(sample, batches=1) for sample in load(1900, 2000)]),
        replace(SETTLED, overheads=((2, 0.5),)),
        "ScaleUp",
        3,
    ),
    (
        "keeping up, batches not counted: sized on the busy time",
        autoscaled(),
        signals(load(1900, 2000)),
        SETTLED,
        "ScaleUp",
        3,
    ),
]


@pytest.mark.parametrize(
    ("case", "app_spec", "observed", "memory", "reason", "executors"), CASES, ids=[case[0] for case in CASES]
)
def test_decision(  # noqa: PLR0917 - one parameter per column of the table
    case: str, app_spec: Any, observed: Signals, memory: AutoscalerMemory, reason: str, executors: int
) -> None:
    decision, _ = run(app_spec, observed, memory)
    assert (decision.reason, decision.executors) == (reason, executors), decision.message
    assert decision.action == {"ScaleUp": "scale", "ScaleDown": "scale", "OutOfBounds": "scale"}.get(
        reason, "repartition" if reason == "RepartitionNeeded" else "hold"
    )
    assert decision.message


def test_repartition_names_the_partitions() -> None:
    app_spec = spec(autoscaler={"mode": "active"}, state={"checkpointDir": "s3a://b/c", "partitions": 2})
    decision, _ = run(app_spec, signals(OVER, stateful=True))
    assert decision.partitions == 8 and "repartition to 8" in decision.message


@pytest.mark.parametrize("allow", [False, True])
def test_a_repartition_is_recommended_and_uses_no_action(allow: bool) -> None:
    """This version leaves the repartition (a savepoint and a new run) to a person, allowRepartition or not: it
    takes none of the hour's actions and restarts no window."""
    app_spec = spec(
        autoscaler={"mode": "active", "allowRepartition": allow}, state={"checkpointDir": "s3a://b/c", "partitions": 2}
    )
    decision, memory = run(app_spec, signals(OVER, stateful=True))
    assert decision.action == "repartition" and memory.action_times == ()


def test_an_action_restarts_the_window_and_counts_in_the_hour() -> None:
    decision, memory = run(autoscaled(), signals(OVER))
    assert decision.reason == "ScaleUp"
    assert memory.action_times == (NOW,) and memory.size_since == NOW
    assert memory.check is not None and memory.check.capacity_before == pytest.approx(2000)
    again, _ = decide_scaling(autoscaled(), memory, signals(OVER), NOW + timedelta(seconds=15))
    assert again.reason == "WindowFilling"


def test_passive_mode_remembers_no_action_so_its_recommendation_stays() -> None:
    app_spec, memory = autoscaled(mode="passive"), SETTLED
    for minute in range(30):
        now = NOW + timedelta(minutes=minute)
        decision, memory = decide_scaling(
            app_spec, memory, signals(load(2000, 2000, backlog=360000, growth=2000, end=now)), now
        )
        assert (decision.reason, decision.executors) == ("ScaleUp", 8)
    assert memory.action_times == () and memory.check is None


def test_a_scale_down_is_cancelled_by_load_coming_back() -> None:
    app_spec = autoscaled()
    _, memory = run(app_spec, signals(load(400, 2000)))
    assert memory.scale_down_since == NOW
    later = NOW + timedelta(minutes=5)
    decision, memory = decide_scaling(app_spec, memory, signals(load(1400, 2000, end=later)), later)
    assert decision.reason == "WithinBand" and memory.scale_down_since is None


def test_an_ineffective_scale_up_is_undone_and_not_repeated() -> None:
    app_spec = autoscaled()
    decision, memory = run(app_spec, signals(OVER))
    assert (decision.reason, decision.executors) == ("ScaleUp", 8)
    # at 8 executors the capacity barely moved (a bottleneck more executors cannot relieve), the backlog remains
    _, memory = decide_scaling(app_spec, memory, signals([], executors=8), NOW + timedelta(seconds=30))  # registered
    later = NOW + timedelta(minutes=5)
    stuck = signals(load(2100, 2100, executors=8, backlog=400000, end=later), executors=8)
    decision, memory = decide_scaling(app_spec, memory, stuck, later)
    assert (decision.reason, decision.executors) == ("IneffectiveScaleUp", 2), decision.message
    assert memory.blocked_above == 2
    _, memory = decide_scaling(app_spec, memory, signals([]), later + timedelta(seconds=30))  # back at 2
    after = later + timedelta(minutes=5)
    decision, memory = decide_scaling(
        app_spec, memory, signals(load(2000, 2000, backlog=500000, growth=2000, end=after)), after
    )
    assert (decision.reason, decision.executors) == ("ScaleUpBlocked", 2)


def test_an_effective_scale_up_is_kept() -> None:
    app_spec = autoscaled()
    _, memory = run(app_spec, signals(OVER))
    _, memory = decide_scaling(app_spec, memory, signals([], executors=8), NOW + timedelta(seconds=30))
    later = NOW + timedelta(minutes=5)
    faster = signals(load(4000, 6500, executors=8, backlog=20000, end=later), executors=8)
    decision, memory = decide_scaling(app_spec, memory, faster, later)
    assert decision.reason != "IneffectiveScaleUp" and memory.blocked_above is None and memory.check is None


def test_limits_name_the_tightest_bound() -> None:
    app_spec = autoscaled(maxExecutors=20, quota={"maxCores": 9})
    assert limits(app_spec, signals([])).reason == "QuotaReached"
    assert limits(app_spec, signals([])).ceiling == 8
    assert limits(app_spec, signals([], source_partitions=3)).ceiling == 3


# ------------------------------------------------------------------------------- simulated ramp --


@dataclass
class SimulatedApp:
    """A micro-batch app: a processing-time trigger, a fixed cost per batch and a cost per row that more executors
    share (up to the state partitions); executors requested register `rescale_seconds` later."""

    executors: int
    per_executor: float = 1000.0  # rows per second of batch time per executor
    overhead: float = 1.0  # seconds per batch
    trigger: float = 5.0
    partitions: int = 8
    rescale_seconds: float = 30.0
    backlog: float = 0.0
    clock: float = 0.0  # seconds since T0
    requested: int = 0
    registers_at: float | None = None
    executors_since: float = 0.0
    samples: list[Sample] = field(default_factory=list)
    last_end: float = 0.0

    def __post_init__(self) -> None:
        self.requested = self.executors

    def rescale(self, executors: int) -> None:
        self.requested = executors
        self.registers_at = self.clock + self.rescale_seconds

    def run_until(self, until: float, arrived: Any) -> None:
        """Run batches up to `until`; `arrived(a, b)` is the input arriving between a and b."""
        while self.clock < until:
            if self.registers_at is not None and self.clock >= self.registers_at:
                self.executors, self.registers_at = self.requested, None
                self.executors_since = self.clock
            start = self.clock
            rows = self.backlog
            duration = self.overhead + rows / (self.per_executor * min(self.executors, self.partitions))
            end = start + duration
            self.backlog = arrived(start, end)
            self.samples.append(
                Sample(
                    at=T0 + timedelta(seconds=end),
                    seconds=end - self.last_end,
                    input_rows=int(rows),
                    busy_seconds=duration,
                    backlog=self.backlog,
                    executors=self.executors,
                    batches=1,
                )
            )
            self.last_end = end
            following = max(start + self.trigger, end)
            self.backlog += arrived(end, following)
            self.clock = following


def piecewise(phases: list[tuple[float, float]]) -> Any:
    """Arrivals of a load of `rate` rows/s from each phase's start (minutes) to the next's."""

    def rate_integral(until: float) -> float:
        total = 0.0
        for index, (start_minute, rate) in enumerate(phases):
            start = start_minute * 60
            end = phases[index + 1][0] * 60 if index + 1 < len(phases) else math.inf
            total += rate * max(0.0, min(until, end) - start)
        return total

    return lambda a, b: rate_integral(b) - rate_integral(a)


@dataclass(frozen=True)
class Action:
    minute: float
    reason: str
    executors: int


def app_reading(app: SimulatedApp, now: datetime) -> Reading:
    """What the runtime's status document would say at `now`: its batch totals so far."""
    totals = BatchTotals(
        batches=len(app.samples),
        input_rows=sum(sample.input_rows for sample in app.samples),
        busy_seconds=sum(sample.busy_seconds for sample in app.samples),
    )
    return Reading(now, totals, app.backlog, app.executors, T0 + timedelta(seconds=app.executors_since))


def simulate(
    phases: list[tuple[float, float]],
    minutes: float,
    executors: int,
    sampling: str = "batches",
    app: SimulatedApp | None = None,
    **autoscaler: Any,
) -> tuple[list[Action], list[tuple[float, float, int]]]:
    """Poll the app like the operator: decide_scaling, and rescale when told. Samples are the app's batches (polls every
    15 s), or the differences of its batch totals between two polls (every 30 s, as the operator reads them).
    Returns the actions and (minute, backlog, executors) at every poll."""
    app_spec = spec(autoscaler={"mode": "active", **autoscaler}, state={"checkpointDir": "s3a://b/c", "partitions": 8})
    app, arrived = app or SimulatedApp(executors), piecewise(phases)
    app.backlog = arrived(0, 0)
    memory, actions, trace = AutoscalerMemory(), [], []
    poll, interval = 0.0, 15.0 if sampling == "batches" else 30.0
    previous: Reading | None = None
    polled: list[Sample] = []
    while poll < minutes * 60:
        poll += interval
        app.run_until(poll, arrived)
        now = T0 + timedelta(seconds=poll)
        current = app_reading(app, now)
        if previous is not None and (sample := sample_between(previous, current)) is not None:
            polled.append(sample)
        previous = current
        samples = app.samples if sampling == "batches" else polled
        observed = Signals(
            executors=app.executors,
            requested_executors=app.requested,
            samples=[sample for sample in samples if sample.at > now - timedelta(minutes=10)],
            driver_started_at=T0,
            stateful=True,
        )
        decision, memory = decide_scaling(app_spec, memory, observed, now)
        if decision.action == "scale":
            actions.append(Action(poll / 60, decision.reason, decision.executors))
            app.rescale(decision.executors)
        trace.append((poll / 60, app.backlog, app.executors))
    return actions, trace


SAMPLINGS = ["batches", "polls"]


@pytest.mark.parametrize("sampling", SAMPLINGS)
def test_steady_load_never_rescales(sampling: str) -> None:
    """Two hours at a load the app's size handles within the band (busy 3.5 s of every 5 s): no rescale."""
    actions, _ = simulate([(0, 1000)], minutes=120, executors=2, sampling=sampling)
    assert actions == []


@pytest.mark.parametrize("sampling", SAMPLINGS)
def test_steady_load_with_bursts_never_rescales(sampling: str) -> None:
    """A load swinging +-15% every minute stays within the band: no rescale."""
    phases = [(minute, 1000 * (1.15 if minute % 2 else 0.85)) for minute in range(120)]
    actions, _ = simulate(phases, minutes=120, executors=2, sampling=sampling)
    assert actions == []


@pytest.mark.parametrize("sampling", SAMPLINGS)
def test_a_ramp_scales_up_absorbs_the_backlog_holds_and_scales_down_after_the_delay(sampling: str) -> None:
    """Steady 1000 rows/s, a 4x step at minute 20, steady 4000 until minute 50, back to 1000 until minute 110."""
    actions, trace = simulate([(0, 1000), (20, 4000), (50, 1000)], minutes=110, executors=2, sampling=sampling)
    before = [action for action in actions if action.minute < 20]
    assert before == [], "no rescale under the first steady load"
    up = [action for action in actions if 20 <= action.minute < 50 and action.reason == "ScaleUp"]
    assert up, actions
    assert up[0].minute < 22, "the step is followed at once (the input rate of the window's last third)"
    assert up[0].executors >= 4, "and sized for it"
    peak, peaked = max((backlog, minute) for minute, backlog, _ in trace if 20 < minute < 50)
    # one trigger's arrivals (5 s x 4000 rows/s) wait between two batches: that is no backlog
    absorbed = [minute for minute, backlog, _ in trace if peaked < minute < 50 and backlog <= 4000 * 5]
    # sized on the step's first half minute, the first scale-up may fall short; a second follows once its window
    # fills (stabilization 1m + window 3m): batches 2 -> 5 -> 7 executors, absorbed at 26.5; polls 2 -> 8, at 22.5
    assert absorbed and absorbed[0] < 28, "the backlog is absorbed within 8 minutes of the step"
    settled = [action for action in actions if 35 <= action.minute < 50]
    assert settled == [], f"no flapping under the steady 4x load: {settled} (peak backlog {peak:.0f})"
    down = [action for action in actions if action.minute >= 50]
    assert down and all(action.reason == "ScaleDown" for action in down), down
    assert down[0].minute >= 50 + 10, "scale-down only after scaleDownDelay"
    assert trace[-1][2] <= 3, "back near the initial size"
    assert all(backlog <= 4000 * 5 for minute, backlog, _ in trace if minute > 55), "no backlog after scaling down"
    per_hour = [action for action in actions if action.minute < 60]
    assert len(per_hour) <= 6


@pytest.mark.parametrize("sampling", SAMPLINGS)
def test_batches_of_mostly_fixed_cost_are_not_read_as_load(sampling: str) -> None:
    """Batches that cost 3 s of a 5 s trigger whatever their rows (issue 27's e2e): 250 rows/s at 1 executor is
    busy 85% of the time, 1000 rows/s falls behind. The step scales up; back at 250 rows/s the naive utilization at
    4 executors (batches 3.3 s of 5 s, 0.66) would hold there for good, but with the fixed cost fitted over the
    step's batches the app reads as nearly idle and returns to 1 executor after the delay."""
    app = SimulatedApp(1, overhead=3.0)
    actions, trace = simulate(
        [(0, 250), (10, 1000), (25, 250)], minutes=70, executors=1, sampling=sampling, app=app, minExecutors=1
    )
    assert [action for action in actions if action.minute < 10] == [], "the fixed cost alone is no reason to scale"
    ups = [action for action in actions if 10 <= action.minute < 25]
    assert ups and all(action.reason == "ScaleUp" for action in ups), actions
    assert not [minute for minute, backlog, _ in trace if 18 < minute < 25 and backlog > 1000 * 5], "absorbed"
    downs = [action for action in actions if action.minute >= 25]
    assert downs and all(action.reason == "ScaleDown" for action in downs), actions
    assert downs[0].minute >= 25 + 10, "after scaleDownDelay"
    assert trace[-1][2] == 1, f"back to 1 executor: {actions}"
    assert len(actions) <= 4, actions


OVERHEAD_CASES: list[tuple[str, list[tuple[int, float, int | None, int]], float | None]] = [
    # (rows per batch, mean batch seconds, batches, executors) per sample -> the fixed cost fitted
    ("a load change: 1 s + 1 ms per row", [(1000, 2.0, 4, 1), (4000, 5.0, 4, 1)], 1.0),
    ("rows per batch too alike to tell", [(1000, 2.0, 4, 1), (1400, 2.4, 4, 1)], None),
    ("longer batches with fewer rows: noise", [(1000, 3.0, 4, 1), (4000, 2.0, 4, 1)], None),
    ("a negative intercept is no fixed cost", [(1000, 0.5, 4, 1), (4000, 5.0, 4, 1)], 0.0),
    ("batches not counted", [(1000, 2.0, None, 1), (4000, 5.0, None, 1)], None),
]
OVERHEAD_IDS = [case[0] for case in OVERHEAD_CASES]


@pytest.mark.parametrize(("rows", "expected"), [case[1:] for case in OVERHEAD_CASES], ids=OVERHEAD_IDS)
def test_the_fixed_cost_of_a_batch_is_fitted_where_rows_per_batch_differ(
    rows: list[tuple[int, float, int | None, int]], expected: float | None
) -> None:
    fitted = batch_overhead(_batches(rows))
    assert fitted == (pytest.approx(expected) if expected is not None else None)


def _batches(rows: list[tuple[int, float, int | None, int]]) -> list[Sample]:
    """(rows per batch, mean batch seconds, batches, executors) per 30 s sample."""
    return [
        Sample(at(index * 30), 30.0, per_batch * (batches or 1), duration * (batches or 1), 0.0, executors, batches)
        for index, (per_batch, duration, batches, executors) in enumerate(rows)
    ]


AT_1 = [(800, 6.8, 3, 1), (3200, 9.2, 3, 1)]  # 1 executor: 6 s fixed + 1 ms per row
AT_3 = [(800, 4.27, 4, 3), (3200, 5.07, 4, 3)]  # 3 executors: 4 s fixed + 1 ms per row over 3
PER_COUNT_CASES: list[
    tuple[str, list[tuple[int, float, int | None, int]], dict[int, float], int | None, int, float | None]
] = [
    # (samples, remembered fits, tasks, executors asked about) -> the fixed cost there
    ("before a scale-up: fitted at 1 over a load change", AT_1, {}, 8, 1, 6.0),
    ("after a scale-up: the new count fitted on its own", AT_3, {1: 6.0}, 8, 3, 4.0),
    ("after a scale-up: the count left keeps its fit", AT_3, {1: 6.0}, 8, 1, 6.0),
    ("a size change alone is not fitted across counts", [(3200, 9.2, 3, 1), (3200, 5.07, 4, 3)], {}, 8, 1, None),
    ("a count never seen, below the fitted one: its task waves (8 / 3)", [], {3: 3.0}, 8, 1, 8.0),
    ("a count never seen, tasks unknown: its task slots (3 / 1)", [], {3: 3.0}, None, 1, 9.0),
    ("a count never seen, above the fitted one: kept", [], {1: 6.0}, 8, 3, 6.0),
    ("a count never seen, between two fitted: on their line against the waves", [], {1: 6.0, 4: 3.0}, 8, 2, 4.0),
    ("a count never seen, beyond two fitted: on their line", [], {1: 6.0, 2: 4.0}, 8, 4, 3.0),
    ("two fits falling with more waves: noise, their mean", [], {1: 3.0, 4: 5.0}, 8, 2, 4.0),
    ("too few samples at a count: its remembered fit stays", [(800, 4.27, 4, 3)], {3: 4.2}, 8, 3, 4.2),
    ("too few samples at a count: derived from another", [*AT_1, (800, 4.27, 4, 3)], {}, 8, 3, 6.0),
    ("nothing fitted: none", [(800, 4.27, 4, 3)], {}, 8, 3, None),
]


@pytest.mark.parametrize(
    ("rows", "remembered", "tasks", "executors", "expected"),
    [case[1:] for case in PER_COUNT_CASES],
    ids=[case[0] for case in PER_COUNT_CASES],
)
def test_the_fixed_cost_is_per_executor_count(
    rows: list[tuple[int, float, int | None, int]],
    remembered: dict[int, float],
    tasks: int | None,
    executors: int,
    expected: float | None,
) -> None:
    """A batch's fixed cost is mostly per task (measured: 1 executor ran the ramp app's 20 tasks one by one), so it is
    fitted per executor count, and derived for a count without a fit by the per-task model."""
    fitted = fitted_overheads(_batches(rows), remembered)
    cost = overhead_at(executors, fitted, 1, tasks)
    assert cost == (pytest.approx(expected, abs=0.01) if expected is not None else None)


@pytest.mark.parametrize(
    ("overheads", "executors"),
    [(((1, 4.0), (3, 1.0)), 2), (((3, 1.0),), 1)],
    ids=["1 executor's own fit: its fixed cost leaves too little", "1 executor derived from 3's fit"],
)
def test_a_scale_down_is_sized_with_the_fixed_cost_at_the_smaller_count(
    overheads: tuple[tuple[int, float], ...], executors: int
) -> None:
    """300 rows/s at 3 executors in one 5 s batch each (1 s fixed + 1500 rows at 1000 rows/s per executor): idle, so
    fewer will do. 1 executor would run every batch 4 s fixed (fitted there): 200 rows/s left of the 429 needed, so 2
    (1.6 s fixed, on the line through the two fits); derived from 3's fit alone (2.7 s) 1 executor keeps 467."""
    idle = [
        Sample(NOW - timedelta(seconds=5 * index), 5.0, 1500, 1.5, 0.0, 3, 1) for index in reversed(range(36))
    ]  # fmt: skip
    memory = replace(SETTLED, executors=3, overheads=overheads, scale_down_since=NOW - timedelta(minutes=11))
    decision, _ = run(autoscaled(), signals(idle, executors=3, stateful=True), memory)
    assert (decision.reason, decision.executors) == ("ScaleDown", executors), decision.message


def test_the_status_keeps_the_fixed_cost_per_count_and_reads_an_older_one() -> None:
    """batchOverheads holds the fits per count, batchOverheadSeconds the cost at the current count; an older status
    (one batchOverheadSeconds, no batchOverheads) is read as the fit at its measuredExecutors."""
    totals = BatchTotals(100, 100000, 300.0)
    progress = DriverProgress(registered_executors=1, requested_executors=1, source_backlog=0.0, totals=totals)
    first = recommend(autoscaled(), None, progress, START, NOW)
    assert first is not None
    older = first.model_copy(update={"measuredExecutors": 3, "batchOverheadSeconds": 3.0, "batchOverheads": []})
    older = type(first).model_validate(older.model_dump(exclude={"batchOverheads"}))
    later = NOW + timedelta(seconds=30)
    status = recommend(autoscaled(), older, replace(progress, totals=BatchTotals(106, 100480, 318.0)), START, later)
    assert status is not None
    assert [(record.executors, record.seconds) for record in status.batchOverheads] == [(3, 3.0)]
    assert status.batchOverheadSeconds == pytest.approx(9.0)  # at 1 executor: from 3 executors (tasks unknown: 3 / 1)


def test_the_fixed_cost_leaves_the_rows_their_own_capacity() -> None:
    """4 batches of 5000 rows in 20 s, each 4.5 s of which 4 s fixed: 10000 rows/s of batch time beyond the fixed
    cost, and a fifth of the wall clock left for rows."""
    stats = window_stats([Sample(NOW, 20.0, 20000, 18.0, 0.0, 2, 4)], overhead=4.0)
    assert stats.capacity == pytest.approx(10000)
    assert stats.available == pytest.approx(0.2)
    assert stats.busy == pytest.approx(0.9)


def test_an_app_busy_with_its_fixed_cost_is_not_scaled_up() -> None:
    """1000 rows/s in 5 s batches of 4.6 s: saturated (0.92) read naively; with 4 s of each batch fixed, the rows
    (8333 rows/s of batch time) need 0.6 of the 1 s a trigger leaves them: within the band."""
    slow = [replace(sample, busy_seconds=4.6, batches=1) for sample in load(1000, 2000)]
    naive, _ = run(autoscaled(), signals(slow))
    assert naive.reason == "FixedCostUnknown", "keeping up, with no fixed cost fitted yet: no scale-up on busy time"
    behind, _ = run(autoscaled(), signals([replace(sample, backlog=5000.0) for sample in slow]))
    assert behind.reason == "ScaleUp", "a backlog is a reason, fixed cost or not"
    decision, memory = run(autoscaled(), signals(slow), replace(SETTLED, overheads=((2, 4.0),)))
    assert decision.reason == "WithinBand", decision
    assert decision.utilization == pytest.approx(0.6)
    assert memory.overheads == ((2, 4.0),), "kept while the window has nothing to fit on"
    assert "4.0 s of each batch fixed" in decision.message


# ------------------------------------------------------------------------- readings and samples --


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def reading_at(
    seconds: float, batches: int, rows: int, busy: float, *, executors: int = 2, since: float = -600
) -> Reading:
    return Reading(at(seconds), BatchTotals(batches, rows, busy), 50.0, executors, at(since))


def test_a_sample_is_the_difference_of_two_readings() -> None:
    sample = sample_between(reading_at(0, 10, 5000, 12.0), reading_at(30, 16, 8000, 20.5))
    assert sample == Sample(
        at=at(30), seconds=30.0, input_rows=3000, busy_seconds=8.5, backlog=50.0, executors=2, batches=6
    )


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (reading_at(0, 10, 5000, 12.0), reading_at(30, 2, 800, 2.0)),  # a new driver: its counters start over
        (reading_at(0, 10, 5000, 12.0), reading_at(30, 16, 8000, 20.5, executors=3, since=20)),  # rescaled between
        (reading_at(0, 10, 5000, 12.0, executors=3), reading_at(30, 16, 8000, 20.5, executors=3, since=10)),
        (reading_at(30, 10, 5000, 12.0), reading_at(30, 10, 5000, 12.0)),  # the same call twice
    ],
)
def test_no_sample_across_a_new_driver_or_size(before: Reading, after: Reading) -> None:
    assert sample_between(before, after) is None


def test_a_reading_needs_the_runtimes_counters() -> None:
    progress = DriverProgress(registered_executors=2, source_backlog=7.0, totals=BatchTotals(1, 2, 3.0))
    assert reading(progress, NOW) == Reading(NOW, BatchTotals(1, 2, 3.0), 7.0, 2, None)
    assert reading(replace(progress, totals=None), NOW) is None


def _polled(batches: int, busy: float) -> list[Sample]:
    """One minute as two 30 s polls, each with `batches` batches of 1 row/s in all, busy `busy` of each second."""
    return [
        Sample(at=NOW - timedelta(seconds=30 * index), seconds=30.0, input_rows=30, busy_seconds=30 * busy,
               backlog=0.0, executors=1, batches=batches)
        for index in (1, 0)
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("batches", "reason"), [(1, "FewBatches"), (2, "FewBatches"), (3, "ScaleUp"), (None, "ScaleUp")]
)
def test_a_window_of_a_few_slow_batches_is_not_sized_on(batches: int | None, reason: str) -> None:
    """Measured on the cluster: a new driver's first slow batches (1 row/s, in batches 105% of the time) alone
    scaled an app from 1 to 3 executors before any load. Fewer than MIN_BATCHES batches with rows: a hold; samples
    from before batches were counted (None) are sized on as before."""
    app_spec = spec(autoscaler={"mode": "active", "metricsWindow": "60s", "maxExecutors": 3})
    memory = AutoscalerMemory(executors=1, size_since=START)
    decision, _ = decide_scaling(app_spec, memory, signals(_polled(batches, 1.05), executors=1), NOW)  # type: ignore[arg-type]
    assert decision.reason == reason, decision.message
