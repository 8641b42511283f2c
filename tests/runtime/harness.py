"""Shared helpers for the runtime tests: known input data and a runtime process handle.

Owns: writing event files with distinct increasing mtimes, the expected windowed counts, free
ports, and :class:`RuntimeProcess` (``python -m headrace.runtime`` in its own process group, its
control endpoint and metrics). Never: asserts; tests decide.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from headrace.api import runtime_contract as contract
from testbed import procs

JOB = Path(__file__).parent / "jobs" / "windowed_counts.py"
BASE_TIME = 1_700_000_000
SENTINEL_TIME = BASE_TIME + 100_000
TOKEN = "test-token"


def event_times(file_index: int, events_per_file: int) -> list[float]:
    return [BASE_TIME + file_index * 3 + position * (3 / events_per_file) for position in range(events_per_file)]


def write_events(directory: Path, files: int, events_per_file: int, first: int = 0) -> None:
    """Files ``f00000.json``...; event times increase across files; mtimes strictly increase."""
    directory.mkdir(parents=True, exist_ok=True)
    for index in range(first, first + files):
        lines = [
            json.dumps({"id": index * events_per_file + position, "key": f"k{position % 3}", "ts": ts})
            for position, ts in enumerate(event_times(index, events_per_file))
        ]
        path = directory / f"f{index:05d}.json"
        path.write_text("\n".join(lines) + "\n")
        os.utime(path, (BASE_TIME + index, BASE_TIME + index))


def write_sentinel(directory: Path, index: int) -> None:
    """One far-future event that moves the watermark past every real window."""
    path = directory / f"f{index:05d}.json"
    path.write_text(json.dumps({"id": -1, "key": "sentinel", "ts": SENTINEL_TIME}) + "\n")
    os.utime(path, (BASE_TIME + index, BASE_TIME + index))


def expected_counts(files: int, events_per_file: int) -> Counter[tuple[float, str]]:
    counts: Counter[tuple[float, str]] = Counter()
    for index in range(files):
        for position, ts in enumerate(event_times(index, events_per_file)):
            counts[(float(int(ts) // 10 * 10), f"k{position % 3}")] += 1
    return counts


def commits(checkpoint: Path) -> list[int]:
    directory = checkpoint / "commits"
    if not directory.is_dir():
        return []
    return sorted(int(name) for name in os.listdir(directory) if name.isdigit())


@dataclass
class RuntimeProcess:
    """``python -m headrace.runtime`` running the test job, in its own process group."""

    workdir: Path
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    name: str = "run"
    script: Path = JOB
    process: subprocess.Popen[bytes] | None = None
    control_port: int = field(default_factory=procs.free_port)
    metrics_port: int = field(default_factory=procs.free_port)

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.name}.log"

    @property
    def termination_path(self) -> Path:
        return self.workdir / f"{self.name}.termination"

    def start(self) -> RuntimeProcess:
        env = {key: value for key, value in os.environ.items() if not key.startswith(("HEADRACE_", "KUBERNETES_"))}
        env.update(
            {
                contract.ENV_CONTROL_PORT: str(self.control_port),
                contract.ENV_METRICS_PORT: str(self.metrics_port),
                contract.ENV_CONTROL_TOKEN: TOKEN,
                "HEADRACE_CONTROL_BIND": "127.0.0.1",
                "HEADRACE_TERMINATION_MESSAGE_PATH": str(self.termination_path),
                "PYSPARK_PYTHON": sys.executable,
                # The runtime's private conf directory (and Python's other temporary files) under the test's own
                # directory: a driver killed with SIGKILL cannot remove it, and it must not stay in /tmp ...
                "TMPDIR": str(self._tmpdir()),
                # ... and Spark's own: its local directories (spark-*/userFiles, blockmgr-*, the RocksDB state
                # stores' working copies: up to 42 MB a driver) and the JVM's temporary files (native libraries).
                "SPARK_LOCAL_DIRS": str(self._tmpdir()),
                "JDK_JAVA_OPTIONS": f"-Djava.io.tmpdir={self._tmpdir()}",
            }
        )
        env.update(self.env)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "headrace.runtime", str(self.script), *self.args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        return self

    def _tmpdir(self) -> Path:
        tmpdir = self.workdir / f"{self.name}.tmp"
        tmpdir.mkdir(parents=True, exist_ok=True)
        return tmpdir

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the whole process group (driver and JVM); idempotent."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def wait(self, timeout: float) -> int:
        assert self.process is not None
        return self.process.wait(timeout=timeout)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def termination(self) -> dict[str, Any]:
        return dict(json.loads(self.termination_path.read_text()))

    def request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        token: str | None = TOKEN,
        timeout: float = 120,
    ) -> tuple[int, dict[str, Any]]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"http://127.0.0.1:{self.control_port}{path}", data=data, method=method)
        if token is not None:
            request.add_header("Authorization", f"Bearer {token}")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=300) as response:  # noqa: S310 - loopback
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"{}")

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as response:
            return str(response.read().decode())

    def wait_until(self, condition: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                return
            if not self.alive():
                raise AssertionError(
                    f"runtime exited ({self.process.returncode if self.process else None}) "
                    f"while waiting for {what}:\n{self.log()[-4000:]}"
                )
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}:\n{self.log()[-4000:]}")


def finish_bounded(tmp_path: Path, args: list[str], env: dict[str, str]) -> RuntimeProcess:
    """A last attempt in bounded mode (it drains the input, then exits): returned once it has exited with
    `EXIT_OK`, for the caller to read its termination and sink."""
    final = RuntimeProcess(tmp_path, args, {**env, contract.ENV_MODE: "bounded"}, name="final")
    try:
        code = final.start().wait(timeout=400)
    finally:
        final.kill()
    assert code == contract.EXIT_OK, final.log()[-4000:]
    return final
