"""The tree drawn in ``sitekit/errors.py``'s docstring is the hierarchy the site defines,
hung under the engine's classes where it derives from them (drawn by their dotted names)."""

from __future__ import annotations

import keelgate.errors
import sitekit.errors
from tests.unit.test_error_tree import drawn_tree


def _class(name: str) -> type:
    if name.startswith("keelgate.errors."):
        return getattr(keelgate.errors, name.removeprefix("keelgate.errors."))
    return getattr(sitekit.errors, name)


def test_every_site_error_hangs_under_the_class_it_derives_from():
    """Each site class's parent in the drawing (one level up, above it) is its base class; an
    engine class, drawn in full in the engine's tree, derives from the one it hangs under."""
    parents: list[type] = []
    for depth, name, _ in drawn_tree(sitekit.errors):
        assert depth <= len(parents), f"{name} is drawn deeper than any parent above it"
        del parents[depth:]
        cls = _class(name)
        if parents and cls.__module__ == sitekit.errors.__name__:
            assert parents[-1] in cls.__bases__, f"{name} is drawn under {parents[-1].__name__}"
        elif parents:
            assert issubclass(cls, parents[-1]), f"{name} is drawn under {parents[-1].__name__}"
        parents.append(cls)


def test_the_site_drawing_names_every_error_with_its_code_and_status():
    """Every error of ``sitekit.errors.__all__`` is drawn once, with its code and, where it sets
    one, its status; and every error class the module defines is in ``__all__``."""
    drawn = [(name, rest) for _, name, rest in drawn_tree(sitekit.errors)]
    names = [name for name, _ in drawn]
    assert len(names) == len(set(names))
    defined = {
        name
        for name, value in vars(sitekit.errors).items()
        if isinstance(value, type)
        and issubclass(value, keelgate.errors.KeelgateError)
        and value.__module__ == sitekit.errors.__name__
    }
    assert defined == set(sitekit.errors.__all__)
    rests = dict(drawn)
    for name in sitekit.errors.__all__:
        assert name in rests, f"{name} is not drawn"
        cls = getattr(sitekit.errors, name)
        assert rests[name].split()[0] == cls.code, (
            f"{name}: drawn as {rests[name]!r}, its code is {cls.code!r}"
        )
        own = cls.__dict__.get("http_status")
        if own is not None:
            assert f"[{own}]" in rests[name], f"{name}: its status {own} is not drawn"
