"""The "edit, then approve" form, generated from the tool's argument schema (JSON schema).

Each argument becomes a typed field with the schema's limits, pre-filled with what the
agent proposed. What comes back is parsed by the same schema's types: a number field
gives a number, a boolean a boolean; the engine then validates strictly against the
tool's pydantic model, so this parsing only turns form text into JSON values.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["EditField", "edit_fields", "parse_edit"]

PREFIX = "arg."
"""Form field names: ``arg.<argument>``."""


@dataclass(frozen=True)
class EditField:
    """One argument as a form field."""

    name: str
    kind: str
    """``integer``, ``number``, ``string``, ``boolean``, ``choice`` or ``json`` (anything else)."""
    value: str
    required: bool
    choices: list[str] = field(default_factory=list)
    minimum: str = ""
    maximum: str = ""
    max_length: int | None = None
    pattern: str = ""
    description: str = ""

    @property
    def input_name(self) -> str:
        return PREFIX + self.name


def _resolve(spec: Mapping[str, Any], schema: Mapping[str, Any]) -> tuple[Mapping[str, Any], bool]:
    """The property's own schema (following ``$ref``, unwrapping ``X | None``), and if null is allowed."""
    nullable = False
    if "anyOf" in spec:
        options = [o for o in spec["anyOf"] if o.get("type") != "null"]
        nullable = len(options) < len(spec["anyOf"])
        spec = options[0] if len(options) == 1 else spec
    ref = spec.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        spec = schema.get("$defs", {}).get(ref.rsplit("/", 1)[-1], spec)
    return spec, nullable


def _kind(spec: Mapping[str, Any]) -> str:
    if "enum" in spec and all(isinstance(v, str) for v in spec["enum"]):
        return "choice"
    kind = spec.get("type")
    return kind if kind in ("integer", "number", "string", "boolean") else "json"


def _shown(value: Any, kind: str) -> str:
    if value is None:
        return ""
    if kind == "boolean":
        return "true" if value is True else "false" if value is False else ""
    if kind == "json" or not isinstance(value, (str, int, float)):
        return json.dumps(value, sort_keys=True)
    return str(value)


def edit_fields(schema: Mapping[str, Any] | None, arguments: Mapping[str, Any]) -> list[EditField]:
    """The form's fields, in the schema's order, filled with ``arguments``."""
    if not schema:
        return []
    required = set(schema.get("required", []))
    fields = []
    for name, raw in schema.get("properties", {}).items():
        spec, nullable = _resolve(raw, schema)
        kind = _kind(spec)
        low, high = _bounds(spec, kind)
        fields.append(
            EditField(
                name=name,
                kind=kind,
                value=_shown(arguments.get(name, spec.get("default")), kind),
                required=name in required and not nullable,
                choices=[str(v) for v in spec.get("enum", [])],
                minimum=low,
                maximum=high,
                max_length=spec.get("maxLength"),
                pattern=str(spec.get("pattern", "")),
                description=str(raw.get("description", spec.get("description", ""))),
            )
        )
    return fields


def _bounds(spec: Mapping[str, Any], kind: str) -> tuple[str, str]:
    """The input's ``min`` and ``max`` from the schema's bounds, exclusive ones included: an
    integer above an exclusive 0 starts at 1. HTML has no exclusive bound for a number, so
    there the bound is shown as inclusive and the server's check refuses the bound itself."""

    def bound(inclusive: str, exclusive: str, step: int) -> str:
        value = spec.get(inclusive)
        excl = spec.get(exclusive)
        if isinstance(excl, bool) or not isinstance(excl, (int, float)):
            return "" if value is None else str(value)
        if kind == "integer":
            edge = math.floor(excl) + 1 if step > 0 else math.ceil(excl) - 1
            if value is not None:
                edge = max(edge, value) if step > 0 else min(edge, value)
            return str(int(edge))
        return str(excl if value is None else (max(excl, value) if step > 0 else min(excl, value)))

    return bound("minimum", "exclusiveMinimum", 1), bound("maximum", "exclusiveMaximum", -1)


def parse_edit(fields: list[EditField], form: Mapping[str, str]) -> tuple[dict[str, Any], list[str]]:
    """The edited arguments as JSON values, and what could not be read (field: why)."""
    arguments: dict[str, Any] = {}
    problems: list[str] = []
    for f in fields:
        text = str(form.get(f.input_name, "")).strip()
        if text == "":
            if f.required:
                problems.append(f"{f.name}: required")
            continue
        try:
            arguments[f.name] = _parse(f, text)
        except ValueError as exc:
            problems.append(f"{f.name}: {exc}")
    return arguments, problems


def _parse(f: EditField, text: str) -> Any:
    if f.kind == "integer":
        try:
            return int(text)
        except ValueError:
            raise ValueError("a whole number") from None
    if f.kind == "number":
        try:
            return float(text)
        except ValueError:
            raise ValueError("a number") from None
    if f.kind == "boolean":
        if text not in ("true", "false"):
            raise ValueError("true or false")
        return text == "true"
    if f.kind == "json":
        try:
            return json.loads(text)
        except ValueError:
            raise ValueError("JSON") from None
    return text
