"""The engine's core imports no contrib module: the extras depend on the core, never back.

The core is every module of ``keelgate`` outside ``keelgate.contrib`` and
``keelgate.testing`` (which ships doubles and may use what it likes). It reaches an
extra only through the entry points of ``keelgate._extras``. Checked three ways: the
source (an import statement anywhere, even inside a function, or a contrib module's
name as data, the way ``importlib.import_module`` would take it), the import-linter
contract of ``make lint`` (which must cover every core module), and a fresh interpreter
that imports the whole core.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "keelgate"
OUTSIDE_THE_CORE = ("contrib", "testing")
CONTRIB = "keelgate.contrib"
GROUP = "keelgate.extras"
"""The entry-point group ``keelgate._extras`` reads (a private module: not imported here)."""


def core_files() -> list[Path]:
    """Every source file of the core."""
    return sorted(p for p in ENGINE.rglob("*.py") if p.relative_to(ENGINE).parts[0] not in OUTSIDE_THE_CORE)


def _module_of(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_contrib(name: str) -> bool:
    return name == CONTRIB or name.startswith(CONTRIB + ".")


def contrib_imports(source: str, module: str, *, package: bool = False) -> list[str]:
    """Each way ``source`` (the module ``module``) imports or names a contrib module."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"line {node.lineno}: import {a.name}" for a in node.names if _is_contrib(a.name)]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolved against this module's package
                anchor = module.split(".")[: len(module.split(".")) - node.level + (1 if package else 0)]
                base = ".".join([*anchor, *([base] if base else [])])
            names = [base] + [f"{base}.{a.name}" for a in node.names]
            if any(_is_contrib(n) for n in names):
                found.append(f"line {node.lineno}: from {'.' * node.level}{node.module or ''} import ...")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            found += (
                [f"line {node.lineno}: the name {node.value!r}"] if _is_contrib(node.value.strip()) else []
            )
    return found


def test_no_core_module_imports_or_names_a_contrib_module():
    """No source file of the core imports keelgate.contrib, statically or by name."""
    offenders = {}
    for path in core_files():
        module = _module_of(path)
        found = contrib_imports(path.read_text(encoding="utf-8"), module, package=path.name == "__init__.py")
        if found:
            offenders[path.relative_to(ROOT).as_posix()] = found
    assert offenders == {}


def test_the_check_sees_each_shape_of_a_contrib_import():
    """An import, a from-import, a relative one, one inside a function and a name given to importlib."""
    shapes = {
        "import": "import keelgate.contrib.openai",
        "from": "from keelgate.contrib.openai import OpenAIPlanner",
        "from_package": "from keelgate import contrib",
        "relative": "from ..contrib import openai",
        "local": "def f():\n    from keelgate.contrib.langgraph import LangGraphCheckpointStore",
        "by_name": "import importlib\nimportlib.import_module('keelgate.contrib.langgraph')",
        "by_constant": "_MODULE = 'keelgate.contrib.openai'",
    }
    missed = [name for name, code in shapes.items() if not contrib_imports(code, "keelgate.loop._llm")]
    assert missed == []
    assert (
        contrib_imports('"""Uses keelgate.contrib.openai."""\nimport keelgate.errors', "keelgate.loop") == []
    )


def test_the_lint_contract_forbids_contrib_to_every_core_module():
    """make lint's forbidden contract names every top-level core module as a source."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    (contract,) = [
        c for c in config["tool"]["importlinter"]["contracts"] if c.get("forbidden_modules") == [CONTRIB]
    ]
    top_level = {
        f"keelgate.{p.stem if p.is_file() else p.name}"
        for p in ENGINE.iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()
    }
    assert set(contract["source_modules"]) == top_level - {f"keelgate.{n}" for n in OUTSIDE_THE_CORE}


def test_importing_the_whole_core_imports_no_contrib_module():
    """A fresh interpreter imports every core module; no keelgate.contrib module is loaded."""
    modules = sorted(_module_of(p) for p in core_files())
    code = textwrap.dedent(
        f"""
        import importlib, sys
        for name in {modules!r}:
            importlib.import_module(name)
        print(sorted(m for m in sys.modules if m == {CONTRIB!r} or m.startswith({CONTRIB + "."!r})))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]"


def test_the_installed_package_declares_the_extras_of_pyproject():
    """The entry points the core finds extras by are installed as pyproject.toml declares them.

    Failing alone after pyproject.toml changed: the installed metadata is older than the
    file. Reinstall the package (``make`` does it whenever pyproject.toml is newer).
    """
    from importlib.metadata import entry_points

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    declared = config["project"]["entry-points"][GROUP]
    installed = {e.name: e.value for e in entry_points(group=GROUP)}
    assert installed == declared, "reinstall keelgate: its metadata predates pyproject.toml"
