"""What the operator asks of the Kubernetes API, derived from its code rather than written down again.

- every Kubernetes client method (`self.core.create_namespaced_pod`, ...) in the methods of
  `headrace.adapters.kube` that the operator's controller and handlers call (the CLI uses the
  same adapter with the user's own credentials), mapped to (API group, resource, verb);
- the same for the leader-election Lease (`headrace.adapters.lease`), needed in the release
  namespace only;
- list and watch of every resource a kopf handler is registered for (`headrace.handlers`), plus
  what kopf itself does (events, CRD and namespace observation, and patching the finalizer and its
  progress annotations into the objects of a deletion handler: disposeOnDelete StreamingSavepoints);
- every rule of the Role the operator creates for drivers (`headrace.render.manifests.rbac`):
  Kubernetes lets the operator grant only permissions it holds.
"""

from __future__ import annotations

import ast
import re
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

from headrace.api import models
from headrace.render import manifests

from .helm import sample_attempt

PACKAGE = Path(__file__).resolve().parents[2] / "operator" / "headrace"
KUBE_ADAPTER = PACKAGE / "adapters" / "kube.py"
LEASE_ADAPTER = PACKAGE / "adapters" / "lease.py"
OPERATOR_SIDE = [*sorted((PACKAGE / "controller").glob("*.py")), PACKAGE / "handlers.py", PACKAGE / "app.py"]
CLIENT_GROUPS = {
    "core": "",
    "rbac": "rbac.authorization.k8s.io",
    "custom": models.GROUP,
    "coordination": "coordination.k8s.io",
    "networking": "networking.k8s.io",
    "policy": "policy",
}
# Resources without a namespace: the operator's calls on them need a ClusterRole (the Nodes its drivers run on).
CLUSTER_SCOPED = {("", "nodes")}
VERBS = {
    "get": "get",
    "read": "get",
    "list": "list",
    "create": "create",
    "delete": "delete",
    "delete_collection": "deletecollection",
    "replace": "update",
    "patch": "patch",
}
METHOD = re.compile(
    r"^(?P<verb>delete_collection|get|read|list|create|delete|replace|patch)_"
    r"(?:namespaced_|cluster_)?(?P<kind>[a-z_]+?)(?:_for_all_namespaces)?(?P<subresource>_status|_scale|_log)?$"
)
PLURALS = {"APP_PLURAL": models.APP_PLURAL, "SAVEPOINT_PLURAL": models.SAVEPOINT_PLURAL}


class Need(NamedTuple):
    """One permission: API group, resource (with `/subresource`), verb."""

    group: str
    resource: str
    verb: str


def _plural(kind: str) -> str:
    word = kind.replace("_", "")
    return word[:-1] + "ies" if word.endswith("y") else word + "s"


def _custom_plurals(call: ast.Call | None) -> list[str]:
    """The Headrace plurals a custom-object call names (both when it cannot be told)."""
    if call is not None:
        named = [
            PLURALS[node.attr] for node in ast.walk(call) if isinstance(node, ast.Attribute) and node.attr in PLURALS
        ]
        if named:
            return named
    return list(PLURALS.values())


def _client_method(node: ast.Attribute) -> tuple[str, str] | None:
    """(client attribute, method name) for `self.<client>.<method>`."""
    owner = node.value
    if (
        isinstance(owner, ast.Attribute)
        and owner.attr in CLIENT_GROUPS
        and isinstance(owner.value, ast.Name)
        and owner.value.id == "self"
    ):
        return owner.attr, node.attr
    return None


def _method_needs(function: ast.FunctionDef) -> set[Need]:
    calls = {id(node.func): node for node in ast.walk(function) if isinstance(node, ast.Call)}
    needs: set[Need] = set()
    for node in ast.walk(function):
        if not isinstance(node, ast.Attribute):
            continue
        found = _client_method(node)
        match = METHOD.match(found[1]) if found else None
        if found is None or match is None:
            continue
        client, verb, kind = found[0], VERBS[match["verb"]], match["kind"]
        subresource = (match["subresource"] or "").replace("_", "/")
        resources = _custom_plurals(calls.get(id(node))) if kind == "custom_object" else [_plural(kind)]
        needs.update(Need(CLIENT_GROUPS[client], resource + subresource, verb) for resource in resources)
    return needs


def adapter_method_needs(path: Path = KUBE_ADAPTER, class_name: str = "KubeClient") -> dict[str, set[Need]]:
    """Method of an adapter class -> the permissions its client calls need."""
    tree = ast.parse(path.read_text())
    (adapter,) = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == class_name]
    methods = {node.name: node for node in adapter.body if isinstance(node, ast.FunctionDef)}
    needs = {name: _method_needs(node) for name, node in methods.items()}
    helpers = {name: _own_calls(node) & methods.keys() for name, node in methods.items()}
    changed = True
    while changed:  # a method needs what the methods of its own it calls (self._helper(...)) need
        changed = False
        for name, called in helpers.items():
            more = set().union(*(needs[helper] for helper in called)) - needs[name] if called else set()
            if more:
                needs[name] |= more
                changed = True
    return needs


def _own_calls(function: ast.FunctionDef) -> set[str]:
    """Names of `self.<method>(...)` calls in a method."""
    return {
        node.func.attr
        for node in ast.walk(function)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "self"
    }


def operator_called_methods() -> set[str]:
    """Attribute names the controller and the kopf handlers use (a superset of the adapter calls)."""
    names: set[str] = set()
    for path in OPERATOR_SIDE:
        names.update(node.attr for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Attribute))
    return names


def adapter_needs(*, cluster_scoped: bool = False) -> set[Need]:
    """Permissions of every adapter method the operator calls: on namespaced resources, or (`cluster_scoped`) on
    resources without a namespace."""
    called = operator_called_methods()
    needs = {need for method, needs in adapter_method_needs().items() if method in called for need in needs}
    return {need for need in needs if ((need.group, need.resource) in CLUSTER_SCOPED) == cluster_scoped}


def lease_needs() -> set[Need]:
    """Permissions of every Lease adapter method the operator calls (in the release namespace)."""
    called = operator_called_methods()
    methods = adapter_method_needs(LEASE_ADAPTER, "LeaseClient")
    return {need for method, needs in methods.items() if method in called for need in needs}


def _registry() -> Any:
    """The operator's kopf handlers, every optional one included (the Node watch, the disposal)."""
    import kopf

    from headrace import handlers
    from headrace.controller.cache import Cache, Verifier
    from headrace.controller.workqueue import WorkQueue

    registry = kopf.OperatorRegistry()
    queue = WorkQueue(lambda key: None, workers=1)
    verifier = Verifier(set, queue.add, 300)
    handlers.register(
        registry,
        queue,
        Cache(),
        1,
        verifier=verifier,
        dispose=lambda body, tries, waited: None,
        nodes=lambda name, body: False,
    )
    return registry


def kopf_cluster_needs() -> set[Need]:
    """list and watch of every cluster-scoped resource a kopf handler of the operator watches (Nodes)."""
    needs: set[Need] = set()
    for handler in _registry()._watching.get_all_handlers():
        selector = handler.selector
        resource = selector.plural or selector.any_name
        if (selector.group or "", resource) in CLUSTER_SCOPED:
            needs.update(Need(selector.group or "", resource, verb) for verb in ("list", "watch"))
    return needs


def kopf_needs() -> set[Need]:
    """list and watch of every resource a kopf handler of the operator watches, and kopf's event posting."""
    registry = _registry()
    needs = {Need("", "events", "create")}
    for handler in registry._watching.get_all_handlers():
        selector = handler.selector
        resource = selector.plural or selector.any_name
        if (selector.group, resource) == CRDS or (selector.group or "", resource) in CLUSTER_SCOPED:
            continue  # cluster-scoped: CLUSTER_NEEDS_ALWAYS (the CRD-change watch, the Node watch)
        needs.update(Need(selector.group or "", resource, verb) for verb in ("list", "watch"))
    for handler in registry._changing.get_all_handlers():  # kopf patches its finalizer and progress annotations in
        selector = handler.selector
        resource = selector.plural or selector.any_name
        needs.update(Need(selector.group or "", resource, verb) for verb in ("list", "watch", "patch"))
    return needs


def driver_role_needs() -> set[Need]:
    """Every permission in the Roles the operator grants a driver (with a warm standby, its Lease's too)."""
    needs: set[Need] = set()
    plain = sample_attempt()
    warm = replace(plain, spec=plain.spec.model_copy(update={"standby": models.StandbySpec(enabled=True)}))
    roles = [obj for attempt in (plain, warm) for obj in manifests.rbac("clicks", "analytics", "uid", attempt)]
    for obj in roles:
        if obj["kind"] != "Role":
            continue
        for rule in obj["rules"]:
            needs.update(
                Need(group, resource, verb)
                for group in rule["apiGroups"]
                for resource in rule["resources"]
                for verb in rule["verbs"]
            )
    return needs


def namespaced_needs() -> set[Need]:
    """Everything the operator needs in each namespace it manages."""
    return adapter_needs() | kopf_needs() | driver_role_needs()


# kopf observes CRDs always, and namespaces when it watches a list of them (kopf._core.reactor.observation); the
# operator's own CRD watch (headrace.handlers, a CRD replaced under it) needs the same; and the adapter's calls on
# cluster-scoped resources (reading a driver's Node: whether it is drained or lost), and the Node watch.
CRDS = ("apiextensions.k8s.io", "customresourcedefinitions")
CLUSTER_NEEDS_ALWAYS = (
    {Need(*CRDS, verb) for verb in ("list", "watch")} | adapter_needs(cluster_scoped=True) | kopf_cluster_needs()
)
CLUSTER_NEEDS_WATCHING_NAMESPACES = {Need("", "namespaces", verb) for verb in ("list", "watch")}
