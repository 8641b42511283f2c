"""Generate the field reference of StreamingApp and StreamingSavepoint (`docs/reference.md`).

Owns: turning the generated CRDs (types, defaults, bounds, enums, patterns, descriptions, cross-field
rules, printer columns) and the models' change kinds into Markdown. Run it with
`python -m headrace.api.docs > docs/reference.md`; a test fails when the file drifts.
Never: I/O besides printing, hand-written field text (descriptions live on the models).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

from headrace.api import crd, models
from headrace.api.change_kinds import change_kinds

__all__ = ["change_kinds", "reference_markdown"]

CHANGE_TEXT = {
    models.ChangeKind.IGNORE: "applied without a restart",
    models.ChangeKind.SCALE: "executors rescaled in place",
    models.ChangeKind.UPGRADE: "new driver (per `upgradeMode`)",
    models.ChangeKind.REDEPLOY: "new run through a savepoint",
}

HEADER = """# Field reference

Generated from the pydantic models in `operator/headrace/api/models.py` by
`python -m headrace.api.docs > docs/reference.md`. Do not edit by hand: a test fails when this file
and the models disagree. The API group is `{group}`, version `{version}`.
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _code(value: Any) -> str:
    if isinstance(value, bool):
        value = "true" if value else "false"
    if value == "":
        return '`""`'
    return _cell(f"`{value}`")


def type_name(schema: dict[str, Any]) -> str:
    """A short human name of a schema's type."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return "object (free-form)"
    kind = str(schema.get("type", "any"))
    if kind == "array":
        return "[]" + type_name(schema.get("items", {}))
    additional = schema.get("additionalProperties")
    if kind == "object" and isinstance(additional, dict):
        return "map[string]" + type_name(additional)
    return kind


def constraints(schema: dict[str, Any]) -> str:
    """Enum, bounds and pattern of a schema, as Markdown."""
    parts = []
    if "enum" in schema:
        parts.append("one of " + ", ".join(_code(item) for item in schema["enum"]))
    for key, label in (("minimum", ">="), ("maximum", "<="), ("minLength", "length >=")):
        if key in schema:
            exclusive = schema.get({"minimum": "exclusiveMinimum", "maximum": "exclusiveMaximum"}.get(key, ""))
            parts.append(f"{label.rstrip('=') if exclusive is True else label} {schema[key]}")
    if "pattern" in schema:
        parts.append("matches " + _code(schema["pattern"]))
    return "; ".join(parts)


def rows(schema: dict[str, Any], prefix: str) -> Iterator[tuple[str, dict[str, Any], bool]]:
    """Every field under a schema: (dotted path, its schema, required), depth first in declaration order."""
    for name, sub in schema.get("properties", {}).items():
        path = f"{prefix}.{name}"
        yield path, sub, name in schema.get("required", [])
        items = sub.get("items", {})
        values = sub.get("additionalProperties")
        if "properties" in sub:
            yield from rows(sub, path)
        elif "properties" in items:
            yield from rows(items, path + "[]")
        elif isinstance(values, dict) and "properties" in values:  # a map's values: the fields of each
            yield from rows(values, path)


def _default(schema: dict[str, Any]) -> str:
    if "default" not in schema:
        return ""
    default = schema["default"]
    if isinstance(default, dict | list):
        return _code("{}" if isinstance(default, dict) else "[]") if not default else "see fields"
    return _code(default)


def field_table(schema: dict[str, Any], prefix: str, kinds: dict[str, models.ChangeKind] | None) -> list[str]:
    """A Markdown table of every field under `schema`."""
    head = "| Field | Type | Default | Constraints | Description |"
    rule = "|---|---|---|---|---|"
    if kinds is not None:
        head, rule = head + " On change |", rule + "---|"
    lines = [head, rule]
    for path, sub, is_required in rows(schema, prefix):
        description = _cell(str(sub.get("description", "")))
        if is_required:
            description = ("**Required.** " + description).strip()
        cells = [_code(path), _cell(type_name(sub)), _default(sub), constraints(sub), description]
        if kinds is not None:
            kind = kinds.get(path.replace("[]", ""))
            cells.append(CHANGE_TEXT[kind] if kind is not None else "")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def validation_rules(schema: dict[str, Any], prefix: str) -> list[str]:
    """The CEL rules (`x-kubernetes-validations`) under a schema, as bullet points with their message."""
    lines = []
    for rule in schema.get("x-kubernetes-validations", []):
        lines.append(f"- on `{prefix}`: {rule['message']} (rule `{rule['rule']}`)")
    for name, sub in schema.get("properties", {}).items():
        lines.extend(validation_rules(sub, f"{prefix}.{name}"))
    return lines


def _resource_section(manifest: dict[str, Any], spec_kinds: dict[str, models.ChangeKind] | None) -> list[str]:
    names = manifest["spec"]["names"]
    version = manifest["spec"]["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]
    lines = [f"## {names['kind']}", "", f"{schema['description']}", ""]
    short_names = ", ".join(f"`{name}`" for name in names["shortNames"])
    columns = ", ".join(
        column["name"] + (" (with -o wide)" if column.get("priority") else "")
        for column in version["additionalPrinterColumns"]
    )
    lines.append(
        f"Plural `{names['plural']}`, short names {short_names}, namespaced. "
        f"`kubectl get {names['shortNames'][0]}` shows {columns}."
    )
    scale = version["subresources"].get("scale")
    if scale is not None:
        lines.append(
            f"The scale subresource maps replicas to `{scale['specReplicasPath']}` "
            f"(`kubectl scale`, HPA and KEDA work on it)."
        )
    lines.append("")
    for part in ("spec", "status"):
        lines.extend([f"### {names['kind']} {part}", ""])
        lines.extend(field_table(schema["properties"][part], part, spec_kinds if part == "spec" else None))
        lines.append("")
    rules = validation_rules(schema["properties"]["spec"], "spec")
    if rules:
        lines.extend([f"### {names['kind']} cross-field rules (checked by the API server)", "", *rules, ""])
    return lines


def reference_markdown() -> str:
    """The whole field reference."""
    lines = [HEADER.format(group=models.GROUP, version=models.VERSION)]
    lines.extend(
        [
            "In the spec of a StreamingApp, *On change* says what changing the field does to a running app.",
            "",
        ]
    )
    manifests = crd.all_crds()
    app_kinds = change_kinds(models.StreamingAppSpec, "spec")
    lines.extend(_resource_section(manifests[f"{models.APP_PLURAL}.{models.GROUP}.yaml"], app_kinds))
    lines.extend(_resource_section(manifests[f"{models.SAVEPOINT_PLURAL}.{models.GROUP}.yaml"], None))
    return "\n".join(lines).rstrip("\n") + "\n"


def main() -> int:
    """Print the reference to standard output."""
    sys.stdout.write(reference_markdown())
    return 0


if __name__ == "__main__":
    sys.exit(main())
