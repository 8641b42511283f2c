"""Autoscaler benchmark on the local cluster (issue 27): one load ramp (steady -> 4x step -> steady -> back down)
produced to two copies of the ramp app (testbed/autoscale.py: each row costs 1 ms of an executor core, in 12 tasks)
side by side in the same run: one with the autoscaler active between 1 and `--max` executors, one fixed at `--max`
executors (sized for the peak) whose autoscaler is passive, so that its recommendations can be set beside what the
active one did. Figures: time to absorb the step's backlog and peak lag (both apps), rescales per hour under
steady load, executor-seconds of each, the cost of each in-place rescale (Event -> executors registered, and the
backlog meanwhile), the passive recommendations against the active actions, and the sink of each checked
exactly once at the end.
Run: `PYTHONPATH=. flock /work/logs/node.lock uv run python bench/autoscaler.py --save ramp.json` (about 20
minutes of ramp by default, plus the cluster and the apps' start).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from testbed import autoscale, chaos
from testbed.environment import environment


def config(options: argparse.Namespace, mode: str) -> dict[str, Any]:
    return {
        "mode": mode,
        "minExecutors": 1,
        "maxExecutors": options.max,
        "targetUtilization": 0.6,
        "utilizationBoundary": 0.2,
        "metricsWindow": options.window,
        "stabilizationInterval": "30s",
        "scaleDownDelay": options.scale_down_delay,
        "catchUpDuration": "2m",
        "rescaleTime": "20s",
    }


def absorbed_after(trace: autoscale.Trace, start: float, end: float, rows: float) -> float | None:
    """Seconds from `start` until the backlog, having peaked, stays under `rows` (None: not before `end`)."""
    points = [point for point in trace.points if start <= point.at < end]
    if not points:
        return None
    peak = max(range(len(points)), key=lambda index: points[index].backlog or 0.0)
    for index in range(peak, len(points)):
        if all((point.backlog or 0.0) < rows for point in points[index:]):
            return points[index].at - start
    return None


def rescale_costs(trace: autoscale.Trace) -> list[str]:
    """Per AutoscalerScaled Event: seconds until the registered executors were the new size, the backlog then."""
    lines = []
    for action in trace.scaled():
        wanted = action.message.split(" -> ", 1)[1].split(" ", 1)[0] if " -> " in action.message else ""
        reached = [point for point in trace.points if point.at >= action.at and str(point.executors) == wanted]
        took = f"{reached[0].at - action.at:.0f} s" if reached else "never"
        lines.append(f"  {action.at:5.0f} s {action.message.split(':', 1)[0]}: registered after {took} (5 s samples)")
    return lines


def steady_rescales(trace: autoscale.Trace, steady: list[tuple[float, float]]) -> tuple[int, float]:
    """AutoscalerScaled Events within the steady stretches, and their total seconds."""
    count = sum(1 for action in trace.scaled() for start, end in steady if start <= action.at < end)
    return count, sum(end - start for start, end in steady)


def figures(
    options: argparse.Namespace, active: autoscale.Trace, fixed: autoscale.Trace, checks: list[Any]
) -> list[str]:
    step, drop = options.low_minutes * 60, (options.low_minutes + options.high_minutes) * 60
    end = drop + options.down_minutes * 60
    batch_rows = options.high * options.trigger  # a batch's worth of input at the high rate
    lines = [
        f"ramp: {options.low:.0f} rows/s for {options.low_minutes} min, {options.high:.0f} for {options.high_minutes},"
        f" {options.low:.0f} for {options.down_minutes}; trigger {options.trigger} s, 1 ms per row in 12 tasks;"
        f" active 1..{options.max} executors vs fixed {options.max} (passive); window {options.window},"
        f" scaleDownDelay {options.scale_down_delay}",
    ]
    for trace in (active, fixed):
        took = absorbed_after(trace, step, drop, batch_rows)
        lines.append(
            f"{trace.name}: step absorbed (backlog < {batch_rows:.0f}) after "
            f"{'never' if took is None else f'{took:.0f} s'}, peak lag {trace.peak_backlog(step, drop):.0f} records,"
            f" executor-seconds {trace.executor_seconds():.0f}"
        )
    ratio = active.executor_seconds() / fixed.executor_seconds() if fixed.executor_seconds() else float("nan")
    lines.append(f"active / fixed executor-seconds: {ratio:.2f}")
    # steady: the first low phase after the window filled, the high phase's second half, the last low phase's end
    steady = [(120.0, step), ((step + drop) / 2, drop), (end - 180.0, end)]
    count, seconds = steady_rescales(active, steady)
    lines.append(f"rescales under steady load: {count} in {seconds:.0f} s ({count * 3600 / seconds:.1f} per hour)")
    lines.append(f"active actions ({len(active.scaled())}):")
    lines += rescale_costs(active)
    lines += [f"  {action.at:5.0f} s refused: {action.message[:140]}" for action in active.actions
              if action.reason == "AutoscalerRefused"]  # fmt: skip
    recommended = [action for action in fixed.actions if action.reason == "AutoscalerRecommends"]
    lines.append(f"passive recommendations of the fixed app ({len(recommended)}):")
    lines += [f"  {action.at:5.0f} s {action.message[:140]}" for action in recommended]
    lines += [f"sink {name}: {check}" for name, check in zip(("active", "fixed"), checks, strict=True)]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--low", type=float, default=200.0, help="rows/s of the steady phases")
    parser.add_argument("--high", type=float, default=800.0, help="rows/s of the step (4x)")
    parser.add_argument("--low-minutes", type=float, default=4.0)
    parser.add_argument("--high-minutes", type=float, default=8.0)
    parser.add_argument("--down-minutes", type=float, default=8.0)
    parser.add_argument("--max", type=int, default=3, help="maxExecutors, and the fixed app's size")
    parser.add_argument("--trigger", type=float, default=8.0, help="processing-time trigger, seconds")
    parser.add_argument(
        "--max-offsets-per-trigger", type=int, default=12000, help="the source's rate limit (the backlog shows)"
    )
    parser.add_argument("--window", default="2m", help="metricsWindow")
    parser.add_argument("--scale-down-delay", default="3m")
    parser.add_argument("--save", type=Path, help="write both traces here as JSON")
    options = parser.parse_args()
    phases = [
        autoscale.Phase(options.low_minutes * 60, options.low),
        autoscale.Phase(options.high_minutes * 60, options.high),
        autoscale.Phase(options.down_minutes * 60, options.low),
    ]

    def log(line: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {line} (load {os.getloadavg()[0]:.1f})", flush=True)

    started = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="headrace-bench-") as temp,
        environment(Path(temp)) as target,
        autoscale.ramp_app(
            target,
            "active",
            trigger_seconds=options.trigger,
            max_offsets_per_trigger=options.max_offsets_per_trigger,
            autoscaler=config(options, "active"),
        ) as active_app,
        autoscale.ramp_app(
            target,
            "fixed",
            trigger_seconds=options.trigger,
            max_offsets_per_trigger=options.max_offsets_per_trigger,
            autoscaler=config(options, "passive"),
            executor={"instances": options.max, "cores": 1, "memory": "768m", "coreRequest": "250m"},
        ) as fixed_app,
    ):
        log(f"both apps committing after {time.monotonic() - started:.0f} s")
        (active, fixed), _ = autoscale.run_ramp([active_app, fixed_app], phases, log=log)
        checks = [chaos.settled_sink(app, stall_timeout=180) for app in (active_app, fixed_app)]
    active.name, fixed.name = "active", "fixed"
    if options.save:
        options.save.write_text(json.dumps({trace.name: dataclasses.asdict(trace) for trace in (active, fixed)}))
    print("\n".join(figures(options, active, fixed, checks)), flush=True)


if __name__ == "__main__":
    main()
