"""The watches' cache checked against the API server: one list per kind and watched namespace.

Owns: correcting `headrace.controller.cache` by a fresh list (objects deleted while a watch was broken,
which its relist does not report). `headrace.controller.cache.Verifier` decides when this runs.
"""

from __future__ import annotations

from headrace.adapters.kube import KubeClient
from headrace.controller.cache import KINDS, AppKey, Cache


def verify(kube: KubeClient, cache: Cache, namespaces: list[str]) -> set[AppKey]:
    """List every kind once per watched namespace (or once cluster-wide) and correct the cache by it; returns
    the apps whose objects it corrected (deleted ones the watches missed, changes they had not delivered)."""
    touched: set[AppKey] = set()
    scopes: list[str | None] = list(namespaces) or [None]
    for namespace in scopes:
        for kind in KINDS:
            items, list_rv = kube.list_objects(kind, namespace)
            touched |= cache.replace(kind, namespace, items, list_rv)
    return touched
