"""kopf glue: watch StreamingApps and their driver pods, and feed the work queue.

Every handler only unpacks and enqueues; the reconciler decides. Event handlers (unlike kopf's
change handlers and daemons) put no finalizers or annotations on anyone's objects, so deleting an
app never waits for the operator.
"""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime
from typing import Any

import kopf
from kubernetes import client, config

from headrace.adapters.driver import DriverControl
from headrace.adapters.kube import KubeClient
from headrace.api import models, names
from headrace.controller.metrics import OperatorMetrics
from headrace.controller.reconciler import Reconciler
from headrace.controller.workqueue import WorkQueue
from headrace.settings import OperatorSettings

logger = logging.getLogger(__name__)


def api_client() -> client.ApiClient:
    """A client for the cluster the operator runs in (or the kubeconfig's, outside a cluster)."""
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    configuration = client.Configuration.get_default_copy()
    configuration.connection_pool_maxsize = 64
    return client.ApiClient(configuration)


def _now() -> datetime:
    return datetime.now(UTC)


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    """Configure kopf, build the reconciler and start the workers.

    `headrace operator` passes the metrics (already served, before leader election) in the memo."""
    operator_settings = OperatorSettings.from_environ(os.environ)
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=models.GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=models.GROUP)
    metrics: OperatorMetrics = memo["metrics"]
    reconciler = Reconciler(
        KubeClient(api_client()), DriverControl(), metrics, _now, policy=operator_settings.tenant_policy.policy()
    )

    def process(key: tuple[str, str]) -> float | None:
        delay = reconciler.reconcile(*key)
        return operator_settings.resync_seconds if delay is None else min(delay, operator_settings.resync_seconds)

    queue = WorkQueue(process, workers=operator_settings.workers)
    queue.start()
    memo["queue"] = queue
    logger.info("headrace operator started with %d workers", operator_settings.workers)


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    """Stop the workers."""
    queue = memo.get("queue")
    if isinstance(queue, WorkQueue):
        await queue.stop()


def _enqueue(memo: kopf.Memo, namespace: str | None, name: str | None) -> None:
    queue = memo.get("queue")
    if isinstance(queue, WorkQueue) and namespace and name:
        queue.add((namespace, name))


@kopf.on.event(models.GROUP, models.VERSION, models.APP_PLURAL)
def app_changed(namespace: str | None, name: str | None, memo: kopf.Memo, **_: Any) -> None:
    """Any change of a StreamingApp (including the initial listing at start) queues it."""
    _enqueue(memo, namespace, name)


@kopf.on.event(models.GROUP, models.VERSION, models.SAVEPOINT_PLURAL)
def savepoint_changed(namespace: str | None, spec: kopf.Spec, memo: kopf.Memo, **_: Any) -> None:
    """A StreamingSavepoint was created or finished: its app decides what follows."""
    _enqueue(memo, namespace, spec.get("appName"))


@kopf.on.event("pods", labels={names.MANAGED_BY: names.MANAGED_BY_VALUE, names.ROLE: names.ROLE_DRIVER})
def driver_changed(namespace: str | None, labels: kopf.Labels, memo: kopf.Memo, **_: Any) -> None:
    """A driver pod changed (started, failed, deleted): queue its app at once."""
    _enqueue(memo, namespace, labels.get(names.APP))
