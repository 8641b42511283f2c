"""Deterministic names and labels of everything the operator creates.

Owns: how a run and attempt map to pod, service, configmap and account names (valid DNS labels,
shortened with a stable hash when too long), the label keys, and the checkpoint path of a run.
Never: decisions or I/O.
"""

from __future__ import annotations

import hashlib
from datetime import datetime

MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "headrace"
INSTANCE = "app.kubernetes.io/instance"
COMPONENT = "app.kubernetes.io/component"
APP = "headrace.dev/app"
RUN = "headrace.dev/run"
ATTEMPT = "headrace.dev/attempt"
ROLE = "headrace.dev/role"
SPEC_HASH = "headrace.dev/spec-hash"
STANDBY = "headrace.dev/standby"  # "true" on a driver pod created as a warm standby (spec.standby)
# "true" on the driver pod that runs the app's queries (set by the operator once it does): what the app's
# PodDisruptionBudget protects, so a standby or a pre-warmed driver may be evicted, the writing driver not.
WRITER = "headrace.dev/writer"
# On the writer: the executor count its executors' budget (`executor_disruption_budget`) was last made for (its
# minAvailable); the operator puts the budget again when the writer's executor count differs.
EXECUTOR_BUDGET = "headrace.dev/executor-budget"
ROLE_DRIVER = "driver"
ROLE_EXECUTOR = "executor"
DRIVER_SELECTOR = f"{MANAGED_BY}={MANAGED_BY_VALUE},{ROLE}={ROLE_DRIVER}"  # every driver pod the operator made
# on an app with spec.savepoints.onDeletion: its deletion waits for the final savepoint (headrace.core.deletion)
FINAL_SAVEPOINT_FINALIZER = "headrace.dev/final-savepoint"
# on a StreamingSavepoint with spec.disposeOnDelete: its deletion waits for its files to go (headrace.handlers)
DISPOSE_FINALIZER = "headrace.dev/dispose-savepoint-files"
CREATED_BY = "headrace.dev/created-by"  # on StreamingSavepoints the operator made (retention deletes only those)
CREATED_BY_OPERATOR = "operator"

DNS_LABEL_MAX = 63
EXECUTOR_PREFIX_MAX = 40  # Spark appends "-exec-<id>" and requires the whole name to be a DNS label


def _fit(base: str, suffix: str, limit: int = DNS_LABEL_MAX) -> str:
    """`base-suffix`, with base cut and a stable hash added when the result would exceed `limit`."""
    name = f"{base}-{suffix}"
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(base.encode()).hexdigest()[:6]
    keep = limit - len(suffix) - len(digest) - 2
    return f"{base[:keep].rstrip('-')}-{digest}-{suffix}"


def driver_pod(app: str, run: int, attempt: int) -> str:
    """The driver pod of one attempt (also its hostname and the Service name)."""
    return _fit(app, f"r{run}-a{attempt}-driver")


def driver_service(app: str, run: int, attempt: int) -> str:
    """The headless Service selecting exactly one driver pod."""
    return driver_pod(app, run, attempt)


def ui_service(app: str) -> str:
    """The app's Service for the Spark UI and the driver's metrics: one name for every attempt, selecting the
    driver that writes (`WRITER`)."""
    return _fit(app, "ui")


def driver_log(app: str) -> str:
    """The app's ConfigMap holding the tail of the log of its last driver that ended (`headrace logs --previous`)."""
    return _fit(app, "driver-log")


def config_map(app: str, run: int, attempt: int) -> str:
    """Spark configuration and executor pod template of one attempt."""
    return _fit(app, f"r{run}-a{attempt}-conf")


def executor_prefix(app: str, run: int, attempt: int) -> str:
    """`spark.kubernetes.executor.podNamePrefix` of one attempt."""
    return _fit(app, f"r{run}a{attempt}", EXECUTOR_PREFIX_MAX)


def service_account(app: str) -> str:
    """The ServiceAccount (and Role, RoleBinding) the driver uses to manage its executors."""
    return _fit(app, "spark")


def driver_lease(app: str) -> str:
    """The app's driver Lease (and the Role and RoleBinding letting the app's driver get and update only it)."""
    return _fit(app, "driver-lease")


def driver_disruption_budget(app: str) -> str:
    """The PodDisruptionBudget over the app's driver pods (a drain waits for the operator's handover)."""
    return _fit(app, "driver")


def executor_disruption_budget(app: str) -> str:
    """The PodDisruptionBudget over the executor pods of the app's writing attempt (reshaped for each new writer)."""
    return _fit(app, "executors")


def executor_labels(app: str, run: int, attempt: int) -> dict[str, str]:
    """Labels of an attempt's executor pods (Spark puts them on every executor; the executor budget selects on them)."""
    return {**attempt_labels(app, run, attempt), ROLE: ROLE_EXECUTOR}


def control_secret(app: str) -> str:
    """The Secret holding the bearer token of the driver's control endpoint."""
    return _fit(app, "control")


CONTROL_TLS_VOLUME = "headrace-control-tls"  # the driver's volume of the control certificate and key


def control_server_name(app: str, namespace: str) -> str:
    """The one DNS name of an app's control certificate, which the operator checks (sent as SNI while it dials
    the driver pod's IP). Per app, as the certificate is: the driver's Service changes with every attempt."""
    return f"{control_secret(app)}.{namespace}.svc"


def run_checkpoint_dir(root: str, namespace: str, app: str, run: int) -> str:
    """Checkpoint directory of one run: `<root>/<namespace>/<app>/r<run>`."""
    return f"{root.rstrip('/')}/{namespace}/{app}/r{run}"


def savepoint_dir(root: str, namespace: str, app: str, savepoint_name: str) -> str:
    """Directory of one savepoint: `<root>/<namespace>/<app>/<savepoint name>`."""
    return f"{root.rstrip('/')}/{namespace}/{app}/{savepoint_name}"


def app_labels(app: str) -> dict[str, str]:
    """Labels on every object of an app."""
    return {MANAGED_BY: MANAGED_BY_VALUE, INSTANCE: app, APP: app}


def attempt_labels(app: str, run: int, attempt: int) -> dict[str, str]:
    """Labels of the objects of one attempt."""
    return {**app_labels(app), RUN: str(run), ATTEMPT: str(attempt)}


def driver_selector_labels(app: str) -> dict[str, str]:
    """Labels every driver pod of `app` has, of any run or attempt (standby and pre-warmed drivers included)."""
    return {APP: app, ROLE: ROLE_DRIVER}


def driver_labels(app: str, run: int, attempt: int) -> dict[str, str]:
    """Labels of a driver pod (the Service selects on these)."""
    return {**attempt_labels(app, run, attempt), ROLE: ROLE_DRIVER, COMPONENT: "driver"}


def executor_selector(app: str) -> str:
    """Label selector of an app's executor pods (status.selector, for the scale subresource)."""
    return f"{APP}={app},{ROLE}={ROLE_EXECUTOR}"


def executor_service_account(app: str) -> str:
    """The executors' ServiceAccount: no Role is bound to it and its token is not mounted."""
    return _fit(app, "executor")


def savepoint_name(app: str, reason: str, moment: datetime) -> str:
    """A readable savepoint name, `<app>-<reason>-<yyyymmddhhmmss><milliseconds>`.

    Milliseconds, because two savepoints of one app and reason asked within the same second (a manual
    trigger right after another) must not share a name: the second would silently reuse the first.
    """
    stamp = moment.strftime("%Y%m%d%H%M%S") + f"{moment.microsecond // 1000:03d}"
    return f"{app}-{reason}-{stamp}"[:253]
