"""The namespace a kubeconfig implies (`adapters.connect.current_namespace`), as kubectl takes it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from headrace.adapters import connect


def _kubeconfig(tmp_path: Path, current: str) -> str:
    cluster = {"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}
    contexts = [
        {"name": "team", "context": {"cluster": "c", "user": "u", "namespace": "analytics"}},
        {"name": "bare", "context": {"cluster": "c", "user": "u"}},
    ]
    document = {"apiVersion": "v1", "kind": "Config", "clusters": [cluster], "contexts": contexts,
                "users": [{"name": "u", "user": {"token": "t"}}], "current-context": current}  # fmt: skip
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(document))
    return str(path)


@pytest.mark.parametrize(
    ("current", "context", "expected"),
    [
        ("team", None, "analytics"),
        ("bare", None, "default"),
        ("bare", "team", "analytics"),
        ("team", "bare", "default"),
    ],
)
def test_the_contexts_namespace(tmp_path: Path, current: str, context: str | None, expected: str) -> None:
    assert connect.current_namespace(_kubeconfig(tmp_path, current), context) == expected


def test_no_kubeconfig_at_all_is_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connect, "IN_CLUSTER_NAMESPACE", tmp_path / "absent")
    assert connect.current_namespace(str(tmp_path / "missing")) == "default"
