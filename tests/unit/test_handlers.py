"""The kopf glue: which watches ask the API server for a subset (server-side selectors), and which kinds
file their objects in the cache before any other handler runs (kopf index handlers)."""

from __future__ import annotations

from typing import Any

import kopf

from headrace import handlers
from headrace.api import models, names
from headrace.controller.cache import Cache, Verifier
from headrace.controller.workqueue import WorkQueue

PODS = kopf.Resource(group="", version="v1", plural="pods", kind="Pod", namespaced=True)
APPS = kopf.Resource(models.GROUP, models.VERSION, models.APP_PLURAL, kind=models.APP_KIND, namespaced=True)


def _registered() -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()
    queue = WorkQueue(lambda key: None, workers=1)
    handlers.register(registry, queue, Cache(), 1, verifier=Verifier(set, queue.add, 300))
    return registry


def test_the_pod_watch_asks_the_api_server_for_driver_pods_only() -> None:
    settings = kopf.OperatorSettings()
    handlers.configure(settings)  # what the startup handler applies
    assert list(settings.watching.label_selectors.collect(PODS)) == [names.DRIVER_SELECTOR]
    assert list(settings.watching.label_selectors.collect(APPS)) == []


def test_every_watched_kind_is_indexed_into_the_cache() -> None:
    registry = _registered()
    indexing: Any = registry._indexing  # kopf has no public query of its registry
    assert indexing.has_handlers(resource=PODS) and indexing.has_handlers(resource=APPS)
