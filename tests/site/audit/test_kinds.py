"""The list of audit event kinds (``audit.kinds``) is the list of kinds the product writes.

The product's source is read, not run: every call that appends to a chain (``append``
or ``record`` with a ``kind=``, the engine's ``_audit(state_or_ctx, kind, ...)``) is
found, and its kind resolved (a literal, or a module constant such as
``audit.lockouts.LOCKED_OUT``). A wrapper that passes its own ``kind`` parameter along
and a replay of held writes (``REPLAYS``) are the only calls allowed to name no kind.

The body fields each call names in its source are read too (a ``body={...}`` literal, a
dict the function built under a name, the helpers' keyword arguments) and must be
fields its kind lists (``EventKind.fields``). Fields a body gets at run time (a spread
of a helper's answer, the engine's ``call_fields``) are not in the source:
``test_kind_fields.py`` catches those by driving runs and reading what was written.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from audit.kinds import EVENT_KINDS
from audit.schemas import KIND
from keelgate.tracing import DECISION_KINDS
from notifications.passes import channels

ROOT = Path(__file__).resolve().parents[3]
PRODUCT = (
    "keelgate",
    "sitekit",
    "tenants",
    "audit",
    "runs",
    "approvals",
    "notifications",
    "mcp_gateway",
    "keelgate_site",
    "demo",
)
NOT_PRODUCT = ("keelgate/testing/",)
"""The engine's shipped test doubles and contract suites write made-up kinds (``"k"``) on purpose."""
WRITERS = {"append", "record"}
POSITIONAL_WRITERS = {"_audit", "audit"}
"""The engine's helpers that take the state, then the kind (the loop's ``RunRecord.audit``)."""
REPLAYS = {("keelgate.contrib.langgraph._gated", "release"), ("mcp_gateway.services", "flush")}
"""Functions that write again what an earlier call held back (its kind was scanned at that call)."""


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


class _Writes(ast.NodeVisitor):
    """(module, kind) for every audit write in one file; unresolved calls in ``unresolved``."""

    def __init__(self, module: str, constants: dict[str, str]) -> None:
        self.module = module
        self.constants = constants
        self.params: list[set[str]] = [set()]
        self.functions: list[str] = [""]
        self.dicts: list[dict[str, set[str]]] = [{}]
        self.found: set[tuple[str, str]] = set()
        self.fields: list[tuple[str, int, str, frozenset[str]]] = []
        """(module, line, kind, the body fields the call's source names) per resolved write."""
        self.unresolved: list[str] = []

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        args = node.args
        names = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}
        self.params.append(names)
        self.functions.append(node.name)
        self.dicts.append(_local_dicts(node))
        self.generic_visit(node)
        self.params.pop()
        self.functions.pop()
        self.dicts.pop()

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        kind_node = next((k.value for k in node.keywords if k.arg == "kind"), None)
        if name in POSITIONAL_WRITERS and kind_node is None and len(node.args) > 1:
            kind_node = node.args[1]
        if (name in WRITERS or name in POSITIONAL_WRITERS) and kind_node is not None:
            kind = self._resolve(kind_node, node)
            if kind is not None:
                fields = self._body_fields(node, positional=name in POSITIONAL_WRITERS)
                self.fields.append((self.module, node.lineno, kind, frozenset(fields)))
        self.generic_visit(node)

    def _body_fields(self, call: ast.Call, *, positional: bool) -> set[str]:
        """The body fields the call names in its source (not what a spread adds at run time)."""
        fields: set[str] = set()
        for keyword in call.keywords:
            value = keyword.value
            if keyword.arg == "body" and not positional:
                if isinstance(value, ast.Dict):
                    fields |= _literal_keys(value)
                elif isinstance(value, ast.Name):
                    fields |= self.dicts[-1].get(value.id, set())
            elif positional and keyword.arg not in (None, "actor", "kind"):
                fields.add(str(keyword.arg))
            elif positional and keyword.arg is None and isinstance(value, ast.Name):
                fields |= self.dicts[-1].get(value.id, set())  # **body, built above
        return fields

    def _resolve(self, value: ast.expr, call: ast.Call) -> str | None:
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            self.found.add((self.module, value.value))
            return value.value
        elif isinstance(value, ast.Name) and value.id in self.constants:
            self.found.add((self.module, self.constants[value.id]))
            return self.constants[value.id]
        elif isinstance(value, ast.Name) and value.id in self.params[-1]:
            pass  # a wrapper handing its caller's kind on: the caller is scanned too
        elif (self.module, self.functions[-1]) in REPLAYS:
            pass
        else:
            self.unresolved.append(f"{self.module}:{call.lineno}")
        return None


def _literal_keys(node: ast.Dict) -> set[str]:
    """The constant string keys of a dict display (a ``**spread`` has no key)."""
    return {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}


def _local_dicts(function: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, set[str]]:
    """The keys of each dict a function builds under a name: ``name = {...}`` (annotated or
    not) and every ``name["key"] = ...`` after it."""
    found: dict[str, set[str]] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name) and isinstance(node.value, ast.Dict):
                    found.setdefault(target.id, set()).update(_literal_keys(node.value))
                elif (
                    isinstance(target, ast.Subscript)
                    and isinstance(target.value, ast.Name)
                    and isinstance(target.slice, ast.Constant)
                    and isinstance(target.slice.value, str)
                ):
                    found.setdefault(target.value.id, set()).add(target.slice.value)
    return found


def _constants(tree: ast.Module) -> dict[str, str]:
    found: dict[str, str] = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
        if isinstance(node, ast.AnnAssign):
            target = node.target
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and isinstance(value, ast.Constant) and isinstance(value.value, str):
            found[target.id] = value.value
    return found


def _scan() -> tuple[set[tuple[str, str]], list[str]]:
    found, unresolved, _ = _scan_fields()
    return found, unresolved


def _scan_fields() -> tuple[set[tuple[str, str]], list[str], list[tuple[str, int, str, frozenset[str]]]]:
    found: set[tuple[str, str]] = set()
    unresolved: list[str] = []
    fields: list[tuple[str, int, str, frozenset[str]]] = []
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if relative.startswith(NOT_PRODUCT) or "/migrations/" in relative:
                continue
            tree = ast.parse(path.read_text(), filename=relative)
            writes = _Writes(_module(path), _constants(tree))
            writes.visit(tree)
            found |= writes.found
            unresolved += writes.unresolved
            fields += writes.fields
    return found, unresolved, fields


def test_every_kind_the_product_writes_is_listed_and_every_listed_kind_is_written():
    """The scan finds each listed kind written, and no kind written that the list lacks."""
    found, unresolved = _scan()
    assert unresolved == [], f"audit writes whose kind cannot be read: {unresolved}"
    written = {kind for _, kind in found}
    assert written - set(EVENT_KINDS) == set(), "written but missing from audit.kinds.EVENT_KINDS"
    assert set(EVENT_KINDS) - written == set(), "listed in audit.kinds but written nowhere"


def test_each_kind_names_the_modules_that_write_it():
    """``written_by`` names every module that writes the kind (a package covers its modules), and no other."""
    found, _ = _scan()

    def covers(writer: str, module: str) -> bool:
        return module == writer or module.startswith(writer + ".")

    for module, kind in sorted(found):
        assert any(covers(w, module) for w in EVENT_KINDS[kind].written_by), (module, kind)
    for kind in EVENT_KINDS.values():
        for writer in kind.written_by:
            assert any(covers(writer, module) for module, name in found if name == kind.name), (
                writer,
                kind.name,
            )


def test_the_kinds_other_readers_name_are_listed_and_fit_the_api_filter():
    """Every registered notification channel's kinds and the spans' kinds are real kinds, and
    every kind passes the API's ``kind`` filter."""
    for channel in channels():
        assert set(channel.kinds) <= set(EVENT_KINDS), channel.name
    assert set(DECISION_KINDS) <= set(EVENT_KINDS)
    assert all(re.fullmatch(KIND, name) for name in EVENT_KINDS)
    assert all(kind.meaning.endswith(".") and kind.written_by for kind in EVENT_KINDS.values())


def test_the_scan_sees_a_new_kind():
    """The scanner itself: a literal, a module constant and an engine ``_audit`` are each found."""
    source = (
        'NEW = "thing.made"\n'
        "def f(log, state, kind):\n"
        '    log.append("t", actor="a", kind="thing.done", body={})\n'
        "    log.record('t', actor='a', kind=NEW, body={})\n"
        '    self._audit(state, "thing.planned", n=1)\n'
        "    log.append('t', actor='a', kind=kind, body={})\n"
        "    log.append('t', actor='a', kind=other.NAME, body={})\n"
    )
    tree = ast.parse(source)
    writes = _Writes("m", _constants(tree))
    writes.visit(tree)
    assert {k for _, k in writes.found} == {"thing.made", "thing.done", "thing.planned"}
    assert writes.unresolved == ["m:7"]


def test_every_body_field_the_source_names_is_listed_for_its_kind():
    """A body written in the source (a literal, a dict built under a name, the helpers' keywords)
    names only fields its kind lists in ``audit.kinds``; and each write names at least one."""
    _, _, writes = _scan_fields()
    assert len(writes) > 20
    strays = [
        f"{module}:{line} {kind}: {sorted(fields - set(EVENT_KINDS[kind].fields))}"
        for module, line, kind, fields in writes
        if kind in EVENT_KINDS and fields - set(EVENT_KINDS[kind].fields)
    ]
    assert strays == [], "body fields missing from their kind's fields in audit/kinds.py"


def test_the_scan_reads_body_fields():
    """The scanner itself: fields of a literal body, of a dict built under a name (and added
    to by key), of an engine helper's keywords and of a ``**`` of a local dict."""
    source = (
        "def f(log, state):\n"
        '    log.append("t", actor="a", kind="k.one", body={"a": 1, **other})\n'
        '    body = {"b": 1}\n'
        '    body["c"] = 2\n'
        '    log.record("t", actor="a", kind="k.two", body=body)\n'
        '    self._audit(state, "k.three", actor="x", d=1, **spread)\n'
        '    extra: dict = {"e": 1}\n'
        '    self.record.audit(state, "k.four", **extra)\n'
    )
    tree = ast.parse(source)
    writes = _Writes("m", _constants(tree))
    writes.visit(tree)
    assert {(kind, fields) for _, _, kind, fields in writes.fields} == {
        ("k.one", frozenset({"a"})),
        ("k.two", frozenset({"b", "c"})),
        ("k.three", frozenset({"d"})),
        ("k.four", frozenset({"e"})),
    }
