"""Each spec field's change kind (what a change to it requires), read from the models' field metadata.

Owns: the one walk over the models that gives every field its kind: the kind it declares
(`headrace.api.models.change(...)`), else its parent's (UPGRADE at the top), and the nested model
whose fields carry on (free-form fields, which allow any key, count as one field).
`headrace.core.changes` compares two specs with it; `headrace.api.docs` prints the table.
Never: I/O, comparing values.
"""

from __future__ import annotations

from collections.abc import Iterator

from pydantic import BaseModel

from headrace.api.models import ChangeKind, Model


def declared_kind(model: type[BaseModel], name: str) -> ChangeKind | None:
    """The kind a field declares in its metadata, if any."""
    for item in model.model_fields[name].metadata:
        if isinstance(item, ChangeKind):
            return item
    return None


def nested_model(model: type[BaseModel], name: str) -> type[Model] | None:
    """The model a field holds (also inside an Optional), when it has fields of its own."""
    annotation = model.model_fields[name].annotation
    for candidate in (annotation, *getattr(annotation, "__args__", ())):
        if isinstance(candidate, type) and issubclass(candidate, Model) and candidate.model_fields:
            return candidate
    return None


def field_kinds(model: type[BaseModel], inherited: ChangeKind) -> Iterator[tuple[str, ChangeKind, type[Model] | None]]:
    """(name, kind, nested model) of each field of `model`, whose own kind is `inherited`."""
    for name in model.model_fields:
        declared = declared_kind(model, name)
        yield name, inherited if declared is None else declared, nested_model(model, name)


def change_kinds(
    model: type[BaseModel], prefix: str, inherited: ChangeKind = ChangeKind.UPGRADE
) -> dict[str, ChangeKind]:
    """Field path -> what a change of it requires, for every field below `model`."""
    kinds: dict[str, ChangeKind] = {}
    for name, kind, nested in field_kinds(model, inherited):
        path = f"{prefix}.{name}"
        kinds[path] = kind
        if nested is not None:
            kinds.update(change_kinds(nested, path, kind))
    return kinds
