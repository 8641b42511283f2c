"""The operator process (`python -m headrace`): the one place it is wired together.

Owns: reading the settings once, serving the metrics, building the Kubernetes clients, the
reconciler and the work queue, registering the kopf handlers on them, and running kopf (under
leader election when configured).
Never: decisions (`headrace.core`), API calls (`headrace.adapters`), reconciling (`headrace.controller`).
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import kopf
import prometheus_client

from headrace import handlers
from headrace.adapters.connect import api_client
from headrace.adapters.driver import DriverControl
from headrace.adapters.kube import KubeClient
from headrace.adapters.lease import LeaseClient
from headrace.controller import leader
from headrace.controller.cache import Cache, Verifier
from headrace.controller.disposal import SavepointDisposer
from headrace.controller.lease_sweep import LeaseSweep
from headrace.controller.metrics import OperatorMetrics
from headrace.controller.nodes import REFRESH_SECONDS, NodeStates
from headrace.controller.reconciler import Reconciler
from headrace.controller.status_recorder import StatusRecorder
from headrace.controller.verify import verify
from headrace.controller.workqueue import Key, WorkQueue
from headrace.settings import OperatorSettings


def _now() -> datetime:
    return datetime.now(UTC)


# kopf's logger of per-object lines: "Handler 'pod-changed' succeeded." for every watch event (25 us of CPU each,
# formatted and written), "Deletion is processed", its handlers' failures.
KOPF_OBJECT_LOGGER = "kopf.objects"


def configure_logging(*, verbose: bool) -> None:
    """kopf's log output at INFO (DEBUG with `verbose`), but kopf's per-object lines only from WARNING unless verbose:
    its warnings and errors (a handler failing, retried) stay, and the operator's own loggers (`headrace.*`) keep
    INFO."""
    kopf.configure(verbose=verbose)
    logging.getLogger(KOPF_OBJECT_LOGGER).setLevel(logging.DEBUG if verbose else logging.WARNING)


logger = logging.getLogger(__name__)


def build_queue(
    settings: OperatorSettings, metrics: OperatorMetrics, kube: KubeClient, cache: Cache, nodes: NodeStates
) -> tuple[WorkQueue, Reconciler]:
    """The work queue whose workers reconcile apps (every app again at least every resync period), and its
    reconciler."""
    savepoints = ThreadPoolExecutor(max_workers=settings.workers, thread_name_prefix="savepoint")
    reconciler = Reconciler(
        kube,
        cache,
        DriverControl(),
        metrics,
        _now,
        policy=settings.tenant_policy,
        operator_namespace=settings.operator_namespace,
        peers=settings.peers(),
        savepoint_runner=savepoints.submit,  # a savepoint call never holds a reconcile worker
        nodes=nodes,
    )

    def process(key: Key) -> float | None:
        delay = reconciler.reconcile(*key)
        return settings.resync_seconds if delay is None else min(delay, settings.resync_seconds)

    queue = WorkQueue(
        process,
        workers=settings.workers,
        on_wait=metrics.record_queue_wait,
        prepare=lambda key: reconciler.ask_ahead(*key),
    )
    return queue, reconciler


def may_watch_nodes(kube: KubeClient) -> bool:
    """Whether to watch Nodes (a drain or a lost node noticed in about a second): not where the operator may not list
    them (an admin removed the chart's grant), said once here, so that kopf never retries a forbidden watch; an API
    server that cannot be asked yet counts as yes."""
    try:
        allowed = kube.may_list_nodes()
    except Exception as error:
        logger.warning("cannot ask whether the operator may list Nodes (watching them anyway): %s", error)
        return True
    if not allowed:
        logger.warning(
            "the operator may not list and watch Nodes: drains and lost nodes are noticed when each app is next "
            "reconciled (its driver's Node read at most every %.0f s), not at once; grant list and watch on nodes "
            "(the chart's ClusterRole does) and restart the operator to follow them at once",
            REFRESH_SECONDS,
        )
    return allowed


def main(argv: Sequence[str] | None = None) -> int:
    """Run the operator until it is stopped."""
    parser = argparse.ArgumentParser(prog="python -m headrace", description="Run the Headrace operator.")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    settings = OperatorSettings.from_environ(os.environ)
    configure_logging(verbose=args.verbose)
    metrics = OperatorMetrics(prometheus_client.REGISTRY)
    if settings.metrics_port:  # served before leader election: a standby shows headrace_operator_leader 0
        prometheus_client.start_http_server(settings.metrics_port)
    kube, cache = KubeClient(api_client()), Cache()
    nodes = NodeStates(kube.read_node)
    queue, reconciler = build_queue(settings, metrics, kube, cache, nodes)
    sweep = LeaseSweep(cache, reconciler.leases, queue.add, _now)  # a lost driver noticed from its Lease
    registry = kopf.OperatorRegistry()
    disposing = KubeClient(api_client())
    disposer = SavepointDisposer(disposing, StatusRecorder(disposing, cache, metrics), DriverControl(), _now)
    verifier = Verifier(functools.partial(verify, kube, cache, settings.namespaces), queue.add, settings.resync_seconds)
    watched = nodes.observed if may_watch_nodes(kube) else None
    handlers.register(
        registry,
        queue,
        cache,
        settings.workers,
        verifier=verifier,
        dispose=disposer.dispose,
        nodes=watched,
        lease_sweep=sweep,
    )

    def run() -> bool:
        """Run kopf until it stops; True once no reconcile runs any more."""
        kopf.run(
            registry=registry,
            clusterwide=not settings.namespaces,
            namespaces=settings.namespaces,
            standalone=True,
            liveness_endpoint=f"http://0.0.0.0:{settings.health_port}/healthz" if settings.health_port else None,
        )
        return queue.wait_idle(leader.RECONCILES_DONE_SECONDS)  # the cleanup handler stopped the workers

    if not settings.leader_election or settings.lease_namespace is None:  # (election needs a namespace: see settings)
        metrics.leader.set(1)
        run()
        return 0
    # A client of its own: renewing the Lease never waits behind reconciles for a connection.
    leases = LeaseClient(
        api_client(), settings.lease_namespace, settings.lease_name, timeout_seconds=settings.renew_deadline_seconds / 2
    )
    elector = leader.LeaderElector(leases, leader.ElectionConfig.from_settings(settings), metrics.leader)
    leader.run_elected(elector, settings.health_port, run)
    return 0
