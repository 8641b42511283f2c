"""Generate the CustomResourceDefinitions from the pydantic models (never hand-edit `crds/`).

Owns: turning pydantic JSON Schema into structural OpenAPI v3 (refs inlined, nullable instead of
anyOf-null, free-form objects preserved), printer columns, short names and subresources.
Never: I/O (the `headrace crds` command writes the files).
"""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import BaseModel

from headrace.api import models

_DROPPED_KEYS = {"title", "examples", "$defs"}


def _inline(schema: Any, definitions: dict[str, Any]) -> Any:
    """Resolve `$ref`s recursively and turn pydantic's JSON Schema into a structural schema."""
    if isinstance(schema, list):
        return [_inline(item, definitions) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        target = definitions[schema["$ref"].rsplit("/", 1)[-1]]
        extra = {key: value for key, value in schema.items() if key != "$ref"}
        return _inline({**target, **extra}, definitions)
    any_of = schema.get("anyOf")
    if any_of is not None:
        non_null = [option for option in any_of if option.get("type") != "null"]
        if len(non_null) == 1 and len(non_null) < len(any_of):
            rest = {key: value for key, value in schema.items() if key != "anyOf"}
            merged = _inline({**non_null[0], **rest}, definitions)
            merged["nullable"] = True
            if merged.get("default", ...) is None:
                del merged["default"]
            return merged
    result: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _DROPPED_KEYS:
            continue
        if key == "properties":
            result[key] = {name: _inline(sub, definitions) for name, sub in value.items()}
        elif key in {"items", "additionalProperties"} and isinstance(value, dict):
            result[key] = _inline(value, definitions)
        else:
            result[key] = value
    return _structural(result)


def _structural(schema: dict[str, Any]) -> dict[str, Any]:
    """Free-form objects keep unknown fields; closed objects rely on pruning and strict field validation."""
    if schema.get("type") == "object" and not schema.get("properties") and schema.get("additionalProperties") is True:
        schema.pop("properties", None)
        schema.pop("additionalProperties")
        schema["x-kubernetes-preserve-unknown-fields"] = True
    elif schema.get("additionalProperties") is False:
        del schema["additionalProperties"]
    if schema.get("default") is None:
        schema.pop("default", None)
    for exclusive, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if isinstance(schema.get(exclusive), int | float) and not isinstance(schema[exclusive], bool):
            schema[bound], schema[exclusive] = schema[exclusive], True  # OpenAPI v3: a flag on the bound
    return schema


def openapi_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The structural OpenAPI v3 schema of one model."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    inlined: dict[str, Any] = _inline(raw, raw.get("$defs", {}))
    return inlined


def _resource_schema(spec: type[BaseModel], status: type[BaseModel], description: str) -> dict[str, Any]:
    return {
        "type": "object",
        "description": description,
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": openapi_schema(spec),
            "status": openapi_schema(status),
        },
    }


def _crd(
    *,
    kind: str,
    plural: str,
    short_names: list[str],
    schema: dict[str, Any],
    columns: list[dict[str, Any]],
    subresources: dict[str, Any],
) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{models.GROUP}",
            "labels": {"app.kubernetes.io/name": "headrace", "app.kubernetes.io/part-of": "headrace"},
        },
        "spec": {
            "group": models.GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": short_names,
                "categories": ["headrace"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": models.VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": subresources,
                    "additionalPrinterColumns": columns,
                }
            ],
        },
    }


def streaming_app_crd() -> dict[str, Any]:
    """The StreamingApp CRD."""
    return _crd(
        kind=models.APP_KIND,
        plural=models.APP_PLURAL,
        short_names=["sapp"],
        schema=_resource_schema(
            models.StreamingAppSpec, models.StreamingAppStatus, "A streaming job managed by Headrace."
        ),
        columns=[
            {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
            {"name": "Executors", "type": "integer", "jsonPath": ".status.executors"},
            {"name": "Last Batch", "type": "date", "jsonPath": ".status.progress.lastBatchTime"},
            {"name": "Last Savepoint", "type": "date", "jsonPath": ".status.latestSavepoint.time"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
        subresources={
            "status": {},
            "scale": {
                "specReplicasPath": ".spec.executor.instances",
                "statusReplicasPath": ".status.executors",
                "labelSelectorPath": ".status.selector",
            },
        },
    )


def streaming_savepoint_crd() -> dict[str, Any]:
    """The StreamingSavepoint CRD."""
    return _crd(
        kind=models.SAVEPOINT_KIND,
        plural=models.SAVEPOINT_PLURAL,
        short_names=["ssp"],
        schema=_resource_schema(
            models.StreamingSavepointSpec, models.StreamingSavepointStatus, "One savepoint of a StreamingApp."
        ),
        columns=[
            {"name": "App", "type": "string", "jsonPath": ".spec.appName"},
            {"name": "Reason", "type": "string", "jsonPath": ".spec.reason"},
            {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
            {"name": "Batch", "type": "integer", "jsonPath": ".status.batchId"},
            {"name": "Path", "type": "string", "jsonPath": ".status.path", "priority": 1},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
        subresources={"status": {}},
    )


def all_crds() -> dict[str, dict[str, Any]]:
    """File name → CRD manifest, for every resource Headrace defines."""
    crds = [streaming_app_crd(), streaming_savepoint_crd()]
    return {f"{crd['metadata']['name']}.yaml": crd for crd in crds}


def render_yaml(crd: dict[str, Any]) -> str:
    """The CRD as the YAML text stored in `crds/` (a header says it is generated)."""
    header = "# Generated by `headrace crds` from headrace.api.models. Do not edit.\n"
    return header + yaml.safe_dump(crd, sort_keys=False, width=120)
