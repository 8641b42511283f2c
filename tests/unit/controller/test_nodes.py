"""What the Node watch changes in `NodeStates`: a watched node is held at once and trusted without a GET, and only a
change of being drained or lost counts (that is what queues the apps with a driver there)."""

from __future__ import annotations

from typing import Any

import pytest

from headrace.controller.nodes import (
    REFRESH_SECONDS,
    UNREACHABLE,
    WATCHED_SECONDS,
    NodeChange,
    NodeState,
    NodeStates,
    freed,
    moved,
    node_state,
    takes,
    tolerated,
)

READY = {"type": "Ready", "status": "True"}


def node(*, cordoned: bool = False, ready: str = "True", taints: tuple[str, ...] = ()) -> dict[str, Any]:
    spec: dict[str, Any] = {"unschedulable": True} if cordoned else {}
    spec["taints"] = [{"key": key, "effect": "NoSchedule"} for key in taints]
    return {"metadata": {"name": "w1"}, "spec": spec, "status": {"conditions": [{"type": "Ready", "status": ready}]}}


@pytest.mark.parametrize(
    ("body", "state"),
    [
        (node(), NodeState(ready=True)),
        (node(cordoned=True), NodeState(draining=True, ready=True)),
        (
            node(taints=("karpenter.sh/disrupted",)),
            NodeState(draining=True, ready=True, taints=(("karpenter.sh/disrupted", "", "NoSchedule"),)),
        ),
        (node(ready="Unknown"), NodeState(lost=True)),
        (
            node(taints=("node.kubernetes.io/unreachable",)),
            NodeState(lost=True, taints=((UNREACHABLE, "", "NoSchedule"),)),
        ),
        (None, NodeState(lost=True)),  # deleted
    ],
)
def test_what_a_node_says(body: dict[str, Any] | None, state: NodeState) -> None:
    assert node_state(body) == state


@pytest.mark.parametrize(
    ("before", "after", "changed"),
    [
        (None, NodeState(ready=True), False),  # a new node, in service: nobody runs there to tell
        (None, NodeState(draining=True, ready=True), True),  # first seen cordoned
        (None, NodeState(lost=True), True),
        (NodeState(ready=True), NodeState(ready=True), False),  # a heartbeat
        (NodeState(ready=True), NodeState(draining=True, ready=True), True),  # cordoned
        (NodeState(draining=True, ready=True), NodeState(ready=True), True),  # uncordoned
        (NodeState(ready=True), NodeState(lost=True), True),  # NotReady, or deleted
        (NodeState(lost=True), NodeState(ready=True), True),  # back
        (NodeState(draining=True, ready=True), NodeState(draining=True, ready=True), False),
        (NodeState(), NodeState(ready=True), False),  # an unreadable node read at last: Ready alone is no move
    ],
)
def test_which_changes_move_drivers(before: NodeState | None, after: NodeState, changed: bool) -> None:
    assert moved(before, after) is changed


def test_a_watched_node_is_held_at_once_and_read_no_more_while_the_watch_keeps_it() -> None:
    reads: list[str] = []
    now = [0.0]

    def read(name: str) -> dict[str, Any] | None:
        reads.append(name)
        return node()

    nodes = NodeStates(read, clock=lambda: now[0])
    assert nodes.observed("w1", node()).moved is False  # first seen, in service
    assert nodes.observed("w1", node()).moved is False  # a status update: nothing to move
    assert nodes.observed("w1", node(cordoned=True)).moved is True
    now[0] = WATCHED_SECONDS - 1  # long past REFRESH_SECONDS: the watch's word still holds
    assert nodes.draining(["w1"]) == {"w1"}
    assert reads == []
    assert nodes.observed("w1", None).moved is True  # deleted: lost
    assert nodes.lost(["w1"]) == {"w1"} and nodes.draining(["w1"]) == frozenset()
    assert reads == []


def test_a_watched_node_the_watch_stopped_delivering_is_read_again() -> None:
    """A watch that died (its permission revoked while running) must not leave a node's state frozen forever."""
    reads: list[str] = []
    now = [0.0]

    def read(name: str) -> dict[str, Any] | None:
        reads.append(name)
        return node(cordoned=True)

    nodes = NodeStates(read, clock=lambda: now[0])
    nodes.observed("w1", node())
    now[0] = WATCHED_SECONDS
    assert nodes.draining(["w1"]) == {"w1"}
    assert reads == ["w1"]
    now[0] += REFRESH_SECONDS - 1  # read: polled again only after REFRESH_SECONDS, as without a watch
    nodes.draining(["w1"])
    assert reads == ["w1"]


def test_a_change_is_told_against_what_a_read_found_before() -> None:
    nodes = NodeStates(lambda name: node(cordoned=True), clock=lambda: 0.0)
    assert nodes.draining(["w1"]) == {"w1"}  # polled before the watch's first event
    assert nodes.observed("w1", node(cordoned=True)).moved is False  # the reconcile already saw it


def test_ready_is_still_read_afresh_with_a_watch() -> None:
    reads: list[str] = []

    def read(name: str) -> dict[str, Any] | None:
        reads.append(name)
        return node()

    nodes = NodeStates(read, clock=lambda: 0.0)
    nodes.observed("w1", node())
    assert nodes.ready(["w1"]) == {"w1"}
    assert reads == ["w1"]


def test_a_read_made_while_the_watch_delivers_the_node_never_overwrites_the_watchs_newer_word() -> None:
    """A GET served before a cordon, answered after the cordon's watch event: the cordon stands."""
    nodes: NodeStates

    def read(name: str) -> dict[str, Any] | None:
        nodes.observed(name, node(cordoned=True))  # the watch event arrives while the GET is in flight
        return node()  # what the API server said before the cordon

    nodes = NodeStates(read, clock=lambda: 0.0)
    assert nodes.draining(["w1"]) == {"w1"}
    assert nodes.draining(["w1"]) == {"w1"}  # and it is what is held


CONTROL_PLANE = ("node-role.kubernetes.io/control-plane", "", "NoSchedule")


@pytest.mark.parametrize(
    ("taint", "tolerations", "expected"),
    [
        (CONTROL_PLANE, [], False),
        (CONTROL_PLANE, [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}], True),
        (CONTROL_PLANE, [{"operator": "Exists"}], True),  # tolerates everything
        (CONTROL_PLANE, [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoExecute"}], False),
        (("pool", "a", "NoSchedule"), [{"key": "pool", "value": "a"}], True),  # Equal by default
        (("pool", "a", "NoSchedule"), [{"key": "pool", "operator": "Equal", "value": "b"}], False),
        (("pool", "a", "NoExecute"), [{"key": "pool", "operator": "Exists", "effect": "NoExecute"}], True),
        (("pool", "a", "NoExecute"), [{"key": "other", "operator": "Exists"}], False),
    ],
)
def test_which_tolerations_tolerate_a_taint(
    taint: tuple[str, str, str], tolerations: list[dict[str, Any]], expected: bool
) -> None:
    assert tolerated(taint, tolerations) is expected


IN_SERVICE = NodeState(ready=True, labels=(("pool", "a"),))


@pytest.mark.parametrize(
    ("state", "tolerations", "selector", "expected"),
    [
        (IN_SERVICE, [], {}, True),
        (IN_SERVICE, [], {"pool": "a"}, True),
        (IN_SERVICE, [], {"pool": "b"}, False),  # the pod's nodeSelector excludes it
        (NodeState(lost=True), [], {}, False),  # NotReady
        (NodeState(), [], {}, False),  # unknown
        (NodeState(ready=True, draining=True), [], {}, False),  # cordoned
        (NodeState(ready=True, taints=(CONTROL_PLANE,)), [], {}, False),  # a control plane the pod does not tolerate
        (NodeState(ready=True, taints=(CONTROL_PLANE,)), [{"operator": "Exists"}], {}, True),
    ],
)
def test_whether_a_node_takes_a_pod(
    state: NodeState, tolerations: list[dict[str, Any]], selector: dict[str, str], expected: bool
) -> None:
    assert takes(state, tolerations, selector) is expected


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        (NodeState(lost=True), NodeState(ready=True), True),  # back Ready
        (NodeState(ready=True, draining=True), NodeState(ready=True), True),  # uncordoned
        (NodeState(ready=True, taints=(CONTROL_PLANE,)), NodeState(ready=True), True),  # a taint removed
        (NodeState(ready=True), NodeState(ready=True), False),  # a heartbeat
        (NodeState(ready=True), NodeState(ready=True, taints=(CONTROL_PLANE,)), False),  # a taint added
        (NodeState(lost=True), NodeState(lost=True), False),  # still NotReady
        (NodeState(lost=True), NodeState(ready=True, draining=True), False),  # back, but cordoned
        (None, NodeState(ready=True), False),  # first seen (every node, at the operator's start)
    ],
)
def test_which_changes_free_a_node(before: NodeState | None, after: NodeState, expected: bool) -> None:
    assert freed(before, after) is expected


def test_a_watch_event_tells_a_node_that_takes_pods_again() -> None:
    nodes = NodeStates(lambda name: None, clock=lambda: 0.0)
    assert nodes.observed("w1", node(ready="False")) == NodeChange(moved=True)  # first seen, NotReady
    assert nodes.observed("w1", node(ready="False")) == NodeChange(moved=False)
    assert nodes.observed("w1", node()) == NodeChange(moved=True, freed=True)  # back Ready


def test_another_node_is_free_only_when_one_known_and_trusted_takes_the_pod() -> None:
    now = [0.0]
    nodes = NodeStates(lambda name: None, clock=lambda: now[0])
    assert nodes.other_free("w1", [], {}) is False  # nothing known (no Node watch, nor reads)
    nodes.observed("w1", node())
    assert nodes.other_free("w1", [], {}) is False  # a single node: the driver's own
    nodes.observed("w2", node(ready="False"))
    assert nodes.other_free("w1", [], {}) is False  # the other one NotReady
    nodes.observed("cp", node(taints=("node-role.kubernetes.io/control-plane",)))
    assert nodes.other_free("w1", [], {}) is False  # a control plane the pod does not tolerate
    nodes.observed("w2", node())
    assert nodes.other_free("w1", [], {}) is True
    assert nodes.other_free("w1", [], {"pool": "a"}) is False  # its nodeSelector matches no other node
    now[0] = WATCHED_SECONDS + 1
    assert nodes.other_free("w1", [], {}) is False  # no longer trusted (the watch died)
