"""`python -m testbed example results|clicks`: the quick start's example seen and fed from this machine.

Owns: finding the example's sink and source through the app's own spec (its `--output`, `--input` and
`--topic` arguments; its hostPath is mounted at the same path here), printing the sink's newest windows
(`make results`), and producing more clicks to its topic or input directory (`make clicks`).
Never: changes the app or the cluster; the sink is read by `testbed.sink` (through its `_spark_metadata` log).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kubernetes import client

from testbed import cluster, scenario, sink
from testbed.environment import Environment
from testbed.quickstart import NAMESPACE

PLURAL = "streamingapps"


def argument(app: dict[str, Any], flag: str) -> str | None:
    """The value after `flag` in the app's `spec.application.args` (None when absent)."""
    args = list(app.get("spec", {}).get("application", {}).get("args") or [])
    for index, value in enumerate(args[:-1]):
        if value == flag:
            return str(args[index + 1])
    return None


def local_path(uri: str) -> Path:
    """A ``file://`` URI (or a plain path) as a path on this machine."""
    return Path(uri.removeprefix("file://"))


def latest_windows(rows: Sequence[tuple[sink.Window, int]], count: int) -> list[tuple[sink.Window, int]]:
    """The rows of the `count` newest window starts, oldest first, pages in order."""
    starts = sorted({window[0] for window, _ in rows})[-count:] if count > 0 else []
    return sorted((row for row in rows if row[0][0] in starts), key=lambda row: row[0])


def table(rows: Sequence[tuple[sink.Window, int]]) -> str:
    """The rows as a text table (window start, page, views)."""
    lines = [f"{'window start (UTC)':<20} {'page':<24} views"]
    lines += [f"{start:<20} {page:<24} {views}" for (start, page), views in rows]
    return "\n".join(lines)


def _read_app(namespace: str, name: str) -> dict[str, Any]:
    kubeconfig = Path(os.environ.get("KUBECONFIG") or cluster.kubeconfig_path())
    with Environment(kubeconfig, data_root=Path()).api_client() as api:
        found: Any = client.CustomObjectsApi(api).get_namespaced_custom_object(
            "headrace.dev", "v1alpha1", namespace, PLURAL, name
        )
    return dict(found)


def results(app: dict[str, Any], count: int) -> int:
    output = argument(app, "--output")
    if output is None:
        print("error: the app's spec.application.args name no --output", file=sys.stderr)
        return 1
    path = local_path(output) / "tumbling"
    rows = sink.read_rows(path)
    if not rows:
        print(f"no window in {path} yet: windows appear once the watermark passes their end (about 1.5 minutes)")
        return 0
    print(f"the newest {count} one-minute windows of {path} ({len(rows)} rows in all):")
    print(table(latest_windows(rows, count)))
    return 0


def clicks(app: dict[str, Any], files: int) -> int:
    topic, source_dir = argument(app, "--topic"), argument(app, "--input")
    writer: scenario.ClickTopic | scenario.ClickFiles
    if topic is not None:
        bootstrap = os.environ.get("HEADRACE_KAFKA_BOOTSTRAP") or cluster.kafka_bootstrap()
        writer = scenario.ClickTopic(bootstrap, topic).resume()
        where = f"topic {topic}"
    elif source_dir is not None:
        writer = scenario.ClickFiles(local_path(source_dir))
        writer.files = len(list(writer.directory.glob("part-*.json")))
        where = str(writer.directory)
    else:
        print("error: the app's spec.application.args name neither --topic nor --input", file=sys.stderr)
        return 1
    for _ in range(files):
        writer.next_file()
    print(f"produced {files} chunks of {scenario.EVENTS_PER_FILE} clicks to {where}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m testbed example results [--last N] | clicks [--files N]`."""
    parser = argparse.ArgumentParser(prog="python -m testbed example", description=__doc__)
    parser.add_argument("action", choices=["results", "clicks"])
    parser.add_argument("-n", "--namespace", default=NAMESPACE)
    parser.add_argument("--app", default=scenario.APP, help="the StreamingApp's name")
    parser.add_argument("--last", type=int, default=5, help="results: how many of the newest windows")
    parser.add_argument("--files", type=int, default=10, help=f"clicks: chunks of {scenario.EVENTS_PER_FILE} clicks")
    args = parser.parse_args(argv)
    app = _read_app(args.namespace, args.app)
    return results(app, args.last) if args.action == "results" else clicks(app, args.files)


if __name__ == "__main__":
    sys.exit(main())
