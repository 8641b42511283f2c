"""Supervision of the testbed's long-running child processes.

Owns: starting a binary in its own process group with its output in a log file, waiting until it is
healthy (failing fast, with the log's tail, when it dies), stopping its whole group (SIGTERM, then
SIGKILL after a grace period), free TCP ports, reading a process's memory from /proc, and turning a plain kill
of the calling program into an interrupt (so its clean-up runs).
Never: knows what a component is or how to configure it; that belongs to its callers.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType, TracebackType
from typing import Self

_PR_SET_PDEATHSIG = 1
DEFAULT_GRACE_SECONDS = 5.0


@contextlib.contextmanager
def terminated_as_interrupt() -> Iterator[None]:
    """While inside: SIGTERM and SIGHUP raise KeyboardInterrupt in the main thread, so the `with` blocks around the
    caller unwind (nodes stopped, mounts unmounted, directories removed) when a bench or the cluster is killed
    with a plain `kill` or its terminal closes. Without it Python exits at once and leaves them behind (a killed
    bench left its node's containerd mounts in /tmp/headrace-bench-*). Elsewhere than the main thread: no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handled = {signal.SIGTERM, signal.SIGHUP}
    previous = {signum: signal.signal(signum, _interrupt) for signum in handled}
    # A signal mask is inherited through fork and exec: a program started by a thread that blocked these signals
    # would never see them, and its clean-up would wait for a SIGKILL instead.
    blocked = signal.pthread_sigmask(signal.SIG_UNBLOCK, handled)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


class Started:
    """A context manager over `start()` and `stop()`: `stop()` also runs when `start()` fails part-way,
    so a service that was half started leaves nothing behind. Subclasses make `stop()` idempotent."""

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()


class HttpServerThread(Started):
    """A service that is an HTTP server in a thread of this process: `_serve(address, port, handler)` starts it
    (from `start()`), `stop()` shuts it down and joins the thread. Idempotent."""

    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    def _serve(self, address: str, port: int, handler: type[BaseHTTPRequestHandler]) -> None:
        self._server = ThreadingHTTPServer((address, port), handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join()
            self._thread = None


class ProcessInWorkdir(Started):
    """A service that is one process group with a work directory of its own (its data, its log): `stop()` ends the
    group (SIGTERM, then SIGKILL after a grace period) and removes the directory. Idempotent. Subclasses set
    `workdir` and `_process` (None until started)."""

    workdir: Path
    _process: Process | None

    def stop(self) -> None:
        try:
            if self._process is not None:
                stop(self._process, grace_seconds=DEFAULT_GRACE_SECONDS)
                self._process = None
        finally:
            shutil.rmtree(self.workdir, ignore_errors=True)


class ProcessFailedError(RuntimeError):
    """A supervised process exited, or never became healthy; the message carries its log's tail."""


def log_tail(path: Path, lines: int = 40) -> str:
    """The last `lines` lines of a log file ('' if it does not exist)."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


# Resolved once in the parent: the child must not do more than one system call before exec.
_LIBC = ctypes.CDLL(None, use_errno=True)


def _die_with_parent() -> None:
    """Runs in the child before exec: ask the kernel to SIGKILL it when its parent thread dies.

    So a supervisor killed with SIGKILL (or a test session stopped hard) leaves no orphan behind.
    """
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass
class Process:
    """One supervised child: its name, its Popen handle and its log file."""

    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        """Process id; also the id of the process group it leads."""
        return self.popen.pid

    def alive(self) -> bool:
        """True while the process has not exited."""
        return self.popen.poll() is None

    def tail(self, lines: int = 40) -> str:
        """The last lines of its log."""
        return log_tail(self.log_path, lines)

    def failure(self, reason: str) -> ProcessFailedError:
        """An error naming this process, the reason and its log's tail."""
        return ProcessFailedError(f"{self.name} {reason}; last lines of {self.log_path}:\n{self.tail()}")


def spawn(name: str, argv: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None) -> Process:
    """Start `argv` in a new session (its own process group), stdout and stderr appended to `log_path`."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        popen = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            start_new_session=True,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - it only calls prctl, taking no lock
        )
    return Process(name, popen, log_path)


def _signal_group(pid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)


def stop(process: Process, grace_seconds: float = DEFAULT_GRACE_SECONDS) -> None:
    """Stop the process and its group: SIGTERM, then SIGKILL after `grace_seconds`. Idempotent."""
    if process.alive():
        _signal_group(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.popen.wait(timeout=grace_seconds)
    # Whatever is left in the group (the leader, or children it started) is killed outright.
    _signal_group(process.pid, signal.SIGKILL)
    process.popen.wait()


def wait_until_healthy(
    process: Process,
    check: Callable[[], bool],
    *,
    timeout_seconds: float,
    interval_seconds: float = 0.1,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Poll `check` until it returns True; raise with the log's tail if the process dies or time runs out."""
    deadline = clock() + timeout_seconds
    while True:
        if not process.alive():
            raise process.failure(f"exited with code {process.popen.returncode} before becoming healthy")
        if check():
            return
        if clock() > deadline:
            raise process.failure(f"did not become healthy within {timeout_seconds:.0f}s")
        time.sleep(interval_seconds)


_HANDED_OUT: collections.deque[int] = collections.deque(maxlen=256)
_HANDED_OUT_LOCK = threading.Lock()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on `host` a moment ago (the kernel's choice for port 0).

    The probe socket is closed before the caller binds, so the kernel may offer the same port to the next
    probe (about 1 in 14,000 here); a port handed out recently by this process is never handed out again.
    """
    with _HANDED_OUT_LOCK:
        while True:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind((host, 0))
                port = int(sock.getsockname()[1])
            if port not in _HANDED_OUT:
                _HANDED_OUT.append(port)
                return port


def bind_conflict(log_text: str) -> bool:
    """True if a log (or an error carrying its tail) says a port was taken: another process bound a port
    `free_port` had offered, between the probe and the bind. Go and Python word it differently."""
    return "address already in use" in log_text.lower()


def pid_exists(pid: int) -> bool:
    """True if a process (not a reaped zombie) with this id exists."""
    try:
        status = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return status.rsplit(")", 1)[1].split()[0] != "Z"


def rss_bytes(pid: int) -> int:
    """Resident memory of a process in bytes (VmRSS), or 0 if it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return 0
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0
