"""kopf glue: watch StreamingApps, their StreamingSavepoints and driver pods, and feed the work queue.

Every handler only unpacks and enqueues; the reconciler decides. Event handlers (unlike kopf's
change handlers and daemons) put no finalizers or annotations on anyone's objects, so deleting an
app never waits for the operator. The one exception: a StreamingSavepoint with spec.disposeOnDelete
carries the finalizer `FINALIZER` (kopf adds it to those only), and its deletion handler hands the
disposal of its files to `dispose` (`headrace.controller.disposal`), which bounds its tries.
`headrace.app` builds the queue and the disposer and registers these on its registry.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import kopf

from headrace.api import models, names
from headrace.controller.workqueue import WorkQueue

logger = logging.getLogger(__name__)

FINALIZER = f"{models.GROUP}/dispose-savepoint-files"
# (StreamingSavepoint body, tries so far, seconds since the first) -> None: done; (seconds, why): try again then
Dispose = Callable[[dict[str, Any], int, float], tuple[float, str] | None]


def register(registry: kopf.OperatorRegistry, queue: WorkQueue, workers: int, dispose: Dispose | None = None) -> None:
    """Register the handlers on `registry`; they start, feed and stop `queue` (run by `workers` workers) and,
    with `dispose`, delete the files of StreamingSavepoints deleted with disposeOnDelete."""

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
        settings.persistence.finalizer = FINALIZER
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

    if dispose is None:
        return

    @kopf.on.delete(
        models.GROUP,
        models.VERSION,
        models.SAVEPOINT_PLURAL,
        registry=registry,
        field="spec.disposeOnDelete",
        value=True,
        errors=kopf.ErrorsMode.TEMPORARY,
    )
    def savepoint_deleted(body: kopf.Body, retry: int, runtime: timedelta, **_: Any) -> None:
        """A StreamingSavepoint with disposeOnDelete is being deleted: its files go first (bounded tries)."""
        waiting = dispose(dict(body), retry, runtime.total_seconds())
        if waiting is not None:
            seconds, why = waiting
            raise kopf.TemporaryError(why, delay=seconds)
