"""The JSON Schema of the spec format, built from the model's own tables (keys, dtypes,
functions), so editors validate against exactly what `OpSpec.parse` accepts at the top level."""

from __future__ import annotations

from typing import Any

from .dtypes import DTYPES, GROUPS
from .functions import FUNCTIONS
from .model import AUTOCAST, COMBINES, KERNEL_KEYS, REDUCE_KEYS, TEST_KEYS, TOP_KEYS, VARIANTS

SCHEMA_ID = "https://opgen.dev/schemas/spec-v1.json"


def spec_schema() -> dict[str, Any]:
    rule = {"type": "string", "pattern": r"^\s*(same|broadcast|reduce)\s*\("}
    expression = {"type": "string", "description": "An expression: numbers, argument names, + - * / **, comparisons, "
                  "and / or / not, and " + ", ".join(sorted(FUNCTIONS)) + "."}
    properties: dict[str, Any] = {
        "signature": {"type": "string", "description": "PyTorch function-schema syntax, e.g. "
                      "'weighted_sum(Tensor a, Tensor b, *, float weight=1.0) -> Tensor'. The op name equals the file name.",
                      "pattern": r"^\s*[A-Za-z][A-Za-z0-9_]*\s*\("},
        "doc": {"type": "string", "description": "One paragraph: the C++ comment, Python docstring and reference page."},
        "dtypes": {"type": "array", "minItems": 1, "items": {"enum": sorted(DTYPES) + sorted(GROUPS)},
                   "description": "Accepted dtypes and groups."},
        "shape": {"description": "same(x), broadcast(a, b, ...), reduce(x, dim, keepdim) or a list of size expressions; "
                                 "for a hand-written op with several outputs, a mapping from each output's name to its rule.",
                  "oneOf": [rule, {"type": "array", "items": {"type": "string"}},
                            {"type": "object", "minProperties": 2,
                             "additionalProperties": {"oneOf": [rule, {"type": "array", "items": {"type": "string"}}]}}]},
        "checks": {"type": "array", "items": {"type": "string"}, "description": "Conditions checked on every call."},
        "let": {"type": "object", "minProperties": 1, "propertyNames": {"pattern": r"^[A-Za-z_][A-Za-z0-9_]*$"},
                "additionalProperties": expression,
                "description": "Names for sub-expressions, in order: the kernel, gradients, checks and later lets read "
                               "each as if its expression were written there."},
        "kernel": {"type": "object", "additionalProperties": False, "minProperties": 1,
                   "properties": {
                       "pointwise": {"oneOf": [expression, {"type": "object", "minProperties": 2, "additionalProperties": expression,
                                                            "description": "One expression per output of a multi-output op."}]},
                       "reduce": {"type": "object", "additionalProperties": False, "required": ["map", "combine"],
                                  "description": "map each element, fold with combine, finish with post.",
                                  "properties": {
                                      "map": expression,
                                      "combine": {"type": "string", "description": ", ".join(COMBINES)
                                                  + ", or an expression of the accumulators a and b (with an identity)."},
                                      "identity": {"type": ["number", "string"], "description": "A custom combine's neutral value (inf, -inf allowed)."},
                                      "post": expression}},
                       "cpu": {"type": "string", "description": "A hand-written CPU kernel (.cpp), relative to the spec; "
                               "`opgen generate` writes a stub if it is missing."},
                       "cuda": {"type": "string", "description": "A hand-written CUDA kernel (.cu), relative to the spec."},
                   }},
        "gradient": {"description": "'auto', a formula per differentiable tensor input, or (hand-written kernels) "
                                    "{kernel: {cpu: <file>, cuda: <file>}}.",
                     "oneOf": [{"const": "auto"},
                               {"type": "object", "required": ["kernel"], "additionalProperties": False,
                                "properties": {"kernel": {"type": "object", "additionalProperties": False, "required": ["cpu"],
                                                          "properties": {"cpu": {"type": "string"}, "cuda": {"type": "string"}}}}},
                               {"type": "object", "not": {"required": ["kernel"]}, "additionalProperties": expression}]},
        "variants": {"type": "array", "uniqueItems": True, "items": {"enum": list(VARIANTS)},
                     "description": "Extra overloads: out (<op>.out, the default for one-output ops) and inplace (<op>_)."},
        "autocast": {"enum": list(AUTOCAST), "description": "Under torch.autocast, the floating inputs are cast to: "
                     + "; ".join(f"{p}: {what}" for p, (what, _) in AUTOCAST.items()) + ". Absent: left as they are."},
        "reference": {"type": "string", "description": "A torch expression used by tests as the oracle."},
        "test": {"type": "object", "additionalProperties": False, "properties": {
            "ranges": {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "number"},
                                                                  "minItems": 2, "maxItems": 2}},
            "shapes": {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "integer", "minimum": 0}}},
            "surrogate": {"type": "array", "uniqueItems": True, "items": {"type": "string"},
                          "description": "Inputs whose gradient is not the kernel's derivative (a straight-through "
                                         "estimator): checked against the reference's autograd, not finite differences."},
        }},
    }
    assert set(properties) == set(TOP_KEYS), "JSON Schema and model disagree on top-level keys"
    assert set(properties["kernel"]["properties"]) == set(KERNEL_KEYS)
    assert set(properties["test"]["properties"]) == set(TEST_KEYS)
    assert set(properties["kernel"]["properties"]["reduce"]["properties"]) == set(REDUCE_KEYS)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "opgen op spec (v1)",
        "type": "object",
        "additionalProperties": False,
        "required": ["signature", "dtypes", "shape", "kernel"],
        "properties": properties,
    }
