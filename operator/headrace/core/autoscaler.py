"""The autoscaler's decision: from a window of the app's own signals, hold, scale to N, or recommend a repartition.

Owns: the model (input rate, processing capacity at the current size, backlog to catch up, what more executors
can use, quotas), its safeguards (no decision during a transition or before the window fills, delayed
scale-downs, undoing an ineffective scale-up and not repeating it, at most N actions an hour), and the memory
the next decision needs (``AutoscalerMemory``, kept by the caller between decisions).
Never: I/O, reading the clock (``now`` is an argument), Kubernetes or Spark types.

The model, per decision (docs/autoscaler.md explains it with its options):

- a batch costs a fixed time whatever its rows (planning, task launches, the state store's and the sink's commits)
  plus a time per row. The fixed part is mostly per task, so it shrinks as executors are added (the batch's tasks
  run in fewer waves): it is fitted per executor count, over the window's batches at that count when they differ
  in rows (the intercept of batch duration against rows per batch), and remembered per count for windows whose
  batches do not. A count with no fit yet gets it derived from the fitted counts by the per-task model
  (`overhead_at`: their task waves);
- utilization = (input rate + backlog / catchUpDuration) / (processing capacity x available share), where the
  input rate is the rows read per second plus the backlog's growth (the higher of the window's and its last
  third's, so that a step in the load is sized for at once), the processing capacity the rows the app's batches
  processed per second of batch time beyond their fixed cost, over the batches at the current size, and the
  available share the part of the wall clock the fixed costs leave (an idle app with slow batches is idle);
- executors needed: the fewest n whose capacity, capacity per executor x n x available share at n (with the
  fixed cost at n), reaches input rate / targetUtilization + (backlog + input rate x rescaleTime) /
  catchUpDuration; within minExecutors..maxExecutors, the quota and what more executors can use (the state
  partitions of a stateful app, else the sources' partitions); beyond the state partitions, a repartition.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Literal

from headrace.api.models import (
    AutoscalerCheck,
    AutoscalerOverhead,
    AutoscalerReading,
    AutoscalerSample,
    AutoscalerStatus,
    StreamingAppSpec,
)
from headrace.core.durations import parse_duration
from headrace.core.observation import BatchTotals, DriverProgress
from headrace.core.quantities import spark_memory_mib
from headrace.core.timefmt import format_time, parse_time
from headrace.core.validation import app_cores, app_memory_mib

HOUR = timedelta(hours=1)
RECENT_SHARE = 1 / 3  # the input rate is the higher of the window's and of its last third's
MIN_BATCHES = 5  # fewer batches with rows in the window: no decision on them (one slow batch is not a load)
OVERHEAD_SPREAD = 1.5  # the fixed cost is fitted only when the window's rows per batch span this ratio
MIN_SHARE = 0.1  # the fixed cost leaves at least this share of the batch time and of the wall clock
MOST_EXECUTORS = 1000  # the executors needed are looked for up to this many (maxExecutors' own bound)

ScalingAction = Literal["hold", "scale", "repartition"]


@dataclass(frozen=True)
class Sample:
    """What the app's queries did over one interval that ended at `at` (one micro-batch, or the batches between
    two polls of the driver), summed over its queries."""

    at: datetime
    seconds: float  # the interval's length, wall clock
    input_rows: int  # rows the queries read in it
    busy_seconds: float  # time the queries spent running batches in it
    backlog: float | None  # records waiting in the sources at its end (Kafka: latest minus committed offsets)
    executors: int  # executors registered while it ran
    batches: int | None = None  # batches that ended in it (None: not counted)


@dataclass(frozen=True)
class Reading:
    """The driver's cumulative batch counters at one status call (`DriverProgress`), the source of samples."""

    at: datetime
    totals: BatchTotals
    backlog: float | None
    executors: int
    executors_since: datetime | None  # since when that many are registered


def reading(progress: DriverProgress, at: datetime) -> Reading | None:
    """A reading of a driver's answer at `at`; None when it lacks the counters (a runtime from before them)."""
    if progress.totals is None or progress.registered_executors is None:
        return None
    return Reading(
        at, progress.totals, progress.source_backlog, progress.registered_executors, progress.executors_since
    )


def sample_between(before: Reading, after: Reading) -> Sample | None:
    """What the app did between two readings; None when they do not measure one size of one driver (the counters
    went back: a new driver; the executors changed in between)."""
    earlier, later = before.totals, after.totals
    if after.at <= before.at or later.batches < earlier.batches or later.input_rows < earlier.input_rows:
        return None
    if after.executors != before.executors or (after.executors_since or after.at) > before.at:
        return None
    return Sample(
        at=after.at,
        seconds=(after.at - before.at).total_seconds(),
        input_rows=later.input_rows - earlier.input_rows,
        busy_seconds=max(0.0, later.busy_seconds - earlier.busy_seconds),
        backlog=after.backlog,
        executors=after.executors,
        batches=later.batches - earlier.batches,
    )


@dataclass(frozen=True)
class Signals:
    """What the caller observed of the running app, besides its samples."""

    executors: int  # registered now
    requested_executors: int  # requested of the driver now (differs from `executors` while a rescale runs)
    samples: Sequence[Sample]  # oldest first; those outside the window are ignored
    driver_started_at: datetime  # nothing before it (and the stabilization interval after it) is used
    transition: bool = False  # an upgrade, restart, savepoint or other operation is underway
    source_partitions: int | None = None  # most partitions of a query's sources (Kafka), if known
    stateful: bool = False  # a query keeps state: spec.state.partitions bounds its parallelism
    back_to_back: bool = False  # a query has no processing-time trigger: its batches run back to back


@dataclass(frozen=True)
class ScaleUpCheck:
    """A scale-up whose effect is checked once the window at the new size fills."""

    from_executors: int
    to_executors: int
    capacity_before: float  # rows per second the app could process at from_executors, its fixed costs paid


@dataclass(frozen=True)
class AutoscalerMemory:
    """What the decision remembers between calls (the caller keeps it, e.g. in the app's status)."""

    executors: int | None = None  # the size the window was measured at
    size_since: datetime | None = None  # since when the app has had that size
    action_times: tuple[datetime, ...] = ()  # actions within the last hour
    scale_down_since: datetime | None = None  # since when the app has wanted fewer executors, without a break
    scale_down_to: int = 0  # the most executors it wanted since then
    check: ScaleUpCheck | None = None
    blocked_above: int | None = None  # no scale-up beyond this size (an ineffective one was undone)
    overheads: tuple[tuple[int, float], ...] = ()  # (executors, seconds a batch costs whatever its rows), last fitted


@dataclass(frozen=True)
class Decision:
    """What to do now and why: `reason` is a CamelCase word (for Events and metrics), `message` a sentence."""

    action: ScalingAction
    executors: int  # the size to have (the current one for hold)
    reason: str
    message: str
    utilization: float | None = None
    needed_executors: int | None = None  # what the load needs, before bounds, caps and quotas
    partitions: int | None = None  # for repartition: the state partitions recommended


@dataclass(frozen=True)
class WindowStats:
    """The window's aggregates."""

    seconds: float
    input_rate: float  # rows per second arriving: read plus backlog growth
    capacity: float  # rows per second of batch time beyond the batches' fixed cost (0: no rows processed)
    busy: float  # batch time per wall-clock second
    backlog: float  # at the window's end
    backlog_growth: float  # records per second
    overhead: float = 0.0  # seconds a batch costs whatever its rows
    available: float = 1.0  # the share of the wall clock the batches' fixed costs leave for rows
    batch_rate: float = 0.0  # counted batches per wall-clock second

    @property
    def rows_processed(self) -> bool:
        return self.capacity > 0


def batch_overhead(samples: Sequence[Sample]) -> float | None:
    """The seconds a batch costs whatever its rows, at the one executor count the samples were taken at: the
    intercept of their mean batch duration against their rows per batch (least squares, each sample weighted by its
    batches), at most the shortest mean batch. Rows per batch differ across a change of the load, so a fit needs one
    in the samples. None when the fixed cost cannot be told apart from the cost per row: batches not counted, fewer
    than two samples with rows, rows per batch spanning less than OVERHEAD_SPREAD, or longer batches not the ones
    with more rows."""
    points = [
        (sample.input_rows / sample.batches, sample.busy_seconds / sample.batches, sample.batches)
        for sample in samples
        if sample.batches and sample.input_rows > 0
    ]
    if len(points) < 2 or max(rows for rows, _, _ in points) < OVERHEAD_SPREAD * min(rows for rows, _, _ in points):
        return None
    weight = sum(batches for _, _, batches in points)
    mean_rows = sum(rows * batches for rows, _, batches in points) / weight
    mean_duration = sum(duration * batches for _, duration, batches in points) / weight
    spread = sum(batches * (rows - mean_rows) ** 2 for rows, _, batches in points)
    together = sum(batches * (rows - mean_rows) * (duration - mean_duration) for rows, duration, batches in points)
    if together <= 0:
        return None
    intercept = mean_duration - together / spread * mean_rows
    return min(max(intercept, 0.0), *(duration for _, duration, _ in points))


def fitted_overheads(samples: Sequence[Sample], remembered: Mapping[int, float]) -> dict[int, float]:
    """The fixed cost of a batch per executor count: `remembered`, updated by a fit over the samples taken at each
    count (`batch_overhead`; a count whose samples cannot be fitted keeps what was remembered for it). Never fitted
    across counts: the fixed cost is mostly per task, so batches at another count have another one."""
    fitted = dict(remembered)
    for executors in sorted({sample.executors for sample in samples}):
        fit = batch_overhead([sample for sample in samples if sample.executors == executors])
        if fit is not None:
            fitted[executors] = fit
    return fitted


def task_waves(executors: int, cores: int, tasks: int | None) -> float:
    """The waves a stage of `tasks` tasks runs in on `executors` x `cores` task slots; with the tasks unknown, one
    task per slot (the waves then shrink as the slots grow: 1 / slots)."""
    slots = max(executors * cores, 1)
    return math.ceil(tasks / slots) if tasks else 1 / slots


def overhead_at(executors: int, fitted: Mapping[int, float], cores: int, tasks: int | None) -> float | None:
    """The fixed cost of a batch at `executors`: fitted at that count, else derived from the fitted counts by the
    per-task model, a batch's tasks launched, run and committed in fewer waves on more task slots (`task_waves`).

    From one fitted count (the nearest, the larger on a tie), all of its cost is taken as per task: scaled by the
    ratio of the task waves at the two counts, but never below the fitted cost (at more executors the cost is kept:
    how much of it is per task is not known yet, and a scale-up sized on a shrink that does not come falls short,
    while one that finds the cost shrunk has headroom). An estimate until the count gets its own fit: on the loaded
    test node 1 executor's cost was about 1.5 times 3 executors', where the waves of the ramp app's 8 state
    partitions say 2.7. From two or more fitted counts, the cost is a part fixed plus a part per wave: the line
    through them against their waves (least squares; a line falling with more waves is noise: their mean), at least
    0. None: nothing fitted yet."""
    if executors in fitted:
        return fitted[executors]
    if not fitted:
        return None
    points = [(task_waves(count, cores, tasks), cost) for count, cost in fitted.items()]
    waves = task_waves(executors, cores, tasks)
    if len({wave for wave, _ in points}) < 2:  # a line needs two
        nearest = min(fitted, key=lambda count: (abs(count - executors), -count))
        return fitted[nearest] * max(waves / task_waves(nearest, cores, tasks), 1.0)
    mean_waves = sum(wave for wave, _ in points) / len(points)
    mean_cost = sum(cost for _, cost in points) / len(points)
    spread = sum((wave - mean_waves) ** 2 for wave, _ in points)
    slope = max(sum((wave - mean_waves) * (cost - mean_cost) for wave, cost in points) / spread, 0.0)
    return max(mean_cost + slope * (waves - mean_waves), 0.0)


def window_stats(samples: Sequence[Sample], overhead: float = 0.0) -> WindowStats:
    """Aggregate samples (at least one), `overhead` seconds of each counted batch being its fixed cost."""
    seconds = sum(sample.seconds for sample in samples)
    rows = sum(sample.input_rows for sample in samples)
    busy = sum(sample.busy_seconds for sample in samples)
    fixed = overhead * sum(sample.batches or 0 for sample in samples)
    per_row_busy = max(busy - fixed, busy * MIN_SHARE)
    backlogs = [(sample.at, sample.backlog) for sample in samples if sample.backlog is not None]
    growth = 0.0
    if len(backlogs) >= 2 and backlogs[-1][0] > backlogs[0][0]:
        growth = (backlogs[-1][1] - backlogs[0][1]) / (backlogs[-1][0] - backlogs[0][0]).total_seconds()
    read_rate = rows / seconds if seconds > 0 else 0.0
    return WindowStats(
        seconds=seconds,
        input_rate=max(0.0, read_rate + growth),
        capacity=rows / per_row_busy if busy > 0 else 0.0,
        busy=busy / seconds if seconds > 0 else 0.0,
        backlog=backlogs[-1][1] if backlogs else 0.0,
        backlog_growth=growth,
        overhead=overhead,
        available=max(1.0 - fixed / seconds, MIN_SHARE) if seconds > 0 else 1.0,
        batch_rate=sum(sample.batches or 0 for sample in samples) / seconds if seconds > 0 else 0.0,
    )


@dataclass(frozen=True)
class Limits:
    """The most executors the spec allows and more executors can use: the tightest bound and its reason."""

    ceiling: int
    reason: str


def limits(spec: StreamingAppSpec, signals: Signals) -> Limits:
    """maxExecutors, the quota, and the executors the sources' or the state's partitions can keep busy."""
    autoscaler = spec.autoscaler
    bounds = [(autoscaler.maxExecutors, "MaxExecutors")]
    per_executor = spec.executor.cores
    if autoscaler.quota.maxCores is not None:
        bounds.append(((autoscaler.quota.maxCores - app_cores(spec, 0)) // per_executor, "QuotaReached"))
    if autoscaler.quota.maxMemory is not None:
        room = spark_memory_mib(autoscaler.quota.maxMemory) - app_memory_mib(spec, 0)
        bounds.append((room // (app_memory_mib(spec, 1) - app_memory_mib(spec, 0)), "QuotaReached"))
    if signals.stateful:
        bounds.append((math.ceil(spec.state.partitions / per_executor), "StatePartitions"))
    elif signals.source_partitions:
        bounds.append((math.ceil(signals.source_partitions / per_executor), "SourcePartitions"))
    ceiling, reason = min(bounds, key=lambda bound: bound[0])
    return Limits(max(ceiling, 0), reason)


def _hold(
    reason: str, message: str, executors: int, utilization: float | None = None, needed: int | None = None
) -> Decision:
    return Decision("hold", executors, reason, message, utilization, needed)


@dataclass(frozen=True)
class _Situation:
    """The inputs of one decision, and what it measured so far."""

    spec: StreamingAppSpec
    signals: Signals
    now: datetime
    utilization: float | None = None
    described: str = ""

    @property
    def current(self) -> int:
        return self.signals.executors

    def hold(self, reason: str, message: str, needed: int | None = None) -> Decision:
        return _hold(reason, message, self.current, self.utilization, needed)


def decide_scaling(
    spec: StreamingAppSpec, memory: AutoscalerMemory, signals: Signals, now: datetime
) -> tuple[Decision, AutoscalerMemory]:
    """The decision now and the memory for the next call (pure: the same inputs give the same answer)."""
    situation = _Situation(spec, signals, now)
    current = signals.executors
    memory = replace(memory, action_times=tuple(at for at in memory.action_times if now - at < HOUR))
    if memory.executors != current:
        memory = replace(memory, executors=current, size_since=now, scale_down_since=None, scale_down_to=0)
    waiting = _not_yet(situation, memory)
    if waiting is not None:
        return waiting
    config = spec.autoscaler
    if not config.minExecutors <= current <= config.maxExecutors:
        target = min(max(current, config.minExecutors), config.maxExecutors)
        message = f"{current} executors, outside minExecutors {config.minExecutors}..maxExecutors {config.maxExecutors}"
        return _act(situation, Decision("scale", target, "OutOfBounds", message), memory, memory)
    window = parse_duration(config.metricsWindow)
    start = now - timedelta(seconds=window)
    samples = [sample for sample in signals.samples if start < sample.at <= now and sample.executors == current]
    if not samples:
        return situation.hold("NoBatches", f"no batch at {current} executors in the metrics window"), memory
    in_window = [sample for sample in signals.samples if start < sample.at <= now]
    fitted = fitted_overheads(in_window, dict(memory.overheads))
    memory = replace(memory, overheads=tuple(sorted(fitted.items())))
    fixed_cost = _fixed_costs(spec, signals, fitted, samples)
    stats = window_stats(samples, fixed_cost(current))
    recent = [sample for sample in samples if sample.at > now - timedelta(seconds=window * RECENT_SHARE)]
    if recent:  # a step in the load shows in the window's last part first: size for it at once
        stats = replace(stats, input_rate=max(stats.input_rate, window_stats(recent).input_rate))
    unsized = _not_sized(situation, memory, stats, samples)
    if unsized is not None:
        return unsized
    return _decide_on(situation, memory, stats, fixed_cost)


def _tasks(spec: StreamingAppSpec, signals: Signals) -> int | None:
    """The tasks of a batch's widest stage, as far as known: the state partitions of a stateful app, else the
    sources' partitions."""
    return spec.state.partitions if signals.stateful else signals.source_partitions


def _fixed_costs(
    spec: StreamingAppSpec, signals: Signals, fitted: Mapping[int, float], samples: Sequence[Sample]
) -> Callable[[int], float]:
    """The fixed cost of a batch at any executor count (`overhead_at`, with `_tasks`), at most the shortest batch
    measured at the current count; 0 for a window with batches not counted (none can be taken out) or with nothing
    fitted yet."""
    if not all(sample.batches is not None for sample in samples):
        return lambda _executors: 0.0
    tasks = _tasks(spec, signals)
    shortest = min((sample.busy_seconds / sample.batches for sample in samples if sample.batches), default=math.inf)

    def at(executors: int) -> float:
        cost = overhead_at(executors, fitted, spec.executor.cores, tasks) or 0.0
        return min(cost, shortest) if executors == signals.executors else cost

    return at


def _not_sized(
    situation: _Situation, memory: AutoscalerMemory, stats: WindowStats, samples: Sequence[Sample]
) -> tuple[Decision, AutoscalerMemory] | None:
    """Windows the model cannot size on: no rows processed (stuck with a backlog, or idle: toward minExecutors), or
    fewer batches (where counted) than MIN_BATCHES (one slow batch is not a load)."""
    current = situation.current
    if not stats.rows_processed:
        if stats.backlog > 0:
            message = f"a backlog of {stats.backlog:.0f} records and no rows processed at {current} executors"
            return situation.hold("NoThroughput", message), memory
        fewest = situation.spec.autoscaler.minExecutors
        return _scale_down(replace(situation, described="no input in the metrics window"), memory, fewest)
    counted = [sample.batches for sample in samples if sample.batches is not None]
    if len(counted) < len(samples) or sum(counted) >= MIN_BATCHES:
        return None
    message = (
        f"{sum(counted)} batches at {current} executors in the metrics window, fewer than {MIN_BATCHES}: too few to "
        "size on (a new driver's first batches are slow); lengthen metricsWindow or stabilizationInterval"
    )
    return situation.hold("FewBatches", message), memory


def _not_yet(situation: _Situation, memory: AutoscalerMemory) -> tuple[Decision, AutoscalerMemory] | None:
    """Hold while off, during a transition, while executors change, and until the window at this size fills."""
    config, signals, now, current = situation.spec.autoscaler, situation.signals, situation.now, situation.current
    if config.mode == "off":
        return situation.hold("Off", "spec.autoscaler.mode is off"), memory
    if signals.transition:
        return situation.hold("TransitionInProgress", "no decision while an operation runs"), memory
    if signals.back_to_back:
        message = (
            "a query runs its batches back to back (no processing-time trigger), so its busy time says nothing of "
            "its headroom: give every query a processing-time trigger"
        )
        return situation.hold("BackToBackBatches", message), memory
    if signals.requested_executors != current:
        message = f"{current} executors registered of {signals.requested_executors} requested"
        return situation.hold("ExecutorsChanging", message), replace(memory, size_since=now)
    assert memory.size_since is not None
    stabilization = timedelta(seconds=parse_duration(config.stabilizationInterval))
    stable_since = max(memory.size_since, signals.driver_started_at) + stabilization
    window = parse_duration(config.metricsWindow)
    if now < stable_since + timedelta(seconds=window):
        filled = max(0.0, (now - stable_since).total_seconds())
        message = f"{filled:.0f} s of the {window:.0f} s metrics window measured at {current} executors"
        return situation.hold("WindowFilling", message), memory
    return None


def _decide_on(
    situation: _Situation, memory: AutoscalerMemory, stats: WindowStats, fixed_cost: Callable[[int], float]
) -> tuple[Decision, AutoscalerMemory]:
    config, current = situation.spec.autoscaler, situation.current
    catch_up = parse_duration(config.catchUpDuration)
    backlog_rate = stats.backlog / catch_up if catch_up > 0 else 0.0
    usable = stats.capacity * stats.available  # rows per second the app can process, its fixed costs paid
    utilization = (stats.input_rate + backlog_rate) / usable
    undo = _ineffective(situation, memory, stats)
    if undo is not None:
        return undo
    memory = replace(memory, check=None)
    lower = config.targetUtilization - config.utilizationBoundary
    upper = config.targetUtilization + config.utilizationBoundary
    fixed = f", {stats.overhead:.1f} s of each batch fixed" if stats.overhead > 0 else ""
    if fixed and current not in dict(memory.overheads):
        fitted_at = ", ".join(str(count) for count, _ in memory.overheads)
        fixed += f" (derived from the fits at {fitted_at} executors)"
    situation = replace(
        situation,
        utilization=utilization,
        described=f"utilization {utilization:.2f} (input {stats.input_rate:.0f} rows/s, backlog "
        f"{stats.backlog:.0f}, capacity {usable:.0f} rows/s at {current} executors, in batches "
        f"{stats.busy:.0%} of the time{fixed})",
    )
    if lower <= utilization <= upper:
        band = f"{situation.described} within {lower:.2f}..{upper:.2f}"
        return situation.hold("WithinBand", band), replace(memory, scale_down_since=None, scale_down_to=0)
    if utilization > upper and _keeping_up_at_unknown_cost(memory, stats):
        message = (
            f"{situation.described}, but it keeps up (no backlog, in batches {stats.busy:.0%} of the time) and the "
            "fixed cost of its batches is not known yet: its busy time may be that cost, which more executors would "
            "not shorten. It is fitted when the load changes; until then, a scale-up waits for a backlog"
        )
        return situation.hold("FixedCostUnknown", message), replace(memory, scale_down_since=None, scale_down_to=0)
    rescale = parse_duration(config.rescaleTime) if utilization > upper else 0.0
    catch_up_rate = (stats.backlog + stats.input_rate * rescale) / catch_up if catch_up > 0 else 0.0
    needed_rate = stats.input_rate / config.targetUtilization + catch_up_rate
    needed = _executors_for(needed_rate, stats, current, fixed_cost)
    if needed > current:
        return _scale_up(situation, memory, needed, usable / current)
    if stats.backlog_growth > 0:
        message = f"{situation.described}, but the backlog grows by {stats.backlog_growth:.0f} records/s"
        return situation.hold("BacklogGrowing", message, needed), replace(memory, scale_down_since=None)
    return _scale_down(situation, memory, needed)


def _keeping_up_at_unknown_cost(memory: AutoscalerMemory, stats: WindowStats) -> bool:
    """Whether the window shows an app keeping up (no backlog, none growing, batches shorter than the wall clock) with
    counted batches and no fixed cost fitted at any count: its utilization is then its busy share, an upper bound
    (measured on the test node: a new driver's first minute at 1 executor read 2.4, busy 95%, and scaled it to 3
    before any load)."""
    return (
        not memory.overheads
        and stats.batch_rate > 0
        and stats.backlog <= 0
        and stats.backlog_growth <= 0
        and stats.busy < 1.0
    )


def _executors_for(rate: float, stats: WindowStats, current: int, fixed_cost: Callable[[int], float]) -> int:
    """The fewest executors that process `rate` rows per second: each adds the rows' capacity per executor measured
    at the current count, and the batches (as many per second as now) leave the rows what the fixed cost at that
    count does not take."""
    per_executor = stats.capacity / current

    def usable(executors: int) -> float:
        return per_executor * executors * max(1.0 - fixed_cost(executors) * stats.batch_rate, MIN_SHARE)

    return next((count for count in range(1, MOST_EXECUTORS + 1) if usable(count) >= rate), MOST_EXECUTORS)


def _ineffective(
    situation: _Situation, memory: AutoscalerMemory, stats: WindowStats
) -> tuple[Decision, AutoscalerMemory] | None:
    """Undo a scale-up that did not raise the capacity (judged only while a backlog remained: without one, small
    batches understate the capacity), and block scale-ups beyond the earlier size."""
    check, threshold = memory.check, situation.spec.autoscaler.effectivenessThreshold
    if check is None or check.to_executors != situation.current or threshold <= 0 or stats.backlog <= 0:
        return None
    expected = check.capacity_before * (check.to_executors / check.from_executors - 1)
    gained = stats.capacity * stats.available - check.capacity_before
    if gained >= threshold * expected:
        return None
    message = (
        f"the scale-up from {check.from_executors} to {check.to_executors} executors raised the capacity by "
        f"{gained:.0f} rows/s of the {expected:.0f} expected, with a backlog of {stats.backlog:.0f}: undone, and no "
        f"scale-up beyond {check.from_executors} until the spec changes"
    )
    decision = Decision("scale", check.from_executors, "IneffectiveScaleUp", message)
    return _act(situation, decision, memory, replace(memory, check=None, blocked_above=check.from_executors))


def _scale_up(
    situation: _Situation, memory: AutoscalerMemory, needed: int, per_executor: float
) -> tuple[Decision, AutoscalerMemory]:
    spec, current = situation.spec, situation.current
    memory = replace(memory, scale_down_since=None, scale_down_to=0)
    bound = limits(spec, situation.signals)
    ceiling, reason = bound.ceiling, bound.reason
    if memory.blocked_above is not None and memory.blocked_above < ceiling:
        ceiling, reason = memory.blocked_above, "ScaleUpBlocked"
    target = min(needed, ceiling)
    wanted = f"{situation.described}: {needed} executors needed"
    if target > current:
        capped = f" ({reason} caps it at {target})" if target < needed else ""
        decision = Decision("scale", target, "ScaleUp", wanted + capped, situation.utilization, needed)
        check = ScaleUpCheck(current, target, per_executor * current)
        return _act(situation, decision, memory, replace(memory, check=check))
    most = spec.autoscaler.maxExecutors
    if reason == "StatePartitions" and most > current:
        executors = min(needed, most)
        partitions = executors * spec.executor.cores
        message = (
            f"{wanted}, but {spec.state.partitions} state partitions keep at most {current} busy: repartition to "
            f"{partitions} through a savepoint"
        )
        decision = Decision(
            "repartition", executors, "RepartitionNeeded", message, situation.utilization, needed, partitions
        )
        return _act(situation, decision, memory, memory)
    return situation.hold(reason, f"{wanted}, at most {ceiling} allowed ({reason})", needed), memory


def _scale_down(situation: _Situation, memory: AutoscalerMemory, needed: int) -> tuple[Decision, AutoscalerMemory]:
    """Scale down only once fewer executors were wanted for scaleDownDelay without a break, to the most wanted."""
    config, current, now = situation.spec.autoscaler, situation.current, situation.now
    target = max(needed, config.minExecutors)
    if target >= current:
        message = f"{situation.described}: {current} executors needed"
        return situation.hold("AtNeededSize", message, needed), replace(memory, scale_down_since=None, scale_down_to=0)
    since = memory.scale_down_since or now
    wanted = max(memory.scale_down_to, target)
    memory = replace(memory, scale_down_since=since, scale_down_to=wanted)
    delay = timedelta(seconds=parse_duration(config.scaleDownDelay))
    if now - since < delay:
        left = (since + delay - now).total_seconds()
        message = f"{situation.described}: {wanted} executors would do; scaling down in {left:.0f} s if that lasts"
        return situation.hold("ScaleDownDelayed", message, needed), memory
    message = f"{situation.described}: {wanted} executors needed"
    decision = Decision("scale", wanted, "ScaleDown", message, situation.utilization, needed)
    return _act(situation, decision, memory, replace(memory, scale_down_since=None, scale_down_to=0))


def _act(
    situation: _Situation, decision: Decision, before: AutoscalerMemory, after: AutoscalerMemory
) -> tuple[Decision, AutoscalerMemory]:
    """An action, unless maxActionsPerHour were taken within the hour. What is only recommended (passive mode; a
    repartition, which this version leaves to a person: docs/autoscaler.md) is not remembered, so the same load
    keeps the same recommendation; an action taken is remembered, and the window measured afresh."""
    config, now = situation.spec.autoscaler, situation.now
    if config.mode != "active" or decision.action == "repartition":
        return decision, before
    if len(after.action_times) >= config.maxActionsPerHour:
        wait = (min(after.action_times) + HOUR - now).total_seconds()
        message = (
            f"{decision.reason} to {decision.executors} executors refused: {config.maxActionsPerHour} actions within "
            f"the hour (maxActionsPerHour); the next is allowed in {wait:.0f} s"
        )
        return situation.hold("RateLimited", message, decision.needed_executors), before
    return decision, replace(after, action_times=(*after.action_times, now), size_since=now)


# ------------------------------------------------------------------ the decision kept in status --

READ_EVERY = timedelta(seconds=25)  # at most one reading (and status change) per poll of the driver


def _reading_record(value: Reading) -> AutoscalerReading:
    return AutoscalerReading(
        at=format_time(value.at),
        batches=value.totals.batches,
        inputRows=value.totals.input_rows,
        busySeconds=value.totals.busy_seconds,
        backlog=value.backlog,
        executors=value.executors,
        executorsSince=format_time(value.executors_since) if value.executors_since else None,
    )


def _reading_of(record: AutoscalerReading) -> Reading:
    totals = BatchTotals(record.batches, record.inputRows, record.busySeconds)
    since = parse_time(record.executorsSince) if record.executorsSince else None
    return Reading(parse_time(record.at), totals, record.backlog, record.executors, since)


def _sample_record(sample: Sample) -> AutoscalerSample:
    return AutoscalerSample(
        at=format_time(sample.at),
        seconds=sample.seconds,
        inputRows=sample.input_rows,
        busySeconds=sample.busy_seconds,
        backlog=sample.backlog,
        executors=sample.executors,
        batches=sample.batches,
    )


def _sample_of(record: AutoscalerSample) -> Sample:
    return Sample(
        parse_time(record.at),
        record.seconds,
        record.inputRows,
        record.busySeconds,
        record.backlog,
        record.executors,
        record.batches,
    )


def _check_record(check: ScaleUpCheck | None) -> AutoscalerCheck | None:
    if check is None:
        return None
    return AutoscalerCheck(
        fromExecutors=check.from_executors, toExecutors=check.to_executors, capacityBefore=check.capacity_before
    )


def _check_of(record: AutoscalerCheck | None) -> ScaleUpCheck | None:
    if record is None:
        return None
    return ScaleUpCheck(record.fromExecutors, record.toExecutors, record.capacityBefore)


def _memory_of(previous: AutoscalerStatus | None, spec_key: str) -> AutoscalerMemory:
    """What the status remembers; the block after an ineffective scale-up holds only for the spec it was found on.
    An older operator's status has one fixed cost (batchOverheadSeconds, no batchOverheads): taken as fitted at the
    size its window was measured at."""
    if previous is None:
        return AutoscalerMemory()
    blocked = previous.blockedAbove if previous.blockedSpec == spec_key else None
    overheads = tuple((record.executors, record.seconds) for record in previous.batchOverheads)
    if not overheads and previous.batchOverheadSeconds is not None and previous.measuredExecutors is not None:
        overheads = ((previous.measuredExecutors, previous.batchOverheadSeconds),)
    return AutoscalerMemory(
        executors=previous.measuredExecutors,
        size_since=parse_time(previous.sizeSince) if previous.sizeSince else None,
        action_times=tuple(parse_time(at) for at in previous.actionTimes),
        scale_down_since=parse_time(previous.scaleDownSince) if previous.scaleDownSince else None,
        scale_down_to=previous.scaleDownTo,
        check=_check_of(previous.check),
        blocked_above=blocked,
        overheads=overheads,
    )


def recommend(  # noqa: PLR0917 - the decision's inputs, as the planner has them
    spec: StreamingAppSpec,
    previous: AutoscalerStatus | None,
    progress: DriverProgress,
    driver_started_at: datetime,
    now: datetime,
    spec_key: str = "",
    *,
    transition: bool = False,
) -> AutoscalerStatus | None:
    """The decision now (passive: what it would do; active: what to do, `target` set on an action), from the window
    kept in the status (a new reading at most every READ_EVERY, so that a decision settles when only the clock
    moves). `spec_key` names the spec (a block after an ineffective scale-up lasts while it stays).
    None: keep `previous` as it is."""
    current = reading(progress, now)
    if current is None:
        return None
    last = _reading_of(previous.lastReading) if previous is not None and previous.lastReading else None
    if last is not None and now - last.at < READ_EVERY:
        return None
    samples = [_sample_of(record) for record in previous.samples] if previous is not None else []
    if last is not None and (sample := sample_between(last, current)) is not None:
        samples.append(sample)
    horizon = now - timedelta(seconds=parse_duration(spec.autoscaler.metricsWindow))
    samples = [sample for sample in samples if sample.at > horizon]
    signals = Signals(
        executors=current.executors,
        requested_executors=progress.requested_executors
        if progress.requested_executors is not None
        else current.executors,
        samples=samples,
        driver_started_at=driver_started_at,
        transition=transition,
        source_partitions=progress.source_partitions,
        stateful=progress.stateful,
        back_to_back=progress.back_to_back,
    )
    decision, memory = decide_scaling(spec, _memory_of(previous, spec_key), signals, now)
    now_cost = overhead_at(current.executors, dict(memory.overheads), spec.executor.cores, _tasks(spec, signals))
    target = previous.target if previous is not None and spec.autoscaler.mode == "active" else None
    if acted(spec, decision):
        target = decision.executors
    return AutoscalerStatus(
        action=decision.action,
        executors=decision.executors,
        target=target,
        reason=decision.reason,
        message=decision.message,
        utilization=round(decision.utilization, 3) if decision.utilization is not None else None,
        neededExecutors=decision.needed_executors,
        partitions=decision.partitions,
        decidedAt=format_time(now),
        lastReading=_reading_record(current),
        samples=[_sample_record(sample) for sample in samples],
        measuredExecutors=memory.executors,
        sizeSince=format_time(memory.size_since) if memory.size_since else None,
        scaleDownSince=format_time(memory.scale_down_since) if memory.scale_down_since else None,
        scaleDownTo=memory.scale_down_to,
        actionTimes=[format_time(at) for at in memory.action_times],
        check=_check_record(memory.check),
        blockedAbove=memory.blocked_above,
        blockedSpec=spec_key if memory.blocked_above is not None else None,
        batchOverheadSeconds=round(now_cost, 3) if now_cost is not None else None,
        batchOverheads=[
            AutoscalerOverhead(executors=count, seconds=round(cost, 3)) for count, cost in memory.overheads
        ],
    )


def acted(spec: StreamingAppSpec, decision: Decision) -> bool:
    """Whether the operator rescales on this decision: active mode's scale actions (a repartition is recommended,
    docs/autoscaler.md)."""
    return spec.autoscaler.mode == "active" and decision.action == "scale"


REFUSALS = frozenset({
    "RateLimited", "ScaleUpBlocked", "MaxExecutors", "QuotaReached", "StatePartitions", "SourcePartitions",
    "NoThroughput", "BacklogGrowing", "BackToBackBatches", "FixedCostUnknown",
})  # fmt: skip
"""Holds that refuse what the load asks for (each an Event when it begins)."""
