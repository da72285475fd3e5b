"""An upstream tool's input schema: checking a call against it, and what the gateway offers of it."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import jsonschema
from jsonschema.exceptions import SchemaError

__all__ = ["SchemaViolation", "check_arguments", "offered_schema"]


class SchemaViolation(ValueError):
    """The arguments fail the upstream's input schema; ``field`` names where (``(root)`` for the object)."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


def check_arguments(
    schema: Mapping[str, Any], arguments: Mapping[str, Any], *, reserved: str | None = None
) -> None:
    """Raise :class:`SchemaViolation` for the first error (by path) of ``arguments``.

    ``reserved``: the argument the gateway fills with its key; a client that passes it
    is refused, since the model never mints the key.
    """
    if reserved and reserved in arguments:
        raise SchemaViolation(reserved, "the gateway supplies this argument")
    full = copy.deepcopy(dict(schema))
    try:
        validator_cls = jsonschema.validators.validator_for(full)
        validator = validator_cls(full)
        errors = sorted(
            validator.iter_errors(dict(arguments)), key=lambda e: [str(p) for p in e.absolute_path]
        )
    except SchemaError as exc:
        raise SchemaViolation("(schema)", "the upstream's input schema is not valid") from exc
    if not errors:
        return
    first = errors[0]
    path = ".".join(str(p) for p in first.absolute_path)
    if not path and first.validator == "required":
        missing = [name for name in first.validator_value if name not in arguments]
        path = missing[0] if missing else "(root)"
        raise SchemaViolation(path, "required")
    if not path and first.validator == "additionalProperties":
        extra = sorted(set(arguments) - set((full.get("properties") or {}).keys()))
        raise SchemaViolation(extra[0] if extra else "(root)", "not allowed")
    raise SchemaViolation(path or "(root)", str(first.validator))


def offered_schema(schema: Mapping[str, Any], reserved: str | None) -> dict[str, Any]:
    """The schema a client is shown: the upstream's, without the argument the gateway fills."""
    shown = copy.deepcopy(dict(schema))
    if reserved:
        properties = shown.get("properties")
        if isinstance(properties, dict):
            properties.pop(reserved, None)
        required = shown.get("required")
        if isinstance(required, list):
            shown["required"] = [name for name in required if name != reserved]
    return shown
