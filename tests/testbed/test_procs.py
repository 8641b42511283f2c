"""Process supervision with real processes: groups, SIGTERM/SIGKILL, death with the parent, health waits."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed import procs


def _wait_gone(pid: int, timeout_seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_seconds
    while procs.pid_exists(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_stop_kills_the_whole_group_even_when_sigterm_is_ignored(tmp_path: Path) -> None:
    # A shell that ignores SIGTERM and has a grandchild: only SIGKILL to the group ends both.
    script = "trap '' TERM; sleep 300 & echo $! > grandchild.pid; wait"
    process = procs.spawn("stubborn", ["sh", "-c", f"cd {tmp_path} && {script}"], tmp_path / "stubborn.log")
    try:
        pid_file = tmp_path / "grandchild.pid"
        deadline = time.monotonic() + 10
        while not pid_file.exists() or not pid_file.read_text().strip():
            assert time.monotonic() < deadline, "the grandchild never started"
            time.sleep(0.05)
        grandchild = int(pid_file.read_text())
        began = time.monotonic()
        procs.stop(process, grace_seconds=0.5)
        assert time.monotonic() - began < 5
    finally:
        procs.stop(process, grace_seconds=0.5)
    assert not process.alive()
    assert _wait_gone(grandchild)
    procs.stop(process)  # idempotent


def test_children_die_with_a_killed_supervisor(tmp_path: Path) -> None:
    code = (
        "import sys, time; from pathlib import Path; from testbed import procs;"
        f"p = procs.spawn('sleeper', ['sleep', '300'], Path({str(tmp_path / 'sleeper.log')!r}));"
        "print(p.pid, flush=True); time.sleep(300)"
    )
    supervisor = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert supervisor.stdout is not None
        child = int(supervisor.stdout.readline())
        assert procs.pid_exists(child)
    finally:
        supervisor.kill()
        supervisor.wait()
        if supervisor.stdout:
            supervisor.stdout.close()
    assert _wait_gone(child)


def test_waiting_for_a_process_that_exits_reports_its_log(tmp_path: Path) -> None:
    process = procs.spawn("failing", ["sh", "-c", "echo 'bind: address already in use'; exit 3"], tmp_path / "f.log")
    with pytest.raises(procs.ProcessFailedError) as failure:
        procs.wait_until_healthy(process, lambda: False, timeout_seconds=30)
    assert "failing exited with code 3" in str(failure.value)
    assert "bind: address already in use" in str(failure.value)


def test_waiting_gives_up_after_the_timeout(tmp_path: Path) -> None:
    process = procs.spawn("silent", ["sleep", "300"], tmp_path / "s.log")
    ticks = iter(range(100))
    try:
        with pytest.raises(procs.ProcessFailedError, match="did not become healthy within 5s"):
            procs.wait_until_healthy(
                process, lambda: False, timeout_seconds=5, interval_seconds=0, clock=lambda: float(next(ticks))
            )
    finally:
        procs.stop(process)


def test_waiting_returns_once_healthy(tmp_path: Path) -> None:
    process = procs.spawn("sleeper", ["sleep", "300"], tmp_path / "h.log")
    answers = iter([False, False, True])
    try:
        procs.wait_until_healthy(process, lambda: next(answers), timeout_seconds=30, interval_seconds=0)
        assert procs.rss_bytes(process.pid) > 0
    finally:
        procs.stop(process)
    assert procs.rss_bytes(process.pid) == 0


def test_free_port_never_hands_out_a_recent_port_again(monkeypatch: pytest.MonkeyPatch) -> None:
    # The kernel may offer the port it just offered (its probe socket is closed); make it do so every time.
    offers = iter([40001, 40001, 40001, 40003])

    class Probe:
        def __enter__(self) -> Probe:
            return self

        def __exit__(self, *_: object) -> None:
            self.port = 0

        def bind(self, address: tuple[str, int]) -> None:
            self.port = next(offers)

        def getsockname(self) -> tuple[str, int]:
            return ("127.0.0.1", self.port)

    monkeypatch.setattr(procs.socket, "socket", lambda *_: Probe())
    monkeypatch.setattr(procs, "_HANDED_OUT", procs.collections.deque(maxlen=256))
    assert [procs.free_port(), procs.free_port()] == [40001, 40003]


def test_free_port_binds_for_real() -> None:
    ports = {procs.free_port() for _ in range(20)}
    assert len(ports) == 20
    for port in ports:
        with procs.socket.socket() as server:
            server.bind(("127.0.0.1", port))


@pytest.mark.parametrize("signum", ["SIGTERM", "SIGHUP"])
def test_a_plain_kill_unwinds_the_clean_up_of_a_program_in_terminated_as_interrupt(tmp_path: Path, signum: str) -> None:
    """A bench killed with `kill` runs its `finally` blocks (its node stopped, its mounts gone), then exits."""
    cleaned = tmp_path / "cleaned"
    code = (
        "import time; from pathlib import Path; from testbed import procs\n"
        "with procs.terminated_as_interrupt():\n"
        "    try:\n"
        # Short sleeps: a signal that lands between the print and the start of a sleep runs its Python handler only
        # when that sleep returns (CPython checks for handlers on EINTR, not before entering the sleep), so one
        # long sleep missed it now and then (CI: still sleeping 60 s after SIGTERM, the handler run, nothing
        # blocked or pending); a real bench loops in waits of a few seconds at most.
        "        print('ready', flush=True)\n"
        "        for _ in range(3000): time.sleep(0.1)\n"
        "    finally:\n"
        f"        Path({str(cleaned)!r}).write_text('yes')\n"
    )
    number = getattr(signal, signum)
    # Started by a thread that blocks the signal (as some native libraries do): the mask is inherited through exec.
    unblocked = signal.pthread_sigmask(signal.SIG_BLOCK, {number})
    try:
        program = subprocess.Popen(
            [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, unblocked)
    try:
        assert program.stdout is not None
        assert program.stdout.readline() == "ready\n"
        program.send_signal(number)
        try:
            _, stderr = program.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running 60 s after {signum}: {_signal_state(program.pid)}")
    finally:
        program.kill()
        program.communicate()
    assert cleaned.read_text() == "yes"
    assert program.returncode != 0 and "KeyboardInterrupt" in stderr


def _signal_state(pid: int) -> str:
    """What a stuck process was doing: its state, its signal masks and where it waits."""
    proc = Path(f"/proc/{pid}")
    try:
        lines = (proc / "status").read_text().splitlines()
        status = "; ".join(line for line in lines if line.startswith(("State", "Sig", "Shd")))
        return f"{status}; wchan {(proc / 'wchan').read_text()!r}; threads {len(list((proc / 'task').iterdir()))}"
    except OSError as error:
        return f"unreadable ({error})"
