"""`crds/` is generated from the models: this fails when someone edits one without the other."""

from __future__ import annotations

from pathlib import Path

import pytest

from headrace.api import crd

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("directory", ["crds", "charts/headrace/crds"])
def test_generated_crds_match_the_models(directory: str) -> None:
    for file_name, manifest in crd.all_crds().items():
        path = REPO / directory / file_name
        assert path.exists(), f"{path} missing: run `headrace crds`"
        assert path.read_text() == crd.render_yaml(manifest), f"{path} is stale: run `headrace crds`"


def test_schemas_are_structural() -> None:
    """No $ref, anyOf, additionalProperties: false or numeric exclusive bounds (OpenAPI v3 has a flag on
    minimum/maximum instead) may reach the API server."""

    def walk(node: object, where: str) -> None:
        if isinstance(node, dict):
            assert "$ref" not in node and "anyOf" not in node, where
            assert node.get("additionalProperties") is not False, where
            for exclusive, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
                assert node.get(exclusive, True) is True and (exclusive not in node or bound in node), where
            for key, value in node.items():
                walk(value, f"{where}.{key}")
        elif isinstance(node, list):
            for index, value in enumerate(node):
                walk(value, f"{where}[{index}]")

    for name, manifest in crd.all_crds().items():
        walk(manifest["spec"]["versions"][0]["schema"], name)
