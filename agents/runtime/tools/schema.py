"""Validation of tool arguments against the JSON Schema subset Modex tools declare.

Supported keywords: type (object, string, integer, number, boolean, array, null, or a list of
them), properties, required, additionalProperties (false), enum, minimum, maximum, minLength,
maxLength, items, maxItems. Unknown keywords are ignored, like any JSON Schema validator does.
"""

from __future__ import annotations

from typing import Any

_TYPES = {
    "object": dict,
    "string": str,
    "array": list,
    "boolean": bool,
    "null": type(None),
}


def _is_type(value: Any, kind: str) -> bool:
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    expected = _TYPES.get(kind)
    return expected is not None and isinstance(value, expected)


def validate(schema: dict[str, Any], value: Any, *, path: str = "arguments") -> list[str]:
    """Every way ``value`` breaks ``schema``, as readable strings; [] when it is valid."""
    errors: list[str] = []
    kinds = schema.get("type")
    if kinds is not None:
        options = kinds if isinstance(kinds, list) else [kinds]
        if not any(_is_type(value, k) for k in options):
            return [f"{path} must be {' or '.join(options)}, got {_json_type(value)}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path} must be one of {', '.join(map(repr, schema['enum']))}")
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            errors.append(f"{path} must be at least {schema['minLength']} characters")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append(f"{path} must be at most {schema['maxLength']} characters")
    if _is_type(value, "number"):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{path} must be >= {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{path} must be <= {schema['maximum']}")
    if isinstance(value, list):
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append(f"{path} must have at most {schema['maxItems']} items")
        if isinstance(schema.get("items"), dict):
            for index, item in enumerate(value):
                errors.extend(validate(schema["items"], item, path=f"{path}[{index}]"))
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                errors.append(f"{path}.{name} is required")
        if schema.get("additionalProperties") is False:
            for name in value:
                if name not in properties:
                    errors.append(f"{path}.{name} is not an accepted argument")
        for name, sub in properties.items():
            if name in value:
                errors.extend(validate(sub, value[name], path=f"{path}.{name}"))
    return errors


def _json_type(value: Any) -> str:
    for name in ("null", "boolean", "integer", "number", "string", "array", "object"):
        if _is_type(value, name):
            return name
    return type(value).__name__
