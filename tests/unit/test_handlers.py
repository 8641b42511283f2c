"""The kopf glue: which watches ask the API server for a subset (server-side selectors), and which kinds
file their objects in the cache before any other handler runs (kopf index handlers)."""

from __future__ import annotations

import asyncio
from typing import Any

import kopf
from kopf._cogs.structs.references import Resource

from headrace import handlers
from headrace.api import models, names
from headrace.controller.cache import Cache, Verifier
from headrace.controller.workqueue import WorkQueue

PODS = Resource(group="", version="v1", plural="pods", kind="Pod", namespaced=True)
APPS = Resource(models.GROUP, models.VERSION, models.APP_PLURAL, kind=models.APP_KIND, namespaced=True)


def _registered() -> tuple[kopf.OperatorRegistry, kopf.OperatorSettings]:
    registry = kopf.OperatorRegistry()
    queue = WorkQueue(lambda key: None, workers=1)
    handlers.register(registry, queue, Cache(), 1, verifier=Verifier(set, queue.add, 300))
    settings = kopf.OperatorSettings()

    async def start_and_stop() -> None:
        activities: Any = registry._activities
        by_activity = {str(handler.activity): handler.fn for handler in activities._handlers}
        await by_activity["startup"](settings=settings)
        await by_activity["cleanup"]()

    asyncio.run(start_and_stop())
    return registry, settings


def test_the_pod_watch_asks_the_api_server_for_driver_pods_only() -> None:
    _, settings = _registered()
    assert list(settings.watching.label_selectors.collect(PODS)) == [names.DRIVER_SELECTOR]
    assert list(settings.watching.label_selectors.collect(APPS)) == []


def test_every_watched_kind_is_indexed_into_the_cache() -> None:
    registry, _ = _registered()
    indexing: Any = registry._indexing
    assert indexing.has_handlers(resource=PODS) and indexing.has_handlers(resource=APPS)
