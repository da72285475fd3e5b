"""One writer of ``Run.status``: a scan of the site's code finds no other (ARCHITECTURE.md).

The scan reads every module of the site's apps (migrations aside) and reports each
function that writes a run's status: an assignment to ``<run>.status`` (or ``setattr``),
an ORM write on a ``Run`` queryset or instance that sets ``status`` (``update``,
``update_or_create``, ``get_or_create``/``create`` with it, ``bulk_update`` or
``save(update_fields=...)`` naming it, ``**`` of a mapping in a function that names it),
a helper handed the ``Run`` model to build an UPDATE in such a function, or SQL text
that UPDATEs the runs table there. What is a run is followed through each function:
``Run`` (or an alias it is imported as), names bound from it (``qs = Run.objects...``,
``run = unique_or_none(qs)``, ``for run in qs``), parameters annotated with it.

The allowed writers are listed with their reason. A second writer fails
:func:`test_nothing_but_the_writer_writes_a_run_status`; the other tests keep the scan
honest: it must see the writers that exist, and each shape of a second writer.
"""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SITE_APPS = ("sitekit", "tenants", "audit", "runs", "approvals", "notifications", "keelgate_site")

WRITERS = {
    ("runs/services.py", "run_move"): "the one writer: a conditional UPDATE with its run.status event",
    ("runs/services.py", "run_claim"): "the worker's claim, which also picks the run (documented)",
    ("runs/services.py", "_claim"): "run_claim's pick and move, on the ORM",
    ("runs/postgresql.py", "_claim_sql"): "run_claim's pick and move, one statement on PostgreSQL",
    ("runs/services.py", "run_start"): "inserts a new run, QUEUED: a birth, not a move",
    ("runs/services.py", "run_record_tick"): "inserts a monitor tick's row with no status, then run_move",
}
"""(module, function) -> why it may write ``Run.status``. Adding a line is a decision."""

MANAGERS = {"objects", "_default_manager", "_base_manager"}
ORM_WRITES = {"update", "update_or_create", "get_or_create", "create", "bulk_create", "bulk_update", "save"}
SQL_UPDATE = re.compile(r"(?<!\bFOR )(?<!\bDO )\bUPDATE\s+\S+(\s+AS\s+\S+)?\s+SET\b", re.IGNORECASE)


@dataclass(frozen=True)
class Write:
    """One place that writes a run's status."""

    module: str
    function: str
    line: int
    how: str


def _run_aliases(tree: ast.Module) -> set[str]:
    """The names the ``Run`` model goes by in a module (``Run`` and any ``as`` alias)."""
    names = {"Run"}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.endswith("models"):
            names |= {a.asname for a in node.names if a.name == "Run" and a.asname}
    return names


class _Function:
    """The writes of a run's status in one function (its nested functions included)."""

    def __init__(self, node: ast.AST, models: set[str], source: str) -> None:
        self.node = node
        self.models = models
        segment = ast.get_source_segment(source, node) or ""
        self.names_status = bool(re.search(r"""["']status["']|\bstatus\b\s*=""", segment))
        self.runs = self._bind_runs()

    def _bind_runs(self) -> set[str]:
        """Names that hold a run, a queryset of runs or the model, to a fixed point."""
        runs = set(self.models)
        args = self.node.args if isinstance(self.node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
        for arg in [*(args.args if args else ()), *(args.kwonlyargs if args else ())]:
            if arg.annotation is not None and re.search(r"\bRun\b", ast.unparse(arg.annotation)):
                runs.add(arg.arg)
        while True:
            before = len(runs)
            for node in ast.walk(self.node):
                if isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    if self._is_run(node.value, runs):
                        runs |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
                elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
                    if self._is_run(node.iter, runs):
                        runs |= {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}
                elif isinstance(node, ast.withitem) and self._is_run(node.context_expr, runs):
                    bound = node.optional_vars
                    runs |= {n.id for n in ast.walk(bound) if isinstance(n, ast.Name)} if bound else set()
            if len(runs) == before:
                return runs

    def _is_run(self, expr: ast.AST, runs: set[str]) -> bool:
        """Does ``expr`` evaluate to a run, runs or the model (not a field read of one)?"""
        if isinstance(expr, ast.Name):
            return expr.id in runs
        if isinstance(expr, ast.Attribute):  # Run.objects is runs; run.run_id is a string
            return expr.attr in MANAGERS and self._is_run(expr.value, runs)
        if isinstance(expr, ast.Call):
            if isinstance(expr.func, ast.Attribute) and self._is_run(expr.func.value, runs):
                return True  # a queryset's method, or the model's
            if self._is_run(expr.func, runs):  # Run(...)
                return True
            return any(self._is_run(a, runs) for a in expr.args)  # unique_or_none(qs), list(qs)
        if isinstance(expr, (ast.Subscript, ast.Await, ast.Starred)):
            return self._is_run(expr.value, runs)
        if isinstance(expr, (ast.Tuple, ast.List)):
            return any(self._is_run(e, runs) for e in expr.elts)
        if isinstance(expr, ast.BoolOp):
            return any(self._is_run(v, runs) for v in expr.values)
        if isinstance(expr, ast.IfExp):
            return self._is_run(expr.body, runs) or self._is_run(expr.orelse, runs)
        return False

    def writes(self) -> list[tuple[int, str]]:
        """(line, how) for every write of a run's status in this function."""
        found = []
        for node in ast.walk(self.node):
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    for t in ast.walk(target):
                        if _is_status(t) and self._is_run(t.value, self.runs):
                            found.append((node.lineno, f"assigns {ast.unparse(t)}"))
            elif isinstance(node, ast.Call):
                found += [(node.lineno, how) for how in self._call_writes(node)]
            elif isinstance(node, (ast.Constant, ast.JoinedStr)):
                text = node.value if isinstance(node, ast.Constant) else ast.unparse(node)
                if isinstance(text, str) and SQL_UPDATE.search(text) and self._sql_on_runs(text):
                    found.append((node.lineno, "SQL UPDATE of the runs table naming status"))
        return found

    def _call_writes(self, call: ast.Call) -> list[str]:
        func = call.func
        if isinstance(func, ast.Name) and func.id == "setattr" and len(call.args) >= 2:
            target, name = call.args[0], call.args[1]
            if self._is_run(target, self.runs) and isinstance(name, ast.Constant) and name.value == "status":
                return ["setattr status"]
        if isinstance(func, ast.Name):  # a helper handed the model, such as update_sql(Run, ...)
            handed = any(self._is_run(a, self.runs) for a in call.args)
            if "update" in func.id.lower() and handed and self.names_status:
                return [f"{func.id}(Run, ...) in a function naming status"]
            return []
        if not isinstance(func, ast.Attribute):
            return []
        if func.attr not in ORM_WRITES or not self._is_run(func.value, self.runs):
            return []
        named = _names_status(call)
        if named:
            return [f".{func.attr}() {named}"]
        if any(k.arg is None for k in call.keywords) and self.names_status:
            return [f".{func.attr}(**...) in a function naming status"]
        return []

    def _sql_on_runs(self, text: str) -> bool:
        on_runs = "runs_run" in text or any(
            isinstance(n, ast.Name) and n.id in self.models for n in ast.walk(self.node)
        )
        return on_runs and self.names_status


def _names_status(call: ast.Call) -> str:
    """How an ORM call names ``status`` among what it writes, or ""."""
    for keyword in call.keywords:
        if keyword.arg == "status":
            return "sets status="
        listed = keyword.arg in ("update_fields", "defaults", "create_defaults", None)
        if listed and _mentions_status(keyword.value):
            return f"names status in {keyword.arg or '**'}"
    bulk = isinstance(call.func, ast.Attribute) and call.func.attr == "bulk_update"
    if bulk and any(_mentions_status(a) for a in call.args[1:]):
        return "names status in its fields"
    return ""


def _is_status(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "status"


def _mentions_status(expr: ast.AST) -> bool:
    return any(isinstance(n, ast.Constant) and n.value == "status" for n in ast.walk(expr))


def status_writes(source: str, module: str) -> list[Write]:
    """Every write of a run's status in one module's ``source``, by its outermost function."""
    tree = ast.parse(source)
    models = _run_aliases(tree)
    found: list[Write] = []
    scopes: list[tuple[str, ast.AST]] = [
        (n.name, n) for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
    ]
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        scopes += [
            (f"{cls.name}.{n.name}", n)
            for n in cls.body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        ]
    in_scope = {id(n) for _, node in scopes for n in ast.walk(node)}
    module_level = ast.Module(body=[n for n in tree.body if id(n) not in in_scope], type_ignores=[])
    scopes.append(("<module>", module_level))
    for name, node in scopes:
        for line, how in _Function(node, models, source).writes():
            found.append(Write(module, name, line, how))
    return found


def site_status_writes() -> list[Write]:
    """Every write of a run's status in the site's apps, migrations aside."""
    found = []
    for app in SITE_APPS:
        for path in sorted((ROOT / app).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            module = path.relative_to(ROOT).as_posix()
            found += status_writes(path.read_text(encoding="utf-8"), module)
    return found


def test_nothing_but_the_writer_writes_a_run_status():
    """No function outside the allowed writers of runs/services.py writes ``Run.status``."""
    second = [w for w in site_status_writes() if (w.module, w.function) not in WRITERS]
    assert second == [], "a second writer of Run.status; move the run with runs.services.run_move"


def test_the_scan_sees_the_writers_that_exist():
    """The scan is not blind: it finds the writes of run_move and run_start, and only listed ones."""
    seen = {(w.module, w.function) for w in site_status_writes()}
    assert {("runs/services.py", "run_move"), ("runs/services.py", "run_start")} <= seen
    assert seen <= set(WRITERS)


SECOND_WRITERS = {
    "assignment": """
        def f(tenant_id):
            run = unique_or_none(Run.objects.select_for_update().filter(tenant_id=tenant_id))
            run.status = RunStatus.QUEUED
            run.save()
    """,
    "save_update_fields": """
        def f(run: Run):
            run.save(update_fields=["status", "updated_at"])
    """,
    "queryset_update": """
        def f(pk):
            Run.objects.filter(pk=pk).update(status="done")
    """,
    "queryset_in_a_name": """
        def f(pk):
            qs = Run.objects.filter(pk=pk)
            rows = qs.exclude(status="done")
            rows.update(status="done", updated_at=None)
    """,
    "update_with_a_mapping": """
        def f(pk, to):
            values = {"status": to}
            Run.objects.filter(pk=pk).update(**values)
    """,
    "loop_variable": """
        def f():
            for run in Run.objects.all():
                run.status = "stopped"
    """,
    "setattr": """
        def f(pk):
            run = Run.objects.get(pk=pk)
            setattr(run, "status", "done")
    """,
    "bulk_update": """
        def f(runs):
            Run.objects.bulk_update(runs, ["status"])
    """,
    "aliased_model": """
        from runs.models import Run as R
        def f(pk):
            R._default_manager.filter(pk=pk).update(status="done")
    """,
    "method": """
        class Fixer:
            def fix(self, pk):
                Run.objects.filter(pk=pk).update_or_create(pk=pk, defaults={"status": "done"})
    """,
    "raw_sql": """
        def f(cursor, pk):
            cursor.execute('UPDATE "runs_run" SET "status" = %s WHERE "id" = %s', ["done", pk])
    """,
    "raw_sql_built_from_the_model": """
        def f(cursor, pk):
            table = Run._meta.db_table
            cursor.execute(f'UPDATE {table} SET "status" = %s WHERE "id" = %s', ["done", pk])
    """,
    "sql_helper": """
        def f(pk, to):
            sql = update_sql(Run, ("status",), ("id",))
    """,
}

NOT_WRITERS = {
    "another_models_status": """
        def f(run):
            approval = Approval.objects.filter(run_id=run.run_id).first()
            approval.status = "denied"
            Approval.objects.filter(run_id=run.run_id).update(status="denied")
    """,
    "reading_a_status": """
        def f(pk):
            run = Run.objects.get(pk=pk)
            if run.status == "done":
                Run.objects.filter(pk=pk).update(cancel_requested_by="me")
    """,
    "locking_select": """
        def f(cursor):
            cursor.execute('SELECT "status" FROM "runs_run" WHERE "id" = %s FOR UPDATE', [1])
    """,
}


def test_the_scan_finds_every_shape_of_a_second_writer():
    """Each way of writing a run's status, in a module of its own, is reported."""
    missed = [name for name, code in SECOND_WRITERS.items() if not status_writes(textwrap.dedent(code), name)]
    assert missed == []


def test_the_scan_leaves_other_models_and_reads_alone():
    """Another model's status, a read of a run's, and a locking SELECT are not writes."""
    reported = {name: status_writes(textwrap.dedent(code), name) for name, code in NOT_WRITERS.items()}
    assert reported == {name: [] for name in NOT_WRITERS}
