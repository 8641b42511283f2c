"""Carries out the disposal of a deleted StreamingSavepoint's files (its finalizer's work).

Observes the StreamingSavepoint being deleted, its app, the app's current driver and how to reach it
(token, certificate); `headrace.core.disposal` decides; this asks the driver to delete the directory, records why a
deletion waits in the StreamingSavepoint's `status.message`, and posts the outcome as Events on the
StreamingSavepoint and its app. Every error (API, driver) counts as a failed try, so the deletion
is released after the bounded number of tries instead of waiting forever.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

from headrace.adapters.driver import DriverControl, DriverEndpoint, DriverUnavailable
from headrace.adapters.kube import KubeClient
from headrace.controller.drivers import driver_endpoint
from headrace.controller.observe import current_driver_pod, logged_savepoint, serves_control_tls
from headrace.controller.status_recorder import StatusRecorder
from headrace.core.disposal import (
    AppFacts,
    DisposalFacts,
    Dispose,
    Release,
    Retry,
    after_failed_call,
    decide_disposal,
)

logger = logging.getLogger(__name__)

NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")  # a StreamingApp name (spec.appName is tenant text)
REFUSED_STATUSES = frozenset({400, 403, 404})  # the driver checked the path and refused, or does not know the call


class SavepointDisposer:
    """Deletes the files of StreamingSavepoints deleted with disposeOnDelete, through their app's driver."""

    def __init__(
        self, kube: KubeClient, recorder: StatusRecorder, driver: DriverControl, clock: Callable[[], datetime]
    ) -> None:
        self.kube = kube
        self.recorder = recorder
        self.driver = driver
        self.clock = clock

    def dispose(self, body: dict[str, Any], tries: int, waited_seconds: float) -> tuple[float, str] | None:
        """One try; None when the deletion may finish, else (seconds until the next try, why it waits)."""
        facts = DisposalFacts(
            namespace=body["metadata"]["namespace"],
            name=body["metadata"]["name"],
            app_name=str((body.get("spec") or {}).get("appName") or ""),
            phase=(body.get("status") or {}).get("phase"),
            path=(body.get("status") or {}).get("path"),
            app=None,
            tries=tries,
            waited_seconds=waited_seconds,
        )
        app: dict[str, Any] | None = None
        try:
            app, facts, endpoint = self._observe(facts)
            decided = decide_disposal(facts)
            if isinstance(decided, Dispose):
                if endpoint is None:
                    raise DriverUnavailable("the app's control Secret has no token or certificate")
                answer = self.driver.dispose_savepoint(replace(endpoint, address=decided.address), decided.path)
                deleted = "deleted" if isinstance(answer, dict) and answer.get("deleted") else "already gone"
                message = f"StreamingSavepoint {facts.name}: files at {decided.path} {deleted}"
                self._post(body, app, "Normal", "SavepointDisposed", message)
                return None
        except Exception as error:
            refused = isinstance(error, DriverUnavailable) and error.status in REFUSED_STATUSES
            logger.warning("disposing savepoint %s/%s failed: %s", facts.namespace, facts.name, error)
            decided = after_failed_call(facts, f"{type(error).__name__}: {error}", refused=refused)
        return self._settle(body, app, decided)

    def _observe(self, facts: DisposalFacts) -> tuple[dict[str, Any] | None, DisposalFacts, DriverEndpoint | None]:
        if not NAME.match(facts.app_name):
            return None, facts, None
        app = self.kube.get_app(facts.namespace, facts.app_name)
        if app is None:
            return None, facts, None
        spec, status = app.get("spec") or {}, app.get("status") or {}
        restore = spec.get("restoreFrom") or {}
        needed_paths = {
            status.get("suspendedSavepoint"),
            restore.get("path"),
            (status.get("run") or {}).get("restoredFrom"),
        }
        pod = current_driver_pod(app, self.kube.list_driver_pods(facts.namespace, facts.app_name))
        endpoint = None
        if pod is not None:  # TLS unless the pod predates it (docs/security.md); never plain HTTP to a TLS pod
            address = pod["status"]["podIP"]
            endpoint = driver_endpoint(self.kube, facts.namespace, facts.app_name, address, tls=serves_control_tls(pod))
        known = AppFacts(
            savepoint_root=(spec.get("state") or {}).get("savepointDir"),
            phase=status.get("phase"),
            driver_address=endpoint.address if endpoint is not None else None,
            needed_paths=frozenset(path for path in needed_paths if path),
            needed_names=frozenset(name for name in (restore.get("savepoint"), logged_savepoint(app)) if name),
        )
        return app, replace(facts, app=known), endpoint

    def _settle(
        self, body: dict[str, Any], app: dict[str, Any] | None, decided: Retry | Release
    ) -> tuple[float, str] | None:
        metadata = body["metadata"]
        if isinstance(decided, Retry):
            message = f"deletion waits to delete the savepoint's files: {decided.why}; next try in {decided.seconds:g}s"
            try:
                self.recorder.waiting_deletion(metadata["namespace"], metadata["name"], message)
            except Exception:
                logger.exception("could not record why %s/%s waits", metadata["namespace"], metadata["name"])
            return decided.seconds, message
        if decided.left is None:
            logger.info("savepoint %s/%s: %s", metadata["namespace"], metadata["name"], decided.why)
            return None
        message = (
            f"StreamingSavepoint {metadata['name']}: its files are left at {decided.left}: {decided.why}. "
            "Delete them with your storage tools if nothing needs them"
        )
        self._post(body, app, "Warning", "SavepointFilesLeft", message)
        return None

    def _post(self, body: dict[str, Any], app: dict[str, Any] | None, type_: str, reason: str, message: str) -> None:
        now = self.clock()
        for involved in (body, app):
            if involved is None:
                continue
            try:
                self.kube.post_event(involved, type_=type_, reason=reason, message=message, now=now)
            except Exception:
                logger.exception("could not post event %s", reason)
