"""Fixtures of the operator integration tests: CRDs installed in the real API server, the real operator."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes.client import ApiClient

from testbed.controlplane import ControlPlane
from testbed.operator_process import OperatorProcess, install_crds

from .kube import watching


@pytest.fixture(scope="session")
def crds(control_plane: ControlPlane) -> None:
    """The generated CRDs, installed once per session."""
    with control_plane.api_client() as api:
        install_crds(api)


@pytest.fixture
def operator(control_plane: ControlPlane, crds: None, namespace: str, tmp_path: Path) -> Iterator[OperatorProcess]:
    """The real operator process (python -m headrace), watching the test's namespace; stopped afterwards."""
    process = OperatorProcess(control_plane.kubeconfig, tmp_path / "operator", watching(namespace))
    with process:
        yield process
    print(f"operator log: {process.log_path}")


@pytest.fixture
def api(kube_api: ApiClient, crds: None) -> ApiClient:
    """An admin API client, with the CRDs installed."""
    return kube_api
