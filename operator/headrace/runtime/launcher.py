"""``python -m headrace.runtime <script.py> [args]``: run an unmodified PySpark streaming script.

Owns: the order of things in the driver process: parse settings, write the merged Spark
configuration before the JVM starts, serve metrics and the control endpoint, patch PySpark, run the
script in-process with ``runpy``, wait for its queries, and turn what happened into an exit code
and a termination message. SIGTERM (the pod is being deleted) exits at once, JVM included: the
checkpoint is consistent at any point and the next attempt replays a batch in flight; only a
savepoint being taken is finished (and answered) first. With a driver Lease (``lease``), losing it
ends the JVM and the process at once (EXIT_LEASE_LOST, reason LeaseLost, reported before the JVM is ended; what the
script or its queries raise once their JVM is gone is that stop, never reported as their failure); every other exit
releases it once the JVM is done.
Never: implements query handling, savepoints or restores itself (``agent``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import runpy
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType

from pyspark.errors import StreamingQueryException

from headrace.api import runtime_contract as contract
from headrace.runtime import jvm, lease, patching, termination
from headrace.runtime.agent import Agent, CheckpointBehindError, SinkAheadError, StartRefusedError
from headrace.runtime.control import ControlServer, server_context
from headrace.runtime.metrics import RuntimeMetrics
from headrace.runtime.phases import PhaseClock, process_start_time, watch_spark
from headrace.runtime.restore import RestoreIncompatibleError
from headrace.runtime.settings import RuntimeSettings, SettingsError, settings_from_env
from headrace.runtime.sparkconf import local_fs_conf, prepare_conf_dir

log = logging.getLogger("headrace.runtime")
TERMINATED = termination.failed("Terminated", "SIGTERM: stopped without a savepoint, resumable from the checkpoint")
USAGE = "usage: python -m headrace.runtime <script.py> [script arguments...]"
JVM_EXIT_WAIT_SECONDS = 5.0
ANSWER_GRACE_SECONDS = 0.5  # after a savepoint ends, for its HTTP answer to leave before the exit


class TerminationRequestedError(BaseException):
    """SIGTERM arrived (the pod is being deleted): stop the queries and exit."""


def _kill_jvm() -> None:
    """SIGKILL the JVM the script's SparkSession launched (in a pod it would die with the container) and wait
    until it is gone (it writes the checkpoint: a Lease is released only after it)."""
    from pyspark import SparkContext

    process = getattr(SparkContext._gateway, "proc", None)
    if process is not None:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            process.kill()
            process.wait(JVM_EXIT_WAIT_SECONDS)


def lease_lost(why: str) -> termination.Outcome:
    """The outcome of a driver that lost its Lease for `why`."""
    return termination.lease_lost(f"{why}: stopped writing at once (another driver may hold the checkpoint)")


def exit_lease_lost(settings: RuntimeSettings, why: str) -> None:
    """The driver Lease is lost: report it (a small local file, written before anything can fail for the JVM's end:
    the main thread then sees the script fail), end the JVM (every write), exit (EXIT_LEASE_LOST)."""
    outcome = lease_lost(why)
    termination.write_termination_message(settings.termination_message_path, outcome)
    _kill_jvm()
    log.critical("exiting %d: %s %s", outcome.exit_code, outcome.reason, outcome.message)
    for handler in logging.getLogger().handlers:
        handler.flush()
    os._exit(outcome.exit_code)


def exit_now(agent: Agent, settings: RuntimeSettings) -> None:
    """Report the termination and end the process and its JVM without stopping queries or the context."""
    outcome = agent.outcome_on_termination(TERMINATED)
    log.info("SIGTERM: exiting now without stopping the queries (%s); the checkpoint is consistent", outcome.reason)
    termination.write_termination_message(settings.termination_message_path, outcome)
    _kill_jvm()
    agent.release_lease()
    for handler in logging.getLogger().handlers:
        handler.flush()
    os._exit(outcome.exit_code)


def _exit_after_operation(agent: Agent, settings: RuntimeSettings) -> None:
    agent.wait_for_operation()
    time.sleep(ANSWER_GRACE_SECONDS)
    exit_now(agent, settings)


def sigterm_handler(agent: Agent, settings: RuntimeSettings) -> Callable[[int, FrameType | None], None]:
    """Exit at once, unless a savepoint is being taken: then exit once it is taken and answered."""

    def handle(signum: int, frame: FrameType | None) -> None:
        if agent.operation_in_progress():
            log.info("SIGTERM while a savepoint is taken: exiting once it is answered")
            threading.Thread(target=_exit_after_operation, args=(agent, settings), daemon=True).start()
            return
        exit_now(agent, settings)

    return handle


def utc_now() -> datetime:
    return datetime.now(UTC)


def _refused(error: RestoreIncompatibleError | CheckpointBehindError) -> termination.Outcome:
    """The outcome of a query start the runtime refused (the operator does not restart these)."""
    if isinstance(error, SinkAheadError):
        return termination.sink_ahead(str(error))
    if isinstance(error, CheckpointBehindError):
        return termination.checkpoint_behind(str(error))
    return termination.restore_incompatible(str(error))


def run_script(script: str, args: Sequence[str], agent: Agent) -> termination.Outcome:
    """Run the script as ``__main__``, then wait for the queries it left running. Once the driver Lease is lost, the
    outcome is LeaseLost whatever the script or its queries did meanwhile (they fail as the JVM is ended)."""
    try:
        outcome = _script_outcome(script, args, agent)
    except Exception:
        if agent.lease_lost is None:
            raise
    else:
        if agent.lease_lost is None:
            return outcome
    why = agent.lease_lost
    assert why is not None
    return lease_lost(why)


def _its_own(agent: Agent) -> bool:
    """Whether what the script raised is its own failure, not the runtime stopping it (a stop-with-savepoint, or the
    JVM ended for a lost Lease)."""
    return not agent.stopping and agent.lease_lost is None


def _script_outcome(script: str, args: Sequence[str], agent: Agent) -> termination.Outcome:
    sys.argv = [script, *args]
    sys.path.insert(0, str(Path(script).resolve().parent))
    try:
        runpy.run_path(script, run_name="__main__")
    except (RestoreIncompatibleError, CheckpointBehindError) as error:
        log.error("%s", error)
        return _refused(error)
    except TerminationRequestedError:
        return TERMINATED
    except StartRefusedError as error:
        log.info("%s", error)
    except SystemExit as exit_request:
        if exit_request.code not in (None, 0) and _its_own(agent):
            return termination.failed("ScriptExited", f"the script exited with {exit_request.code}")
    except StreamingQueryException as error:
        if _its_own(agent):
            return termination.failed("QueryFailed", str(error))
    except Exception as error:
        if _its_own(agent):
            log.exception("the script failed")
            return termination.failed("ScriptFailed", termination.describe(error))
    return agent.wait_for_queries()


def _control_tls(settings: RuntimeSettings) -> ssl.SSLContext | None:
    """The control endpoint's TLS settings, when the operator mounted the app's certificate (raises if unreadable)."""
    return server_context(settings.control_tls_dir) if settings.control_tls_dir else None


Edges = tuple[ssl.SSLContext | None, lease.LeaseGuard | None]


def _secured_edges(settings: RuntimeSettings) -> Edges | termination.Outcome:
    """The control endpoint's TLS settings and the driver Lease's guard, or why the runtime cannot start."""
    problem = lease.settings_problem(settings)
    if problem is not None:
        return termination.usage(problem)
    try:
        guard = lease.guard_from_settings(settings, functools.partial(exit_lease_lost, settings))
    except (OSError, ssl.SSLError) as error:
        return termination.usage(f"{contract.ENV_DRIVER_LEASE}: cannot read the pod's ServiceAccount CA: {error}")
    try:
        return _control_tls(settings), guard
    except (OSError, ssl.SSLError) as error:  # never served as plain HTTP instead
        return termination.usage(f"{contract.ENV_CONTROL_TLS_DIR}: cannot load the control certificate: {error}")


def _start_servers(
    settings: RuntimeSettings, agent: Agent, metrics: RuntimeMetrics, tls: ssl.SSLContext | None
) -> tuple[object, ControlServer]:
    metrics_server = metrics.serve(settings.bind_address, settings.metrics_port)
    control = ControlServer(agent, settings.control_token, settings.bind_address, settings.control_port, tls=tls)
    control.start()
    if not settings.control_token:
        log.warning("HEADRACE_CONTROL_TOKEN is not set: every control request will be refused")
    scheme = "HTTPS" if control.tls else "plain HTTP"
    log.info("metrics on :%d, control endpoint (%s) on :%d", settings.metrics_port, scheme, control.port)
    return metrics_server, control


def run(argv: Sequence[str], env: Mapping[str, str]) -> termination.Outcome:
    """Everything between parsing the command line and exiting; returns the outcome."""
    if not argv or argv[0] in ("-h", "--help"):
        return termination.usage(USAGE)
    try:
        settings = settings_from_env(env)
    except SettingsError as error:
        return termination.usage(str(error))
    script = argv[0]
    if not os.path.isfile(script):
        return termination.usage(f"no such script: {script}")
    edges = _secured_edges(settings)
    if isinstance(edges, termination.Outcome):
        return edges
    tls, guard = edges
    conf_dir = Path(tempfile.mkdtemp(prefix="headrace-conf-"))
    defaults = {**local_fs_conf(env.get("SPARK_HOME")), **jvm.executor_conf(env)}
    prepare_conf_dir(settings, env.get("SPARK_CONF_DIR"), conf_dir, defaults)
    os.environ["SPARK_CONF_DIR"] = str(conf_dir)
    uninstall_jvm = jvm.install(os.environ)
    metrics = RuntimeMetrics()
    phases = PhaseClock(metrics, process_start_time())
    metrics.start_time.set(phases.started_at)
    agent = Agent(settings, metrics, utc_now, phases)
    agent.lease = guard
    if guard is not None:
        guard.start()  # an active driver takes the Lease while its JVM starts; a standby watches it
    metrics_server, control = _start_servers(settings, agent, metrics, tls)
    uninstall = patching.install(agent)
    signal.signal(signal.SIGTERM, sigterm_handler(agent, settings))
    watch_spark(phases)
    try:
        return run_script(script, argv[1:], agent)
    except TerminationRequestedError:
        return TERMINATED
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        uninstall()
        uninstall_jvm()
        try:
            agent.shutdown_spark()
        finally:
            agent.release_lease()
            control.stop()
            metrics_server.shutdown()  # type: ignore[attr-defined]
            shutil.rmtree(conf_dir, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    settings_path = os.environ.get("HEADRACE_TERMINATION_MESSAGE_PATH")
    outcome = run(sys.argv[1:] if argv is None else argv, os.environ)
    if outcome.exit_code == contract.EXIT_USAGE:
        print(outcome.message, file=sys.stderr)
    path = settings_path or contract.TERMINATION_MESSAGE_PATH
    if outcome.exit_code != contract.EXIT_LEASE_LOST:  # the guard's exit wrote it first (never truncated here)
        termination.write_termination_message(path, outcome)
    log.info("exiting %d: %s %s", outcome.exit_code, outcome.reason, outcome.message)
    return outcome.exit_code
