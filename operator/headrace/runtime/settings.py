"""The runtime's settings, parsed from the environment the operator gives the driver container.

Owns: turning environment variables (names from :mod:`headrace.api.runtime_contract`) into one
typed, immutable record, and rejecting malformed values with a message naming the variable.
Never: reads ``os.environ`` itself (the caller passes the mapping) or starts anything.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from headrace.api import runtime_contract as contract

ENV_TERMINATION_MESSAGE_PATH = "HEADRACE_TERMINATION_MESSAGE_PATH"  # override for tests
ENV_CONTROL_BIND = "HEADRACE_CONTROL_BIND"  # listen address of both servers, default all interfaces
ENV_LOCAL_MASTER = "HEADRACE_LOCAL_MASTER"  # master outside a pod when none is configured
ENV_SERVICE_ACCOUNT_DIR = "HEADRACE_SERVICE_ACCOUNT_DIR"  # override for tests: the token and ca.crt of the pod
ENV_DRIVER_LEASE_SECONDS = "HEADRACE_DRIVER_LEASE_SECONDS"  # override for tests: the driver Lease's duration
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"

STATE_BACKENDS = ("rocksdb", "hdfs")
MODES = ("continuous", "bounded")


class SettingsError(ValueError):
    """An environment variable has a value the runtime cannot use."""


@dataclass(frozen=True)
class RuntimeSettings:
    """Everything the runtime reads from its environment."""

    app_name: str = "headrace-app"
    app_namespace: str = ""
    run_id: str = ""
    attempt: int = 1
    checkpoint_dir: str | None = None
    savepoint_dir: str | None = None
    restore_from: str | None = None
    state_backend: str = "rocksdb"
    state_partitions: int | None = None
    allow_repartition: bool = False
    mode: str = "continuous"
    standby: bool = False  # a warm standby: the first query start waits for promotion
    warmup: bool = True  # a standby runs the warm-up query before it waits at its gate
    prewarm_checkpoint: str | None = None  # a pre-warmed upgrade: the running driver's checkpoint, checked at the gate
    driver_lease: str | None = None  # the app's driver Lease: queries start only while holding it
    driver_lease_seconds: int = contract.DRIVER_LEASE_SECONDS
    service_account_dir: str = SERVICE_ACCOUNT_DIR
    control_port: int = contract.DEFAULT_CONTROL_PORT
    control_token: str | None = None
    control_tls_dir: str | None = None  # the app's certificate and key: the control endpoint is HTTPS only
    metrics_port: int = contract.DEFAULT_METRICS_PORT
    bind_address: str = "0.0.0.0"  # noqa: S104 - the driver pod must be reachable by the operator
    pod_ip: str | None = None
    pod_name: str | None = None
    kubernetes_host: str | None = None
    kubernetes_port: str | None = None
    termination_message_path: str = contract.TERMINATION_MESSAGE_PATH
    local_master: str = "local[2]"
    expected_commits: Mapping[str, int] = field(default_factory=dict)  # query key -> last batch seen committed
    # Spark settings from spec.sparkConfFromSecrets (key -> value); never printed
    secret_conf: Mapping[str, str] = field(default_factory=dict, repr=False)

    @property
    def bounded(self) -> bool:
        return self.mode == "bounded"

    @property
    def in_pod(self) -> bool:
        return self.kubernetes_host is not None


def _optional(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name, "").strip()
    return value or None


def _integer(env: Mapping[str, str], name: str, default: int | None, minimum: int) -> int | None:
    raw = _optional(env, name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SettingsError(f"{name}={raw!r} is not an integer") from None
    if value < minimum:
        raise SettingsError(f"{name}={value} must be at least {minimum}")
    return value


def _choice(env: Mapping[str, str], name: str, choices: tuple[str, ...]) -> str:
    value = (_optional(env, name) or choices[0]).lower()
    if value not in choices:
        raise SettingsError(f"{name}={value!r} must be one of {', '.join(choices)}")
    return value


def _boolean(env: Mapping[str, str], name: str) -> bool:
    value = (_optional(env, name) or "false").lower()
    if value not in ("true", "false", "1", "0", "yes", "no"):
        raise SettingsError(f"{name}={value!r} must be true or false")
    return value in ("true", "1", "yes")


def _port(env: Mapping[str, str], name: str, default: int) -> int:
    value = _integer(env, name, default, 0)
    assert value is not None
    if value > 65535:
        raise SettingsError(f"{name}={value} is not a TCP port")
    return value


def _commits(env: Mapping[str, str], name: str) -> dict[str, int]:
    raw = _optional(env, name)
    if raw is None:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        raise SettingsError(f"{name} is not JSON: {raw[:200]!r}") from None
    if not isinstance(value, dict) or not all(
        isinstance(key, str) and isinstance(batch, int) and not isinstance(batch, bool) and batch >= 0
        for key, batch in value.items()
    ):
        raise SettingsError(f"{name} must be a JSON object of query keys to batch ids: {raw[:200]!r}")
    return value


def _secret_conf(env: Mapping[str, str], name: str) -> dict[str, str]:
    """The Spark settings whose values the operator passed as secretKeyRef variables (never in a message)."""
    raw = _optional(env, name)
    if raw is None:
        return {}
    try:
        variables = json.loads(raw)
    except json.JSONDecodeError:
        raise SettingsError(f"{name} is not JSON: {raw[:200]!r}") from None
    if not isinstance(variables, dict) or not all(
        isinstance(key, str)
        and isinstance(variable, str)
        and variable.startswith(contract.ENV_SPARK_CONF_SECRET_PREFIX)
        for key, variable in variables.items()
    ):
        raise SettingsError(f"{name} must map Spark keys to {contract.ENV_SPARK_CONF_SECRET_PREFIX}* variables")
    missing = sorted(variable for variable in variables.values() if variable not in env)
    if missing:
        raise SettingsError(f"{name} names variables that are not set: {', '.join(missing)}")
    return {key: env[variable] for key, variable in variables.items()}


def _lease_seconds(env: Mapping[str, str]) -> int:
    value = _integer(env, ENV_DRIVER_LEASE_SECONDS, contract.DRIVER_LEASE_SECONDS, 2)
    assert value is not None
    return value


def settings_from_env(env: Mapping[str, str]) -> RuntimeSettings:
    """Parse the runtime's environment; raise :class:`SettingsError` naming the bad variable."""
    attempt = _integer(env, contract.ENV_ATTEMPT, 1, 1)
    assert attempt is not None
    return RuntimeSettings(
        app_name=_optional(env, contract.ENV_APP_NAME) or "headrace-app",
        app_namespace=_optional(env, contract.ENV_APP_NAMESPACE) or "",
        run_id=_optional(env, contract.ENV_RUN_ID) or "",
        attempt=attempt,
        checkpoint_dir=_optional(env, contract.ENV_CHECKPOINT_DIR),
        savepoint_dir=_optional(env, contract.ENV_SAVEPOINT_DIR),
        restore_from=_optional(env, contract.ENV_RESTORE_FROM),
        state_backend=_choice(env, contract.ENV_STATE_BACKEND, STATE_BACKENDS),
        state_partitions=_integer(env, contract.ENV_STATE_PARTITIONS, None, 1),
        allow_repartition=_boolean(env, contract.ENV_ALLOW_REPARTITION),
        mode=_choice(env, contract.ENV_MODE, MODES),
        standby=_boolean(env, contract.ENV_STANDBY),
        warmup=_optional(env, contract.ENV_WARMUP) is None or _boolean(env, contract.ENV_WARMUP),
        prewarm_checkpoint=_optional(env, contract.ENV_PREWARM_CHECKPOINT),
        driver_lease=_optional(env, contract.ENV_DRIVER_LEASE),
        driver_lease_seconds=_lease_seconds(env),
        service_account_dir=_optional(env, ENV_SERVICE_ACCOUNT_DIR) or SERVICE_ACCOUNT_DIR,
        control_port=_port(env, contract.ENV_CONTROL_PORT, contract.DEFAULT_CONTROL_PORT),
        control_token=_optional(env, contract.ENV_CONTROL_TOKEN),
        control_tls_dir=_optional(env, contract.ENV_CONTROL_TLS_DIR),
        metrics_port=_port(env, contract.ENV_METRICS_PORT, contract.DEFAULT_METRICS_PORT),
        bind_address=_optional(env, ENV_CONTROL_BIND) or "0.0.0.0",  # noqa: S104
        pod_ip=_optional(env, contract.ENV_POD_IP),
        pod_name=_optional(env, contract.ENV_POD_NAME),
        kubernetes_host=_optional(env, "KUBERNETES_SERVICE_HOST"),
        kubernetes_port=_optional(env, "KUBERNETES_SERVICE_PORT"),
        termination_message_path=_optional(env, ENV_TERMINATION_MESSAGE_PATH) or contract.TERMINATION_MESSAGE_PATH,
        local_master=_optional(env, ENV_LOCAL_MASTER) or "local[2]",
        expected_commits=_commits(env, contract.ENV_EXPECTED_COMMITS),
        secret_conf=_secret_conf(env, contract.ENV_SPARK_CONF_SECRETS),
    )
