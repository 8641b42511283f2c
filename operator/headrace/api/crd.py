"""Generate the CustomResourceDefinitions from the pydantic models (never hand-edit `crds/`).

Owns: turning pydantic JSON Schema into structural OpenAPI v3 (refs inlined, nullable instead of
anyOf-null, free-form objects preserved, a tagged union of objects merged into one object whose
constant fields name the variant, with a CEL rule refusing other combinations), the write-ahead log's
legacy `detail` (so the API server keeps it), printer columns, short names and subresources.
Never: I/O (the `headrace crds` command writes the files).
"""

from __future__ import annotations

import json
from typing import Any

import yaml
from pydantic import BaseModel

from headrace.api import models
from headrace.api.log_migration import LEGACY_DETAIL, LEGACY_DETAIL_SCHEMA

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
    if "oneOf" in schema:
        return _inline_union(schema, definitions)
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


def _inline_union(schema: dict[str, Any], definitions: dict[str, Any]) -> Any:
    rest = {key: value for key, value in schema.items() if key != "oneOf"}
    merged = _merge_variants([_inline(option, definitions) for option in schema["oneOf"]])
    if "description" in rest:
        merged["description"] = f"{rest.pop('description')} One of: {merged['description']}"
    return _inline({**merged, **rest}, definitions)


def _merge_variants(variants: list[dict[str, Any]]) -> dict[str, Any]:
    """One structural object for a union of objects (Kubernetes has no tagged unions): every variant's fields,
    the fields each variant fixes (`const`: its tag) required and one of their values, a CEL rule that refuses a
    combination of them no variant has, and descriptions naming the variants that have each field. A field
    some variants lack has no default (the API server would add it to the others)."""
    tags = [[name for name, field in variant["properties"].items() if "const" in field] for variant in variants]
    labels = [
        "/".join(str(variant["properties"][name]["const"]) for name in tag)
        for variant, tag in zip(variants, tags, strict=True)
    ]
    tag_fields = list(dict.fromkeys(name for tag in tags for name in tag))
    owners: dict[str, dict[str, list[str]]] = {}  # field -> its description -> the variants with it
    properties: dict[str, Any] = {}
    for variant, label in zip(variants, labels, strict=True):
        for name, field in variant["properties"].items():
            if name in tag_fields:
                merged = properties.setdefault(name, {"type": field["type"], "enum": []})
                merged["enum"] += [] if field["const"] in merged["enum"] else [field["const"]]
                continue
            owners.setdefault(name, {}).setdefault(_one_line(field.get("description", "")), []).append(label)
            shape = {key: value for key, value in field.items() if key not in ("description", "default", "enum")}
            first = properties.setdefault(name, field)
            if shape != {key: value for key, value in first.items() if key not in ("description", "default", "enum")}:
                raise ValueError(f"field {name!r} has different types in the variants {labels}")
            if first.get("enum") != field.get("enum"):
                first.pop("enum", None)  # a union of a closed and an open set of words: any word
    for name, described in owners.items():
        field, having = properties[name], [label for owned in described.values() for label in owned]
        if len(having) < len(variants):
            field.pop("default", None)
        if len(described) == 1 and len(having) < len(variants):
            field["description"] = f"{next(iter(described))} (Only in {', '.join(having)}.)"
        elif len(described) > 1:
            field["description"] = " ".join(f"{', '.join(owned)}: {text}" for text, owned in described.items())
    allowed = ", ".join(f"'{label}'" for label in labels)
    combined = " + '/' + ".join(f"self.{name}" for name in tag_fields)
    return {
        "type": "object",
        "description": " ".join(
            f"{label}: {_one_line(variant.get('description', ''))}"
            for variant, label in zip(variants, labels, strict=True)
        ),
        "properties": properties,
        "required": [
            name
            for name in properties
            if name in tag_fields or all(name in item.get("required", []) for item in variants)
        ],
        "x-kubernetes-validations": [
            {
                "rule": f"{combined} in [{allowed}]",
                "message": f"{'/'.join(tag_fields)} must be one of {', '.join(labels)}",
            }
        ],
    }


def _one_line(text: str) -> str:
    return " ".join(text.split())


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
    inlined: dict[str, Any] = json.loads(json.dumps(_inline(raw, raw.get("$defs", {}))))  # no shared parts
    return inlined


def _resource_schema(spec: type[BaseModel], status: type[BaseModel], description: str) -> dict[str, Any]:
    status_schema = openapi_schema(status)
    log = status_schema["properties"].get("pendingOperation")
    if log is not None:  # entries the previous release wrote keep their particulars until they are read
        log["properties"][LEGACY_DETAIL] = LEGACY_DETAIL_SCHEMA
    return {
        "type": "object",
        "description": description,
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": openapi_schema(spec),
            "status": status_schema,
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
