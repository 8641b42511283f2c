"""Creating an attempt's objects (the `EnsureDriver` action): the app's shared objects, the control Secret, the
attempt's ConfigMap and Service, then its driver pod.

Owns: the order and concurrency of those creates (everything but the pod at once, on a pool shared by every
reconcile worker, then the pod, which needs its ServiceAccount and mounts the Secret and ConfigMap); the cheap
restart (`EnsuredObjects`: only the attempt's own objects when this process made the shared ones); pruning
other attempts' objects; the `inside:EnsureDriver/<kind>` failpoints; minting the control token and
certificate (randomness and time come from here, the edge) and completing a control Secret an older operator
made (`complete_control_secret`: the keys this version's pods mount). Never: deciding which attempt to make.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from datetime import datetime
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec

from headrace.adapters.kube import KubeClient
from headrace.api import names
from headrace.controller import failpoints
from headrace.controller.cache import Cache
from headrace.controller.control_secrets import ControlSecrets
from headrace.controller.ensured import EnsuredObjects, digest
from headrace.core.plan import EnsureDriver
from headrace.render import control_tls, manifests
from headrace.render.security import Peers

CREATE_THREADS = 16  # an attempt's independent objects are created at once, from every reconcile worker


class AttemptObjects:
    """Thread-safe: every reconcile worker creates through one instance (callers serialize per app)."""

    def __init__(
        self,
        kube: KubeClient,
        cache: Cache,
        secrets_: ControlSecrets,
        clock: Callable[[], datetime],
        *,
        operator_namespace: str | None,
        peers: Peers,
    ) -> None:
        self.kube = kube
        self.cache = cache
        self.secrets = secrets_  # told when the operator writes a control Secret
        self.clock = clock
        self.operator_namespace = operator_namespace  # the operator pod's namespace (settings: POD_NAMESPACE)
        self.peers = peers  # namespaces admitted to the metrics and UI ports (settings: HEADRACE_*_NAMESPACES)
        self._creates = ThreadPoolExecutor(max_workers=CREATE_THREADS, thread_name_prefix="create")
        self.ensured = EnsuredObjects()  # apps whose shared objects this process made (or found) itself

    def forget(self, namespace: str, app: str) -> None:
        """The app is gone."""
        self.ensured.forget(namespace, app)

    def ensure(self, body: dict[str, Any], action: EnsureDriver) -> None:
        """Create what `action`'s attempt needs (or, `check_only`, have the API server check it: dryRun=All)."""
        metadata = body["metadata"]
        attempt = manifests.Attempt.of(
            action,
            app=metadata["name"],
            namespace=metadata["namespace"],
            app_uid=metadata["uid"],
            operator_namespace=self.operator_namespace,
            peers=self.peers,
        )
        if action.check_only:  # would the API server take the new attempt? (dryRun=All: nothing is stored)
            for obj in manifests.attempt_objects(attempt):
                self.kube.create(obj, dry_run=True)
            return
        shared = manifests.app_objects(attempt)
        made = digest(shared)
        if action.after_ran and self.ensured.known(attempt.namespace, attempt.app, attempt.app_uid, made):
            self._restart_attempt(attempt)
            return
        self.ensured.forget(attempt.namespace, attempt.app)  # until every one is made again
        # An existing Secret (AlreadyExists) keeps its token and certificate.
        *independent, pod = manifests.attempt_objects(attempt)
        secret = manifests.control_secret(attempt, secrets.token_urlsafe(32), self._certificate(attempt))
        self.secrets.forget(attempt.namespace, attempt.app)  # made (or completed) here: read again at the next call
        created = self._create_all([secret, *independent])
        if created[0] is None:
            self._complete_control_secret(attempt)
            self.secrets.forget(attempt.namespace, attempt.app)  # and a read made meanwhile (`ask_ahead`) is not kept
        else:  # created with these values: the first driver call needs no GET of it
            self.secrets.made(attempt.namespace, attempt.app, attempt.app_uid, secret["stringData"])
        self.ensured.remember(attempt.namespace, attempt.app, attempt.app_uid, made)
        for obj in [secret, *independent]:
            failpoints.hit(f"inside:EnsureDriver/{obj['kind']}")
        if (attempt.run, attempt.attempt) != (1, 1):
            self.kube.prune_attempt_objects(
                attempt.namespace, attempt.app, attempt.run, attempt.attempt, also_keep=action.keep
            )
            failpoints.hit("inside:EnsureDriver/pruned")
        self._create_pod(pod)

    def _restart_attempt(self, attempt: manifests.Attempt) -> None:
        """The next attempt of a run whose last one ran with the app's shared objects, which this process made:
        only the attempt's own objects are created (its ConfigMap and Service, with the failed attempt's removed
        by name, at once), then its pod. 5 requests instead of 13 or more (docs/operations.md, "Restarts")."""
        config_map, service, pod = manifests.attempt_objects(attempt)[-3:]
        calls: list[Future[Any]] = [
            self._creates.submit(self.kube.create, config_map),
            self._creates.submit(self.kube.create, service),
            self._creates.submit(
                self.kube.delete_attempt_objects, attempt.namespace, attempt.app, attempt.run, attempt.attempt - 1
            ),
        ]
        wait(calls)
        for call in calls:
            call.result()
        for obj in (config_map, service):
            failpoints.hit(f"inside:EnsureDriver/{obj['kind']}")
        failpoints.hit("inside:EnsureDriver/pruned")
        self._create_pod(pod)

    def _create_pod(self, pod: dict[str, Any]) -> None:
        made = self.kube.create(pod)
        if made is not None:
            self.cache.wrote("pod", made)  # the next reconcile sees its driver before the watch reports it
        failpoints.hit("inside:EnsureDriver/Pod")  # the same as after:EnsureDriver

    def _create_all(self, objects: list[dict[str, Any]]) -> list[dict[str, Any] | None]:
        """Create independent objects concurrently; each one's answer (None: it existed). The first refusal, in
        the objects' order, is raised once every create has finished."""
        futures = [self._creates.submit(self.kube.create, obj) for obj in objects]
        wait(futures)
        return [future.result() for future in futures]

    def _certificate(self, attempt: manifests.Attempt) -> control_tls.ControlCertificate:
        """A new control certificate for the app, with a new key."""
        key = ec.generate_private_key(ec.SECP256R1())
        return control_tls.control_certificate(attempt.app, attempt.namespace, key, self.clock())

    def _complete_control_secret(self, attempt: manifests.Attempt) -> None:
        """An existing control Secret made by an older operator gains the keys this version's pods mount: those
        derived from its token (Spark's authentication secret) and the control certificate with its key (both,
        new, unless it has both), so an upgraded operator's next driver starts instead of failing on a
        missing Secret key."""
        name = names.control_secret(attempt.app)
        values = self.kube.read_secret_values(attempt.namespace, name)
        token = (values or {}).get(manifests.TOKEN_KEY)
        if values is None or token is None:
            return
        missing = manifests.missing_control_secret_values(values, token, lambda: self._certificate(attempt))
        if missing:
            self.kube.add_secret_values(attempt.namespace, name, missing)
