"""Driver Lease load: what N drivers renewing their driver Lease cost a real kube-apiserver and etcd (issue 23).

Every driver holds its app's driver Lease and renews it every DRIVER_LEASE_RETRY_SECONDS (2 s). A driver pod on a
KWOK node runs no code, so the renewals are simulated here: N Leases, each renewed on the runtime's schedule the way
`headrace.runtime.lease.LeaseGuard` does (`--mode get-put`: read, then replace with the version read; `--mode put`:
replace with the version of its own last write, reading only after a conflict, client-go's shortcut), by a pool of
client threads with kept-alive connections. For each N and mode, over a measured window after a warm-up, prints the
renewals per second reached (the target is N / 2), their latency (p50, p99), the API requests per second, and the
CPU the kube-apiserver and etcd used (cores, and milliseconds per renewal), which extrapolates to other N.
The clients share the machine's cores with the control plane: when they fall short of the target rate, the figures
per renewal still hold. Run: `PYTHONPATH=. uv run python bench/driver_lease_load.py [N ...] [--mode M ...]`.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from headrace.api import runtime_contract as contract
from headrace.core import election
from testbed.controlplane import ControlPlane, ensure_control_plane_binaries

NAMESPACE = "lease-load"
THREADS = 8
WARMUP_SECONDS = 6.0
CONFLICT = 409


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))] if ordered else float("nan")


class Renewers:
    """N holders, each renewing its own Lease every `period` seconds, spread over `threads` client threads."""

    def __init__(self, plane: ControlPlane, count: int, mode: str, period: float) -> None:
        self.plane, self.count, self.mode, self.period = plane, count, mode, period
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.latencies: list[float] = []
        self.requests = 0
        self.counting = False
        self.errors: list[str] = []

    def _renew(self, leases: client.CoordinationV1Api, name: str, known: dict[str, str]) -> int:
        """One renewal of `name` as the holder `name`; returns the API requests it took."""
        now = datetime.now(UTC)
        version = known.get(name) if self.mode == "put" else None
        requests = 0
        for _ in range(2):
            if version is None:
                body = json.loads(leases.read_namespaced_lease(name, NAMESPACE, _preload_content=False).data)
                requests += 1
                record, version = election.lease_record(body["spec"]), body["metadata"]["resourceVersion"]
            else:
                record = election.LeaseRecord(name, contract.DRIVER_LEASE_SECONDS, acquire_time=now, renew_time=now)
            decision = election.next_write(record, now, name, now, contract.DRIVER_LEASE_SECONDS)
            assert decision.record is not None
            replacement = {
                "metadata": {"name": name, "namespace": NAMESPACE, "resourceVersion": version},
                "spec": election.lease_spec(decision.record),
            }
            requests += 1
            try:
                written = leases.replace_namespaced_lease(name, NAMESPACE, replacement, _preload_content=False)
            except ApiException as error:
                if error.status != CONFLICT:
                    raise
                version = None  # changed since: read it, then write again
                continue
            known[name] = json.loads(written.data)["metadata"]["resourceVersion"]
            return requests
        raise RuntimeError(f"{name}: two conflicts in a row")

    def _worker(self, names: list[str]) -> None:
        known: dict[str, str] = {}
        with self.plane.api_client() as api:
            leases = client.CoordinationV1Api(api)
            offset = self.period / max(1, len(names))
            due = {name: time.monotonic() + index * offset for index, name in enumerate(names)}
            while not self.stop.is_set():
                name = min(due, key=due.__getitem__)
                wait = due[name] - time.monotonic()
                if wait > 0:
                    self.stop.wait(wait)
                    continue
                started = time.monotonic()
                try:
                    requests = self._renew(leases, name, known)
                except Exception as error:
                    self.errors.append(f"{name}: {error}")
                    return
                with self.lock:
                    if self.counting:
                        self.latencies.append(time.monotonic() - started)
                        self.requests += requests
                due[name] = max(due[name] + self.period, time.monotonic())

    def run(self, seconds: float) -> dict[str, float]:
        names = [f"driver-{index}" for index in range(self.count)]
        workers = [
            threading.Thread(target=self._worker, args=(names[index::THREADS],), daemon=True)
            for index in range(THREADS)
        ]
        for worker in workers:
            worker.start()
        time.sleep(WARMUP_SECONDS)
        pids = {name: process.pid for name, process in self.plane.processes.items()}
        before = {name: _cpu_seconds(pid) for name, pid in pids.items()}
        with self.lock:
            self.counting = True
        started = time.monotonic()
        time.sleep(seconds)
        with self.lock:
            self.counting = False
            renewals, requests = len(self.latencies), self.requests
        elapsed = time.monotonic() - started
        used = {name: _cpu_seconds(pid) - before[name] for name, pid in pids.items()}
        self.stop.set()
        for worker in workers:
            worker.join(timeout=10)
        if self.errors:
            raise RuntimeError(f"{len(self.errors)} renewals failed, first: {self.errors[0]}")
        control = used.get("kube-apiserver", 0.0) + used.get("etcd", 0.0)
        return {
            "renewals_per_s": renewals / elapsed,
            "target_per_s": self.count / self.period,
            "requests_per_s": requests / elapsed,
            "p50_ms": 1000 * _percentile(self.latencies, 0.5),
            "p99_ms": 1000 * _percentile(self.latencies, 0.99),
            "apiserver_cores": used.get("kube-apiserver", 0.0) / elapsed,
            "etcd_cores": used.get("etcd", 0.0) / elapsed,
            "cpu_ms_per_renewal": 1000 * control / max(1, renewals),
        }


def _create_leases(plane: ControlPlane, count: int) -> None:
    with plane.api_client() as api:
        leases = client.CoordinationV1Api(api)
        existing = {item.metadata.name for item in leases.list_namespaced_lease(NAMESPACE).items}
        for index in range(count):
            name = f"driver-{index}"
            if name not in existing:
                spec = {"leaseDurationSeconds": contract.DRIVER_LEASE_SECONDS}
                leases.create_namespaced_lease(NAMESPACE, {"metadata": {"name": name}, "spec": spec})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("counts", nargs="*", type=int, help="drivers renewing (default: 250 1000)")
    parser.add_argument("--mode", nargs="*", choices=["get-put", "put"], default=["get-put", "put"])
    parser.add_argument("--seconds", type=float, default=20.0, help="measured window per round")
    parser.add_argument("--period", type=float, default=float(contract.DRIVER_LEASE_RETRY_SECONDS))
    args = parser.parse_args()
    ensure_control_plane_binaries()
    with (
        tempfile.TemporaryDirectory(prefix="headrace-lease-load-") as temp,
        ControlPlane(Path(temp) / "plane", controllers=False, scheduler=False) as plane,
    ):
        with plane.api_client() as api:
            client.CoreV1Api(api).create_namespace({"metadata": {"name": NAMESPACE}})
        for count in args.counts or [250, 1000]:
            _create_leases(plane, count)
            for mode in args.mode:
                result = Renewers(plane, count, mode, args.period).run(args.seconds)
                figures = ", ".join(f"{key} {value:.3g}" for key, value in result.items())
                print(f"N={count} mode={mode}: {figures}", flush=True)
                time.sleep(2.0)


if __name__ == "__main__":
    main()
