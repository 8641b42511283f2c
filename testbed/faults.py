"""The faults the chaos suite injects on the local cluster, and when it injects them.

Owns: the fault kinds' names, the pure choice of a schedule (every kind once per round, rounds shuffled by
a seeded generator, a random pause before each fault; or, for the short run, every kind once in groups of
faults injected together), and small effectful injectors: signalling the
processes of one container from this machine (the node's containers are this machine's processes, found
by the container id in their cgroup).
Never: decides whether the app recovered or checks its sink (testbed.chaos does).
"""

from __future__ import annotations

import os
import random
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DRIVER_POD_DELETED = "driver pod deleted"
DRIVER_SIGKILL = "driver SIGKILL"
EXECUTOR_DELETED = "executor deleted"
OPERATOR_LEADER_KILLED = "operator leader SIGKILL"
APISERVER_STOPPED = "API server stopped"
OBJECT_STORE_STOPPED = "S3 server stopped"
DRIVER_SIGSTOP = "driver frozen (SIGSTOP)"
OPERATOR_RESTART_IN_SAVEPOINT = "operator restart during a savepoint"
KINDS = (
    DRIVER_POD_DELETED,
    DRIVER_SIGKILL,
    EXECUTOR_DELETED,
    OPERATOR_LEADER_KILLED,
    APISERVER_STOPPED,
    OBJECT_STORE_STOPPED,
    DRIVER_SIGSTOP,
    OPERATOR_RESTART_IN_SAVEPOINT,
)


@dataclass(frozen=True)
class Fault:
    """One fault to inject: its kind, after a pause of `pause` seconds (the random moment)."""

    kind: str
    pause: float


def schedule(
    rounds: int, seed: int, pauses: tuple[float, float] = (2.0, 8.0), kinds: Sequence[str] = KINDS
) -> list[Fault]:
    """`rounds` rounds of every kind once, each round in its own random order, each fault after a random pause
    within `pauses`; the same seed gives the same schedule (print it to replay a run)."""
    chooser = random.Random(seed)  # noqa: S311 - a replayable order, not a secret
    faults: list[Fault] = []
    for _ in range(rounds):
        order = list(kinds)
        chooser.shuffle(order)
        faults += [Fault(kind, round(chooser.uniform(*pauses), 1)) for kind in order]
    return faults


# The short run (CI): every kind once, in groups injected at the same moment, so that the outages and the faults
# that need no new driver overlap the slow ones instead of following them. A group never holds two faults that
# need the same thing to act on (one driver, one operator): the S3 outage stalls commits while the executor is
# replaced and the operator's leader restarts; the driver is frozen while the API server is away, so the outage
# overlaps the heartbeat timeout the freeze waits out anyway, and the operator can only replace the driver once
# the API answers again. The three that need a new driver each stay in a group of their own otherwise.
SHORT_GROUPS: tuple[tuple[str, ...], ...] = (
    (OBJECT_STORE_STOPPED, EXECUTOR_DELETED, OPERATOR_LEADER_KILLED),
    (APISERVER_STOPPED, DRIVER_SIGSTOP),
    (DRIVER_POD_DELETED,),
    (DRIVER_SIGKILL,),
    (OPERATOR_RESTART_IN_SAVEPOINT,),
)


@dataclass(frozen=True)
class Group:
    """Faults injected together (at one moment) after a pause of `pause` seconds."""

    kinds: tuple[str, ...]
    pause: float


def grouped(
    seed: int, pauses: tuple[float, float] = (1.0, 3.0), groups: Sequence[Sequence[str]] = SHORT_GROUPS
) -> list[Group]:
    """The groups in a random order, each after a random pause within `pauses`; the same seed gives the same
    order."""
    chooser = random.Random(seed)  # noqa: S311 - a replayable order, not a secret
    order = [tuple(group) for group in groups]
    chooser.shuffle(order)
    return [Group(kinds, round(chooser.uniform(*pauses), 1)) for kinds in order]


def one_by_one(schedule: Sequence[Fault]) -> list[Group]:
    """A schedule of single faults as groups of one (the long run)."""
    return [Group((fault.kind,), fault.pause) for fault in schedule]


def container_id(pod: Any, name: str | None = None) -> str:
    """The runtime's id of a pod's container (`name`, else the first), from its status."""
    statuses = [s for s in pod.status.container_statuses or [] if name is None or s.name == name]
    if not statuses or not statuses[0].container_id:
        raise RuntimeError(f"pod {pod.metadata.name} has no running container {name or ''}")
    return str(statuses[0].container_id).split("://", 1)[-1]


def container_pids(container: str, proc: Path = Path("/proc")) -> list[int]:
    """The processes on this machine that run in the container (its id is in their cgroup path)."""
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if container in (entry / "cgroup").read_text():
                found.append(int(entry.name))
        except OSError:  # gone meanwhile, or a kernel thread
            continue
    return sorted(found)


def command_name(pid: int) -> str:
    """A process's command name ('' if it is gone)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def signal_container(container: str, signum: signal.Signals, only: str | None = None) -> list[int]:
    """Send `signum` to every process of the container (or only those whose command name is `only`); the pids
    signalled. Raises if there was none (the fault would not have happened)."""
    pids = [pid for pid in container_pids(container) if only is None or command_name(pid) == only]
    if not pids:
        raise RuntimeError(f"no process {only or ''} in container {container[:12]} to send {signum.name}")
    for pid in pids:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            continue
    return pids
