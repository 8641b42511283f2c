"""Operator scale: create N StreamingApps against a real API server and measure create -> driver pod.

Prints, for each N: p50/p99/max latency from the app's create call returning to the driver pod being
seen through a watch, the operator's CPU seconds and peak RSS over the run, and the baseline RSS of
the idle operator measured in the same run; then the API requests per app, by verb and resource, that
the API server counted (its `apiserver_request_total`) for the kinds only the operator writes or reads
this way, and the reconciliations per app (the operator's `headrace_reconciles_total`).
With `--baseline DIR` (a directory holding another version's `headrace` package, e.g. the `operator/`
of a worktree at an older commit) each N runs that operator too, right before this one, against the
same API server, and the figures are printed side by side with their ratio.
Run: `PYTHONPATH=. uv run python bench/operator_scale.py [N ...] [--baseline DIR]`. With `--running N ...
[--storm S]` and `--peer N`, the scenarios with Running pods on simulated nodes, the restart storm, and the
Kubeflow Spark operator beside Headrace run first (see bench/scale_running.py).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client, watch
from prometheus_client.parser import text_string_to_metric_families

from headrace.api import models, names
from testbed import procs
from testbed.controlplane import ControlPlane, create_namespace, ensure_control_plane_binaries
from testbed.operator_process import OperatorProcess, install_crds


def _manifest(name: str) -> dict[str, object]:
    return {
        "apiVersion": models.API_VERSION,
        "kind": models.APP_KIND,
        "metadata": {"name": name},
        "spec": {
            "image": "localhost/headrace/spark:0.1.0",
            "application": {"file": "local:///opt/headrace/apps/windowed-counts/app.py"},
            "state": {"checkpointDir": "s3a://bucket/checkpoints"},
        },
    }


SETTLE_SECONDS = 5.0


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0  # utime + stime in clock ticks


class _Sampler(threading.Thread):
    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak, self.stopped = pid, 0, threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            self.peak = max(self.peak, procs.rss_bytes(self.pid))
            time.sleep(0.1)


# (group, resource, subresource) the operator reads or writes per app. Left out: the bench's own creates of
# StreamingApps, the scheduler's pod status writes and events (events.k8s.io), and every WATCH.
_OPERATOR_REQUESTS = {
    ("headrace.dev", "streamingapps", ""): ("GET", "LIST", "PUT", "PATCH"),
    ("headrace.dev", "streamingapps", "status"): ("GET", "PUT", "PATCH"),
    ("headrace.dev", "streamingsavepoints", ""): ("GET", "LIST", "POST", "PUT", "PATCH", "DELETE"),
    ("", "pods", ""): ("GET", "LIST", "POST", "DELETE"),
    ("", "configmaps", ""): ("GET", "LIST", "POST", "DELETE"),
    ("", "services", ""): ("GET", "LIST", "POST", "DELETE"),
    ("", "serviceaccounts", ""): ("GET", "LIST", "POST", "DELETE"),
    ("", "secrets", ""): ("GET", "LIST", "POST", "DELETE"),
    ("", "events", ""): ("POST", "PATCH"),
    ("rbac.authorization.k8s.io", "roles", ""): ("GET", "LIST", "POST", "DELETE"),
    ("rbac.authorization.k8s.io", "rolebindings", ""): ("GET", "LIST", "POST", "DELETE"),
    ("networking.k8s.io", "networkpolicies", ""): ("GET", "LIST", "POST", "DELETE"),
}


def _request_counts(api: client.ApiClient) -> dict[str, float]:
    """The API server's request counters for `_OPERATOR_REQUESTS`, as "VERB resource[/sub]" -> count."""
    response = api.call_api(*api.param_serialize("GET", "/metrics", auth_settings=["BearerToken"]))
    response.read()
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(response.data.decode()):
        if family.name != "apiserver_request":
            continue
        for sample in family.samples:
            labels = sample.labels
            kind = (labels.get("group", ""), labels.get("resource", ""), labels.get("subresource", ""))
            if sample.name.endswith("_total") and labels.get("verb") in _OPERATOR_REQUESTS.get(kind, ()):
                key = f"{labels['verb']} {kind[1]}{'/' + kind[2] if kind[2] else ''}"
                counts[key] = counts.get(key, 0.0) + sample.value
    return counts


def _per_app(before: dict[str, float], after: dict[str, float], apps: int) -> dict[str, float]:
    delta = {key: (after[key] - before.get(key, 0.0)) / apps for key in after}
    return {key: value for key, value in sorted(delta.items()) if value > 0}


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def _reconciles(operator: OperatorProcess) -> float:
    """The operator's reconciliations so far, whatever their outcome."""
    total = 0.0
    for family in text_string_to_metric_families(operator.metrics()):
        if family.name == "headrace_reconciles":
            total += sum(sample.value for sample in family.samples if sample.name.endswith("_total"))
    return total


def measure(plane: ControlPlane, count: int, workdir: Path, source: Path | None = None) -> dict[str, Any]:
    """One round: a fresh operator (its `headrace` package from `source`, else this one), a fresh namespace,
    `count` apps."""
    with plane.api_client() as api:
        namespace = create_namespace(api)
        seen: dict[str, float] = {}
        done = threading.Event()

        def watch_pods() -> None:
            core = client.CoreV1Api(api)
            stream = watch.Watch()
            for event in stream.stream(core.list_namespaced_pod, namespace, timeout_seconds=600):
                app = (event["object"].metadata.labels or {}).get(names.APP)
                if app and app not in seen:
                    seen[app] = time.monotonic()
                if len(seen) >= count or done.is_set():
                    stream.stop()

        watcher = threading.Thread(target=watch_pods, daemon=True)
        watcher.start()
        time.sleep(1)
        source_path = {"PYTHONPATH": str(source)} if source is not None else {}
        env = {"HEADRACE_NAMESPACES": namespace, **source_path}  # an earlier round's apps are not this round's work
        label = "baseline" if source is not None else "current"
        with OperatorProcess(plane.kubeconfig, workdir / f"op-{label}-{count}", env, verbose=False) as operator:
            assert operator.process is not None
            pid = operator.process.pid
            time.sleep(2)
            idle_rss = procs.rss_bytes(pid)
            cpu_before = _cpu_seconds(pid)
            sampler = _Sampler(pid)
            sampler.start()
            created: dict[str, float] = {}
            custom = client.CustomObjectsApi(api)
            requests_before = _request_counts(api)
            reconciles_before = _reconciles(operator)

            def create(index: int) -> None:
                name = f"app-{index:04d}"
                custom.create_namespaced_custom_object(
                    models.GROUP, models.VERSION, namespace, models.APP_PLURAL, _manifest(name)
                )
                created[name] = time.monotonic()

            began = time.monotonic()
            with ThreadPoolExecutor(max_workers=8) as pool:
                list(pool.map(create, range(count)))
            create_seconds = time.monotonic() - began
            deadline = time.monotonic() + 300
            while len(seen) < count and time.monotonic() < deadline:
                time.sleep(0.2)
            done.set()
            time.sleep(SETTLE_SECONDS)  # the reconciles a driver's creation sets off (status, events) finish
            sampler.stopped.set()
            sampler.join()
            cpu = _cpu_seconds(pid) - cpu_before
            requests = _per_app(requests_before, _request_counts(api), count)
            reconciles = (_reconciles(operator) - reconciles_before) / count
        latencies = [seen[name] - created[name] for name in created if name in seen]
        return {
            "apps": count,
            "drivers_seen": len(latencies),
            "create_calls_s": create_seconds,
            "p50_s": statistics.median(latencies),
            "p99_s": _percentile(latencies, 0.99),
            "max_s": max(latencies),
            "operator_cpu_s": cpu,
            "operator_idle_rss_mb": idle_rss / 2**20,
            "operator_peak_rss_mb": sampler.peak / 2**20,
            "requests_per_app": requests,
            "reconciles_per_app": reconciles,
        }


def _report(name: str, result: dict[str, Any]) -> None:
    print(
        f"{name} N={result['apps']:.0f}: create->driver pod p50 {result['p50_s']:.2f}s p99 {result['p99_s']:.2f}s "
        f"max {result['max_s']:.2f}s ({result['drivers_seen']:.0f} seen; create calls took "
        f"{result['create_calls_s']:.1f}s); operator CPU {result['operator_cpu_s']:.1f}s, RSS idle "
        f"{result['operator_idle_rss_mb']:.0f} MB, peak {result['operator_peak_rss_mb']:.0f} MB; "
        f"{result['reconciles_per_app']:.2f} reconciliations per app",
        flush=True,
    )
    requests = result["requests_per_app"]
    listed = ", ".join(f"{key} {value:.2f}" for key, value in requests.items())
    print(f"  API requests per app: {sum(requests.values()):.1f} ({listed})", flush=True)


def _ratios(current: dict[str, Any], baseline: dict[str, Any]) -> str:
    keys = ("p50_s", "p99_s", "operator_cpu_s", "operator_peak_rss_mb", "reconciles_per_app")
    parts = [f"{key} {current[key] / baseline[key]:.2f}" for key in keys if baseline[key]]
    requests = sum(current["requests_per_app"].values()) / sum(baseline["requests_per_app"].values())
    return ", ".join([*parts, f"requests per app {requests:.2f}"])


def main() -> None:
    """Run the benchmark for each N and print one line per N."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("counts", nargs="*", type=int, help="apps per round, no nodes (default: 100 500)")
    parser.add_argument("--running", nargs="*", type=int, default=[], help="apps per round on KWOK nodes")
    parser.add_argument("--storm", type=int, default=200, help="Running drivers deleted at once in each such round")
    parser.add_argument("--peer", type=int, default=0, help="apps for Headrace beside the Kubeflow Spark operator")
    parser.add_argument("--rate", type=float, default=0.0, help="apps/s created steadily on KWOK nodes (sustained)")
    parser.add_argument("--seconds", type=float, default=20.0, help="for how long --rate is sustained")
    parser.add_argument("--baseline", type=Path, help="a directory holding another version's headrace package")
    args = parser.parse_args()
    sustained = (args.rate, args.seconds) if args.rate else None
    kwok_scenarios = bool(args.running or args.peer or sustained)
    counts = args.counts or ([] if kwok_scenarios else [100, 500])
    ensure_control_plane_binaries()
    with tempfile.TemporaryDirectory(prefix="headrace-bench-") as temp:
        workdir = Path(temp)
        if kwok_scenarios:
            import scale_running  # imports this module: its scenarios reuse the manifest

            scale_running.run(
                args.running,
                args.storm,
                args.peer,
                workdir / "running",
                baseline=args.baseline,
                sustained=sustained,
            )
        if not counts:
            return
        with ControlPlane(workdir / "plane") as plane:
            with plane.api_client() as api:
                install_crds(api)
            for count in counts:
                baseline = measure(plane, count, workdir, args.baseline) if args.baseline else None
                if baseline is not None:
                    _report("baseline", baseline)
                result = measure(plane, count, workdir)
                _report("current", result)
                if baseline is not None:
                    print(f"  current / baseline: {_ratios(result, baseline)}", flush=True)


if __name__ == "__main__":
    main()
