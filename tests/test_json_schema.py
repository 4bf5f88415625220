"""`opgen schema`: the JSON Schema editors use accepts every shipped spec and rejects what the
model rejects at the document level (unknown keys, wrong types, unknown dtypes)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from opgen.cli import main
from opgen.json_schema import spec_schema

ROOT = Path(__file__).resolve().parent.parent
SPECS = sorted((ROOT / "specs").glob("*.yaml")) + sorted((ROOT / "tests/golden/project/specs").glob("*.yaml"))


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.stem)
def test_shipped_specs_validate(spec):
    jsonschema.validate(yaml.safe_load(spec.read_text()), spec_schema())


@pytest.mark.parametrize("change", [
    {"kernal": {"pointwise": "x"}},
    {"dtypes": ["float"]},
    {"dtypes": []},
    {"kernel": {"pointwize": "x"}},
    {"gradient": 3},
    {"test": {"range": {}}},
    {"signature": ["x"]},
])
def test_schema_rejects_document_errors(change):
    doc = yaml.safe_load((ROOT / "specs/relu.yaml").read_text())
    doc.update(change)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, spec_schema())


def test_cli_prints_it_and_new_specs_point_to_it(tmp_path, capsys):
    assert main(["schema"]) == 0
    assert json.loads(capsys.readouterr().out) == spec_schema()
    root = tmp_path / "p"
    assert main(["init", str(root)]) == 0
    schema_file = root / "opgen-spec.schema.json"
    assert json.loads(schema_file.read_text()) == spec_schema()
    spec = (root / "specs" / "scaled_silu.yaml").read_text()
    assert spec.startswith("# yaml-language-server: $schema=../opgen-spec.schema.json")
    jsonschema.validate(yaml.safe_load(spec), json.loads(schema_file.read_text()))
