"""The pure parts of building Go modules and running KWOK (`testbed.build`, `testbed.kwok`)."""

from __future__ import annotations

from pathlib import Path

from testbed import build, kwok

GO_MOD = """module example.com/peer

go 1.24.1

require k8s.io/api v0.33.3

replace (
\tk8s.io/api => k8s.io/api v0.32.5
\t// a comment
\tk8s.io/client-go => k8s.io/client-go v0.32.5
)

replace example.com/fork => example.com/fork v1.2.3
"""


def test_replace_directives_of_both_forms_are_read() -> None:
    assert build.replace_directives(GO_MOD) == [
        "k8s.io/api => k8s.io/api v0.32.5",
        "k8s.io/client-go => k8s.io/client-go v0.32.5",
        "example.com/fork => example.com/fork v1.2.3",
    ]


def test_wrapper_module_requires_the_module_and_carries_its_replaces() -> None:
    text = build.wrapper_go_mod("peer", "example.com/peer", "v1.0.0", build.replace_directives(GO_MOD))
    assert text.startswith("module headrace.dev/testbed/peer\n")
    assert "require example.com/peer v1.0.0\n" in text
    assert "\tk8s.io/client-go => k8s.io/client-go v0.32.5\n" in text
    assert "replace" not in build.wrapper_go_mod("plain", "example.com/plain", "v1.0.0", [])


def test_fake_nodes_take_only_pods_that_select_and_tolerate_them() -> None:
    node = kwok.node_manifest("kwok-0")
    placement = kwok.placement()
    taint = node["spec"]["taints"][0]
    assert taint["effect"] == "NoSchedule"
    assert placement["tolerations"] == [{"key": taint["key"], "operator": "Exists", "effect": "NoSchedule"}]
    assert placement["nodeSelector"].items() <= node["metadata"]["labels"].items()
    command = kwok.command(Path("/bin/kwok"), Path("/s.yaml"), Path("/k"), 1234)
    assert f"--manage-nodes-with-label-selector={kwok.NODE_LABEL[0]}={kwok.NODE_LABEL[1]}" in command
    assert any(flag.startswith("--cidr=127.") for flag in command)  # simulated pods are on loopback
