"""Turn pydantic JSON schemas into Kubernetes structural OpenAPI v3 schemas (pure).

Structural means: every node has a `type` (or `x-kubernetes-int-or-string` /
`x-kubernetes-preserve-unknown-fields`), no `$ref`, and `anyOf` only as a pure validation
(here: only the int-or-string pair). Optional fields (`X | None`) become plain `X`: absence is how
Kubernetes spells "unset".
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

JsonDict = dict[str, Any]

_DROP = {"title", "$defs", "discriminator", "propertyNames"}
_INT_OR_STRING = [{"type": "integer"}, {"type": "string"}]


def structural_schema(model: type[BaseModel]) -> JsonDict:
    """The structural schema of `model` as it appears on the wire (camelCase aliases)."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs: JsonDict = raw.get("$defs", {})
    return _convert(raw, defs, depth=0)


def _resolve(node: JsonDict, defs: JsonDict) -> JsonDict:
    """Inline a `$ref` (or an allOf of one `$ref`), keeping sibling keys such as description/default."""
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        siblings = {k: v for k, v in node.items() if k != "$ref"}
        return {**target, **siblings}
    all_of = node.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1:
        siblings = {k: v for k, v in node.items() if k != "allOf"}
        return {**_resolve(all_of[0], defs), **siblings}
    return node


def _collapse_any_of(node: JsonDict, defs: JsonDict) -> JsonDict:
    variants = [v for v in node["anyOf"] if v != {"type": "null"}]
    rest = {k: v for k, v in node.items() if k != "anyOf"}
    if rest.get("default", 0) is None:
        del rest["default"]
    resolved = [_resolve(v, defs) for v in variants]
    if len(resolved) == 1:
        return {**resolved[0], **rest}
    types = sorted(v.get("type", "") for v in resolved)
    if types == ["integer", "string"] and all(len(v) == 1 for v in resolved):
        return {**rest, "x-kubernetes-int-or-string": True, "anyOf": list(_INT_OR_STRING)}
    raise ValueError(f"union is not expressible as a structural schema: {node['anyOf']}")


def _convert(node: JsonDict, defs: JsonDict, depth: int) -> JsonDict:
    if depth > 32:
        raise ValueError("schema nests too deep (recursive model?)")
    node = _resolve(node, defs)
    if "anyOf" in node:
        node = _collapse_any_of(node, defs)
        if node.get("x-kubernetes-int-or-string"):
            return {k: v for k, v in node.items() if k not in _DROP}
    out: JsonDict = {}
    for key, value in node.items():
        if key in _DROP:
            continue
        if key == "default" and value is None:
            continue
        if key == "const":
            out["enum"] = [value]
        elif key == "properties":
            out["properties"] = {name: _convert(sub, defs, depth + 1) for name, sub in value.items()}
        elif key == "items":
            out["items"] = _convert(value, defs, depth + 1)
        elif key == "additionalProperties":
            if isinstance(value, dict) and value:
                out["additionalProperties"] = _convert(value, defs, depth + 1)
            elif value is True or value == {}:
                out["x-kubernetes-preserve-unknown-fields"] = True
        else:
            out[key] = value
    if out.get("x-kubernetes-preserve-unknown-fields") and "type" not in out:
        out["type"] = "object"
    if "type" not in out and not out.get("x-kubernetes-int-or-string"):
        raise ValueError(f"schema node has no type: {node}")
    if out.get("type") == "object" and "properties" in out and "additionalProperties" in out:
        raise ValueError("properties and additionalProperties are mutually exclusive in structural schemas")
    return out


def find_violations(schema: JsonDict, path: str = "") -> list[str]:
    """Structural-schema rule violations in an already converted schema (used by tests)."""
    problems: list[str] = []
    if "$ref" in schema:
        problems.append(f"{path}: $ref")
    if "anyOf" in schema and not schema.get("x-kubernetes-int-or-string"):
        problems.append(f"{path}: anyOf without x-kubernetes-int-or-string")
    if "type" not in schema and not schema.get("x-kubernetes-int-or-string"):
        problems.append(f"{path}: no type")
    if schema.get("type") == "null":
        problems.append(f"{path}: null type")
    for name, sub in schema.get("properties", {}).items():
        problems.extend(find_violations(sub, f"{path}.{name}"))
    if isinstance(schema.get("items"), dict):
        problems.extend(find_violations(schema["items"], f"{path}[]"))
    if isinstance(schema.get("additionalProperties"), dict):
        problems.extend(find_violations(schema["additionalProperties"], f"{path}{{}}"))
    return problems
