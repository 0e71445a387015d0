# Copyright: kube-accel contributors
# Apache License 2.0
"""A release's values: merged the way helm coalesces them, rendered from a template, and checked against the chart's
values.schema.json with errors that name the field, the value and what is allowed."""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from typing import Any

from ansible_collections.kube_accel.gpu.plugins.module_utils.common.pyyaml import yaml
from ansible_collections.kube_accel.gpu.plugins.module_utils.helm.errors import HelmError


def deep_merge(base: dict, override: dict) -> dict:
    """``override`` laid over ``base``; nested dicts merge, everything else (lists included) is replaced."""
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def coalesce(defaults: dict, user: dict) -> dict:
    """What helm validates against the schema: chart defaults, user values on top; a null removes a key."""
    out = copy.deepcopy(defaults)
    for key, value in user.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = coalesce(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def normalize(values: Any) -> Any:
    """Values as helm stores them (JSON round trip), so 1 vs 1.0 or tuple vs list never count as a change."""
    if values is None:
        return {}
    return json.loads(json.dumps(values, sort_keys=True, default=str))


def render_values_template(path: str, variables: dict) -> dict:
    """Render a Jinja2 values template with ``variables`` and parse the result as a YAML mapping."""
    import jinja2  # only needed when values_template is used

    try:
        with open(path, encoding="utf-8") as handle:
            source = handle.read()
    except OSError as exc:
        raise HelmError(f"cannot read values_template {path}: {exc.strerror}") from None
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)
    env.filters["to_yaml"] = lambda v: yaml.safe_dump(v, default_flow_style=True).rstrip("\n").removesuffix("...")
    env.filters["to_nice_yaml"] = lambda v, indent=2: yaml.safe_dump(v, default_flow_style=False, indent=indent)
    env.filters["to_json"] = lambda v: json.dumps(v, sort_keys=True)
    try:
        text = env.from_string(source).render(**variables)
    except jinja2.TemplateError as exc:
        where = f" line {exc.lineno}" if getattr(exc, "lineno", None) else ""
        raise HelmError(f"values_template {path}{where}: {exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise HelmError(f"values_template {path} did not render to valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise HelmError(f"values_template {path} must render to a YAML mapping, got {type(data).__name__}")
    return data


def values_yaml(values: dict) -> str:
    return yaml.safe_dump(normalize(values), default_flow_style=False, sort_keys=True) if values else "{}\n"


# ----------------------------------------------------------------------------------------------------------
# schema validation


def _json_path(parts: Sequence[Any]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(root)"


def _short(value: Any, limit: int = 80) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# How each common JSON Schema keyword reads after the offending value.
_CONSTRAINTS = {
    "enum": "is not one of the allowed values {}",
    "const": "is not the required value {}",
    "type": "is not of type {}",
    "minimum": "is below the minimum {}",
    "maximum": "is above the maximum {}",
    "exclusiveMinimum": "must be greater than {}",
    "exclusiveMaximum": "must be less than {}",
    "pattern": "does not match the pattern {}",
    "minLength": "is shorter than the minimum length {}",
    "maxLength": "is longer than the maximum length {}",
    "minItems": "has fewer items than the minimum {}",
    "maxItems": "has more items than the maximum {}",
    "uniqueItems": "has duplicate items",
    "multipleOf": "is not a multiple of {}",
    "format": "is not a valid {}",
}


def _constraint(err: Any) -> str:
    phrase = _CONSTRAINTS.get(err.validator)
    if phrase is None:
        return f"violates {err.validator}: {_short(err.validator_value)}"
    return phrase.format(_short(err.validator_value))


def schema_errors(schema: dict, values: dict) -> list[str]:
    """One readable line per violation: field path, bad value, the constraint and the schema's description."""
    import jsonschema

    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        return [f"the chart's values.schema.json is itself invalid: {exc.message}"]
    lines = []
    for err in sorted(cls(schema).iter_errors(values), key=lambda e: (list(map(str, e.absolute_path)), e.validator)):
        line = f"{_json_path(list(err.absolute_path))}: {_short(err.instance)} {_constraint(err)}"
        if err.validator in ("required", "additionalProperties", "dependentRequired", "propertyNames"):
            # The bad value is the whole parent object; jsonschema's own message names the key at fault.
            line = f"{_json_path(list(err.absolute_path))}: {err.message}"
        description = err.schema.get("description") if isinstance(err.schema, dict) else None
        if description:
            line += f" ({description})"
        for sub in err.context or ():  # anyOf/oneOf: say what each branch wanted
            line += f"\n    - {_json_path(list(sub.absolute_path))}: {sub.message}"
        lines.append(line)
    return lines
