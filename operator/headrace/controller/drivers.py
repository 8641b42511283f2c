"""The operator's calls to the apps' drivers, with their credentials: one service the reconciler asks.

Owns: finding the endpoint of an app's driver (its address, the app's token and, when the pod serves TLS, the
app's certificate: the only one trusted) from the control Secret as remembered (`ControlSecrets`); asking the
current driver and a pre-warmed one for their status; the answers asked ahead of a poll (`ask_ahead`, on a
thread that is not a reconcile worker), used once when fresh (`ANSWER_FRESH_SECONDS`) and from the same pod;
promoting, rescaling and savepoint calls. A driver that refuses the credentials makes the Secret read again.
Never: deciding (what a missing answer means is the planner's) or writing statuses.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Any

from headrace.adapters.driver import DriverControl, DriverEndpoint, DriverUnavailable
from headrace.adapters.kube import KubeClient
from headrace.api import names
from headrace.api import runtime_contract as contract
from headrace.api.models import StreamingAppStatus
from headrace.controller import failpoints
from headrace.controller.control_secrets import ControlSecrets, Values
from headrace.controller.observe import current_driver_pod, prewarmed_driver_pod, serves_control_tls
from headrace.core.plan import PromoteDriver, RescaleInPlace, TakeSavepoint
from headrace.render import control_tls, manifests

logger = logging.getLogger(__name__)

# A driver's status asked ahead of a poll's reconciliation (`ask_ahead`, off the reconcile workers) stands in for
# asking again within this long, if the app's current driver is still the pod that was asked.
ANSWER_FRESH_SECONDS = 5.0

Answer = tuple[contract.StatusDocument | None, bool]
"""A driver's status document, and whether it was asked and did not answer."""


@dataclasses.dataclass(frozen=True)
class _AskedAhead:
    """A driver's answer asked ahead: which pod, when (monotonic), the answer."""

    pod: tuple[str, str]  # name, uid
    at: float
    answer: Answer


class Drivers:
    """Thread-safe: the reconcile workers and `ask_ahead`'s threads share it."""

    def __init__(self, kube: KubeClient, driver: DriverControl) -> None:
        self.driver = driver
        self.secrets = ControlSecrets(
            lambda namespace, app: kube.read_secret_values(namespace, names.control_secret(app))
        )
        self._asked: dict[tuple[str, str], _AskedAhead] = {}  # (namespace, app) -> its driver's answer asked ahead
        self._lock = threading.Lock()

    def forget(self, namespace: str, app: str) -> None:
        """The app is gone: its Secret's values and any answer asked ahead go."""
        self.secrets.forget(namespace, app)
        with self._lock:
            self._asked.pop((namespace, app), None)

    def endpoint(self, body: dict[str, Any], address: str | None, *, tls: bool) -> DriverEndpoint | None:
        """How to reach the app's driver at `address` (see `endpoint_from`)."""
        metadata = body["metadata"]
        values = self.secrets.values(metadata["namespace"], metadata["name"], str(metadata.get("uid") or ""))
        return endpoint_from(values, metadata["namespace"], metadata["name"], address, tls=tls)

    # ------------------------------------------------------------------------------------ status --
    def status(self, body: dict[str, Any], pods: list[dict[str, Any]]) -> contract.StatusDocument | None:
        """The current driver's status document, when its pod runs, is not being deleted and answers (else None).

        A terminating driver is not asked: it is exiting, and the call could only wait for a timeout."""
        pod = current_driver_pod(body, pods)
        if pod is None:
            return None
        endpoint = self.endpoint(body, pod["status"]["podIP"], tls=serves_control_tls(pod))
        if endpoint is None:
            return None
        return self.driver.status(endpoint)  # DriverUnavailable: a missed heartbeat (see `ask`)

    def ask(self, body: dict[str, Any], pods: list[dict[str, Any]]) -> Answer:
        """The driver's status document, and whether it was asked and did not answer (the planner counts the time
        it has not answered against restartPolicy.heartbeatTimeout)."""
        try:
            return self.status(body, pods), False
        except DriverUnavailable as error:
            metadata = body["metadata"]
            logger.info("driver of %s/%s did not answer: %s", metadata["namespace"], metadata["name"], error)
            if error.credentials_refused:
                self.secrets.forget(metadata["namespace"], metadata["name"])
            return None, True

    def ask_ahead(self, body: dict[str, Any], pod: dict[str, Any]) -> None:
        """Ask the app's current driver `pod` now, before a poll's reconciliation is queued; `answer` uses it."""
        answer = self.ask(body, [pod])
        metadata = body["metadata"]
        with self._lock:
            self._asked[(metadata["namespace"], metadata["name"])] = _AskedAhead(
                _pod_identity(pod), time.monotonic(), answer
            )

    def answer(self, body: dict[str, Any], pods: list[dict[str, Any]]) -> Answer:
        """`ask`'s answer, from `ask_ahead` when that asked the same driver moments ago (taken: used once)."""
        metadata = body["metadata"]
        pod = current_driver_pod(body, pods)
        with self._lock:
            asked = self._asked.pop((metadata["namespace"], metadata["name"]), None)
        if (
            asked is not None
            and pod is not None
            and asked.pod == _pod_identity(pod)
            and time.monotonic() - asked.at <= ANSWER_FRESH_SECONDS
        ):
            return asked.answer
        return self.ask(body, pods)

    def prewarmed_status(
        self, body: dict[str, Any], status: StreamingAppStatus, pods: list[dict[str, Any]]
    ) -> contract.StatusDocument | None:
        """The status of a pre-warmed upgrade's new driver (None: there is none, or it does not answer yet)."""
        pod = prewarmed_driver_pod(status, pods)
        if pod is None:
            return None
        endpoint = self.endpoint(body, pod["status"]["podIP"], tls=serves_control_tls(pod))
        if endpoint is None:
            return None
        try:
            return self.driver.status(endpoint)
        except DriverUnavailable as error:  # still starting: its control endpoint is not up yet
            logger.debug("pre-warmed driver %s does not answer yet: %s", pod["metadata"]["name"], error)
            return None

    # ------------------------------------------------------------------------------------ orders --
    def promote(self, body: dict[str, Any], action: PromoteDriver) -> bool:
        """Promote a standby; False when it cannot be asked or did not answer (try again later)."""
        namespace = body["metadata"]["namespace"]
        endpoint = self.endpoint(body, action.address, tls=action.control_tls)
        if endpoint is None:
            return False
        try:
            answer = self.driver.promote(
                endpoint, restore_from=action.restore_from, allow_repartition=action.allow_repartition
            )
        except DriverUnavailable as error:
            logger.warning("promoting standby driver %s/%s failed (%s); will retry", namespace, action.pod, error)
            return False
        logger.info("promoted standby driver %s/%s: %s", namespace, action.pod, answer)
        return True

    def rescale(self, body: dict[str, Any], action: RescaleInPlace) -> bool:
        """Set the running driver's executors; False when it cannot be asked or did not answer."""
        metadata = body["metadata"]
        endpoint = self.endpoint(body, action.address, tls=action.control_tls)
        if endpoint is None:
            return False
        try:
            self.driver.rescale(endpoint, action.executors)
        except DriverUnavailable:
            logger.warning("rescale of %s/%s failed; will retry", metadata["namespace"], metadata["name"])
            return False
        return True

    def savepoint(self, body: dict[str, Any], action: TakeSavepoint) -> dict[str, Any]:
        """Ask the driver for the savepoint (minutes while it copies); its record. DriverUnavailable: not taken."""
        endpoint = self.endpoint(body, action.address, tls=action.control_tls)
        if endpoint is None:
            raise DriverUnavailable("the driver has no address, control token or control certificate yet")
        failpoints.hit("before:TakeSavepoint")
        record = self.driver.savepoint(endpoint, path=action.path, reason=action.reason, stop=action.stop)
        failpoints.hit("after:TakeSavepoint")
        return record


def driver_endpoint(
    kube: KubeClient, namespace: str, app: str, address: str | None, *, tls: bool
) -> DriverEndpoint | None:
    """`endpoint_from` the app's control Secret as read now (for callers without a `Drivers`)."""
    return endpoint_from(
        kube.read_secret_values(namespace, names.control_secret(app)) or {}, namespace, app, address, tls=tls
    )


def endpoint_from(values: Values, namespace: str, app: str, address: str | None, *, tls: bool) -> DriverEndpoint | None:
    """How to reach the app's driver at `address`: the app's token and, when the pod serves TLS, the app's certificate
    (the only one trusted). None without an address, a token, or the certificate a TLS pod needs: the token is
    never sent in plain HTTP to a pod that serves TLS."""
    token, certificate = values.get(manifests.TOKEN_KEY), values.get(control_tls.CERT_KEY)
    if address is None or token is None or (tls and certificate is None):
        return None
    if not tls:
        return DriverEndpoint(address, token, certificate=None)
    return DriverEndpoint(address, token, certificate, names.control_server_name(app, namespace))


def _pod_identity(pod: dict[str, Any]) -> tuple[str, str]:
    metadata = pod["metadata"]
    return str(metadata["name"]), str(metadata.get("uid") or "")
