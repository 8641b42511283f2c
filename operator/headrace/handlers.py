"""kopf glue: watch StreamingApps, their StreamingSavepoints and driver pods, and feed the work queue.

Every handler only unpacks and enqueues; the reconciler decides. Event handlers (unlike kopf's
change handlers and daemons) put no finalizers or annotations on anyone's objects, so deleting an
app never waits for the operator. `headrace.app` builds the queue and registers these on its registry.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from headrace.api import models, names
from headrace.controller.workqueue import WorkQueue

logger = logging.getLogger(__name__)


def register(registry: kopf.OperatorRegistry, queue: WorkQueue, workers: int) -> None:
    """Register the handlers on `registry`; they start, feed and stop `queue` (run by `workers` workers)."""

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        """Credentials as the kubernetes client finds them (kopf's default, which a registry of our own lacks)."""
        return kopf.login_via_client(**kwargs)

    @kopf.on.startup(registry=registry)
    async def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
        """Configure kopf and start the workers."""
        settings.posting.level = logging.WARNING
        settings.watching.server_timeout = 300
        settings.watching.client_timeout = 330
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=models.GROUP)
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=models.GROUP)
        queue.start()
        logger.info("headrace operator started with %d workers", workers)

    @kopf.on.cleanup(registry=registry)
    async def cleanup(**_: Any) -> None:
        """Stop the workers."""
        await queue.stop()

    def enqueue(namespace: str | None, name: str | None) -> None:
        if namespace and name:
            queue.add((namespace, name))

    @kopf.on.event(models.GROUP, models.VERSION, models.APP_PLURAL, registry=registry)
    def app_changed(namespace: str | None, name: str | None, **_: Any) -> None:
        """Any change of a StreamingApp (including the initial listing at start) queues it."""
        enqueue(namespace, name)

    @kopf.on.event(models.GROUP, models.VERSION, models.SAVEPOINT_PLURAL, registry=registry)
    def savepoint_changed(namespace: str | None, spec: kopf.Spec, **_: Any) -> None:
        """A StreamingSavepoint was created or finished: its app decides what follows."""
        enqueue(namespace, spec.get("appName"))

    labels = {names.MANAGED_BY: names.MANAGED_BY_VALUE, names.ROLE: names.ROLE_DRIVER}

    @kopf.on.event("pods", labels=labels, registry=registry)
    def driver_changed(namespace: str | None, labels: kopf.Labels, **_: Any) -> None:
        """A driver pod changed (started, failed, deleted): queue its app at once."""
        enqueue(namespace, labels.get(names.APP))
