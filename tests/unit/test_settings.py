"""Operator settings: the table in settings.py's docstring says what the fields' defaults are, and every
variable it names sets its field."""

from __future__ import annotations

import re

from headrace import settings
from headrace.settings import ENVIRONMENT, OperatorSettings

ROW = re.compile(r"^\| (?P<name>[A-Z_]+) \| (?P<default>[^|]+) \|", re.MULTILINE)


def test_the_documented_defaults_are_the_fields_defaults() -> None:
    rows = {match["name"]: match["default"].strip() for match in ROW.finditer(settings.__doc__ or "")}
    defaults = OperatorSettings.from_environ({})
    for field, variable in ENVIRONMENT.items():
        value = getattr(defaults, field)
        if isinstance(value, int | float) and not isinstance(value, bool):
            assert rows[variable] == f"{value:g}", variable
        elif isinstance(value, bool):
            assert rows[variable].startswith(str(value).lower()), variable
    assert defaults.lease_name == "headrace" and defaults.identity is None and defaults.lease_namespace is None


def test_each_variable_sets_its_field() -> None:
    environ = {
        "HEADRACE_WORKERS": "3",
        "HEADRACE_METRICS_PORT": "9090",
        "HEADRACE_HEALTH_PORT": "9091",
        "HEADRACE_RESYNC_SECONDS": "60",
        "HEADRACE_LEADER_ELECTION": "true",
        "HEADRACE_LEADER_ELECTION_NAMESPACE": "ops",
        "HEADRACE_LEADER_ELECTION_LEASE": "lease",
        "POD_NAME": "pod-1",
        "HEADRACE_LEASE_DURATION_SECONDS": "30",
        "HEADRACE_RENEW_DEADLINE_SECONDS": "20",
        "HEADRACE_RETRY_PERIOD_SECONDS": "5",
    }
    assert set(environ) == set(ENVIRONMENT.values())
    read, defaults = OperatorSettings.from_environ(environ), OperatorSettings.from_environ({})
    for field, variable in ENVIRONMENT.items():
        assert getattr(read, field) != getattr(defaults, field), variable
        assert str(getattr(read, field)).lower() in (environ[variable], environ[variable] + ".0"), variable
    assert OperatorSettings.from_environ({"HEADRACE_WORKERS": ""}).workers == defaults.workers  # empty: the default
