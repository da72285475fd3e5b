"""The tree drawn in ``keelgate/errors.py``'s docstring is the hierarchy the module defines."""

from __future__ import annotations

import builtins
from types import ModuleType

import keelgate.errors


def drawn_tree(module: ModuleType = keelgate.errors) -> list[tuple[int, str, str]]:
    """(depth, class name, the rest of the line) for every line of ``module``'s drawing, in order."""
    doc = module.__doc__ or ""
    drawing = doc.split("::", 1)[1].strip("\n").splitlines()
    indent = len(drawing[0]) - len(drawing[0].lstrip())
    rows = []
    for line in drawing:
        body = line[indent:]
        branch = max(body.find("├── "), body.find("└── "))
        depth = 0 if branch < 0 else branch // 4 + 1
        name = (body[branch + 4 :] if branch >= 0 else body).split()[0]
        rest = (body[branch + 4 :] if branch >= 0 else body)[len(name) :].strip()
        rows.append((depth, name, rest))
    return rows


def test_every_line_hangs_under_the_class_it_derives_from():
    """Each drawn class's parent in the drawing (one level up, above it) is its base class."""
    parents: list[str] = []
    for depth, name, _ in drawn_tree():
        assert depth <= len(parents), f"{name} is drawn deeper than any parent above it"
        del parents[depth:]
        if parents:
            cls = getattr(keelgate.errors, name, None) or getattr(builtins, name)
            assert parents[-1] in [base.__name__ for base in cls.__bases__], (
                f"{name} is drawn under {parents[-1]}, but derives from {[b.__name__ for b in cls.__bases__]}"
            )
        parents.append(name)


def test_the_drawing_names_every_error_with_its_code_and_status():
    """Every error of ``__all__`` is drawn once, with its stable code and, where it sets one, its status."""
    drawn = {name: rest for _, name, rest in drawn_tree()}
    errors = [n for n in keelgate.errors.__all__ if isinstance(getattr(keelgate.errors, n), type)]
    assert sorted(n for n in errors if n in drawn) == sorted(errors)
    for name in errors:
        cls = getattr(keelgate.errors, name)
        code = getattr(cls, "code", None)
        rest = drawn[name]
        if code is None or cls is keelgate.errors.KeelgateError or rest.startswith("("):
            continue  # the root and GatewayError (a family of outcome codes) have no code of their own
        assert rest.split()[0] == code, f"{name}: drawn as {rest!r}, its code is {code!r}"
        own = cls.__dict__.get("http_status")
        if own is not None:
            assert f"[{own}]" in rest, f"{name}: its status {own} is not drawn"
