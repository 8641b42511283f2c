"""Chaos benchmark on the local cluster: `rounds` rounds of every fault kind at random moments on the quick start's
example (Kafka with a producer, state in the S3 bucket), a sink check after each fault, then the figures:
faults injected and survived, records checked, recovery per fault kind (median and max), and every fault that
needed a person. Definitions of "recovered" per kind: testbed/chaos.py.
Run: `PYTHONPATH=. uv run python bench/chaos.py --rounds 1 --seed 1 --save run1.json`. A fault with its recovery
and sink check took 1-4 minutes on 2 loaded cores; the node lock is held throughout, so split long runs and add
their figures up with `--merge run1.json run2.json ...`.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from testbed import chaos, faults, sink
from testbed.environment import environment


def _save(figures: chaos.Figures, path: Path) -> None:
    final = figures.final
    rows = [[o.kind, o.recovery_seconds, o.person, o.note, bool(o.check and o.check.ok)] for o in figures.outcomes]
    path.write_text(
        json.dumps({"outcomes": rows, "final": [final.windows, final.records, final.ok] if final else None})
    )


def _load(paths: list[Path]) -> chaos.Figures:
    """The outcomes of several saved runs as one (their final checks summed: right only if each was)."""
    merged = chaos.Figures()
    windows = records = 0
    right = True
    for path in paths:
        saved = json.loads(path.read_text())
        for kind, recovery, person, note, ok in saved["outcomes"]:
            check = sink.SinkCheck(0, 0, missing=[] if ok else [("?", "?")])
            merged.outcomes.append(chaos.Outcome(kind, recovery, person, check, note))
        if saved["final"]:
            windows, records = windows + saved["final"][0], records + saved["final"][1]
            right = right and saved["final"][2]
    merged.final = sink.SinkCheck(windows, records, missing=[] if right else [("?", "?")])
    return merged


def main() -> None:
    """Run (or merge saved runs) and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--outage", type=float, default=30.0, help="seconds the API and S3 servers stay stopped")
    parser.add_argument("--save", type=Path, help="write this run's outcomes here (for --merge)")
    parser.add_argument("--merge", type=Path, nargs="+", help="only print the figures of saved runs")
    options = parser.parse_args()
    if options.merge:
        print("\n".join(chaos.summary(_load(options.merge))), flush=True)
        return
    schedule = faults.schedule(options.rounds, options.seed, pauses=(3.0, 15.0))
    print(f"seed {options.seed}: {[fault.kind for fault in schedule]}", flush=True)
    started = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="headrace-bench-") as temp,
        environment(Path(temp)) as target,
        chaos.chaos_app(target) as app,
    ):
        run = chaos.Chaos(target, app, outage_seconds=options.outage)
        figures = chaos.Figures()

        def log(line: str) -> None:
            print(f"{time.strftime('%H:%M:%S')} {line} (load {os.getloadavg()[0]:.1f})", flush=True)
            if options.save:  # each fault as it is done: a run cut short keeps what it measured
                _save(figures, options.save)

        run.run(schedule, log=log, figures=figures)
    print(f"chaos run: {len(schedule)} faults in {time.monotonic() - started:.0f}s", flush=True)
    if options.save:
        _save(figures, options.save)
    print("\n".join(chaos.summary(figures)), flush=True)


if __name__ == "__main__":
    main()
