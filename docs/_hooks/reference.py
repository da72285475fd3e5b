"""MkDocs hook: the reference pages that are read off the code at build time, so they cannot drift.

- ``reference/settings.md``: every environment variable the product reads (found in the
  source, with its default as written there), described by the setting's docstring in
  ``keelgate_site/settings.py`` or else by its row in ``docs/deploy.md``;
- ``reference/commands.md``: every management command of the site's apps, from Django's
  own parser of each command (its ``help`` and arguments);
- ``reference/errors.md``: every error class of the engine (``keelgate.errors``) and the
  site (``sitekit.errors``): code, HTTP status, wording;
- ``reference/audit-events.md``: every audit event kind the product writes, from the one
  list of them, ``audit.kinds.EVENT_KINDS`` (its test scans the source), with what each
  records, the modules that write it and a table of its body's fields;
- ``changelog.md``: the repository's ``CHANGELOG.md``.

Anything found in the code without a description (or described but no longer found) is
logged as a warning, which ``mkdocs build --strict`` (``make docs``) turns into a failure.
"""

from __future__ import annotations

import argparse
import ast
import logging
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

log = logging.getLogger("mkdocs.plugins.keelgate_reference")

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ["keelgate", "sitekit", "tenants", "audit", "runs", "approvals", "notifications", "keelgate_site"]
SETTINGS = ROOT / "keelgate_site" / "settings.py"
DEPLOY = ROOT / "docs" / "deploy.md"


def _sources() -> list[Path]:
    """The product's Python files (no migrations, no test doubles' contract suites)."""
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" not in path.parts and "testing" not in path.relative_to(ROOT).parts[:2]:
                found.append(path)
    return found


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


# -- settings ---------------------------------------------------------------------------

ENV_READERS = {"_env_bool"}
"""Helpers of settings.py that read one variable: ``_env_bool(NAME, default)``."""

ELSEWHERE = {
    "KEELGATE_DEBUG": "the mode: `1` development (DEBUG on, loopback only), `0` production (keys required,"
    " HTTPS hardening), unset the local default ([Deployment](../deploy.md#settings))",
    "OPENAI_API_KEY": "the OpenAI client's key (`keelgate.contrib.openai`, extra `openai`), when none is"
    " passed",
    "OPENAI_BASE_URL": "an OpenAI-compatible endpoint for the same client",
    "PROMETHEUS_MULTIPROC_DIR": "set by the settings to `KEELGATE_METRICS_DIR`; prometheus-client's"
    " multiprocess directory",
}
"""Descriptions of variables that have neither a docstring nor a row in docs/deploy.md."""


def _env_reads(node: ast.AST) -> list[tuple[str, ast.expr | None]]:
    """Every ``os.environ.get(NAME[, default])``, ``os.getenv``, ``os.environ[NAME]``, ``_env_bool``."""
    reads: list[tuple[str, ast.expr | None]] = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and sub.args and isinstance(sub.args[0], ast.Constant):
            func = sub.func
            name = sub.args[0].value
            if not isinstance(name, str) or not re.fullmatch(r"[A-Z][A-Z0-9_]+", name):
                continue
            default = sub.args[1] if len(sub.args) > 1 else None
            if isinstance(func, ast.Attribute) and func.attr in {"get", "getenv", "setdefault"}:
                owner = ast.unparse(func.value)
                if owner in {"os.environ", "os"} and func.attr != "setdefault":
                    reads.append((name, default))
            elif isinstance(func, ast.Name) and func.id in ENV_READERS:
                reads.append((name, default))
        elif (
            isinstance(sub, ast.Subscript)
            and ast.unparse(sub.value) == "os.environ"
            and isinstance(sub.slice, ast.Constant)
            and isinstance(sub.ctx, ast.Load)
        ):
            reads.append((str(sub.slice.value), None))
    return reads


def _deploy_rows() -> dict[str, tuple[str, str]]:
    """``docs/deploy.md``'s settings table: variable -> (default, what)."""
    rows: dict[str, tuple[str, str]] = {}
    for line in DEPLOY.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        for name in re.findall(r"`([A-Z][A-Z0-9_*]+)`", cells[0]):
            # deploy.md's links are relative to docs/; the generated pages live in docs/reference/.
            rows[name] = (cells[1], re.sub(r"\]\((?!https?:|#|\.\./)", "](../", cells[2]))
    return rows


def _described(name: str, rows: dict[str, tuple[str, str]]) -> str:
    if name in rows:
        return rows[name][1]
    for pattern, (_, what) in rows.items():
        if pattern.endswith("*") and name.startswith(pattern[:-1]):
            return what
    return ""


def _statement_docs(tree: ast.Module) -> list[tuple[ast.stmt, str]]:
    """Each statement of the settings module (nested in ``if`` blocks too) and its docstring."""
    out: list[tuple[ast.stmt, str]] = []

    def visit(body: list[ast.stmt]) -> None:
        for index, stmt in enumerate(body):
            nxt = body[index + 1] if index + 1 < len(body) else None
            doc = ""
            if (
                isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)
            ):
                doc = " ".join(nxt.value.value.split())
            out.append((stmt, doc))
            if isinstance(stmt, ast.If):
                visit(stmt.body)
                visit(stmt.orelse)

    visit(tree.body)
    return out


def _md(text: str) -> str:
    """Sphinx-style ``literal`` to Markdown, and no table-breaking pipes."""
    text = re.sub(r"``([^`]+)``", r"`\1`", text)
    text = re.sub(r":(?:class|func|meth|mod|attr):`~?([^`]+)`", r"`\1`", text)
    return text.replace("|", "\\|")


def settings_page() -> str:
    rows = _deploy_rows()
    tree = ast.parse(SETTINGS.read_text())
    docs_by_name = {
        target.id: doc
        for stmt, doc in _statement_docs(tree)
        if isinstance(stmt, ast.Assign | ast.AnnAssign) and doc
        for target in (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target])
        if isinstance(target, ast.Name)
    }
    seen: dict[str, tuple[str, str]] = {}
    for stmt, doc in _statement_docs(tree):
        if isinstance(stmt, ast.If):
            continue  # its body is visited statement by statement
        # ``os.environ.get(NAME) or <default>``: the default is what follows the ``or``.
        fallbacks = {
            name: node.values[1]
            for node in ast.walk(stmt)
            if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or)
            for name, _ in _env_reads(node.values[0])
        }
        for name, default in _env_reads(stmt):
            default = default if default is not None else fallbacks.get(name)
            if name in seen:
                continue
            what = docs_by_name.get(name) or doc or _described(name, rows) or ELSEWHERE.get(name, "")
            if not what:
                log.warning("setting %s (settings.py) has no docstring and no row in docs/deploy.md", name)
            shown = "(unset)" if default is None else f"`{ast.unparse(default)}`"
            seen[name] = (shown, what)

    elsewhere: dict[str, tuple[str, str]] = {}
    for path in _sources():
        if path == SETTINGS:
            continue
        for name, _default in _env_reads(ast.parse(path.read_text())):
            if name in seen or name in elsewhere:
                continue
            what = _described(name, rows) or ELSEWHERE.get(name, "")
            if not what:
                log.warning("environment variable %s (%s) is described nowhere", name, _rel(path))
            elsewhere[name] = (_rel(path), what)

    django_only = []
    for stmt, doc in _statement_docs(tree):
        if isinstance(stmt, ast.Assign | ast.AnnAssign) and not _env_reads(stmt):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for target in targets:
                if isinstance(target, ast.Name) and target.id.startswith("KEELGATE_") and doc:
                    if target.id in seen:
                        continue
                    django_only.append((target.id, doc))

    lines = [
        "# Settings",
        "",
        "Generated at build time from `keelgate_site/settings.py` and the product's source (every",
        "`os.environ` read); a variable without a description fails `make docs`. The default is the",
        "expression the code falls back to. [Deployment](../deploy.md#settings) says which to set in",
        "production.",
        "",
        "## Environment variables of the settings module",
        "",
        "| variable | default in the code | what |",
        "| --- | --- | --- |",
    ]
    for name, (default, what) in seen.items():
        lines.append(f"| `{name}` | {_md(default)} | {_md(what)} |")
    lines += ["", "## Read elsewhere", "", "| variable | read in | what |", "| --- | --- | --- |"]
    for name, (where, what) in sorted(elsewhere.items()):
        lines.append(f"| `{name}` | `{where}` | {_md(what)} |")
    lines += [
        "",
        "## Django settings without a variable",
        "",
        "Set in a settings module of your own that imports `keelgate_site.settings`.",
        "",
        "| setting | what |",
        "| --- | --- |",
    ]
    for name, doc in django_only:
        lines.append(f"| `{name}` | {_md(doc)} |")
    return "\n".join(lines) + "\n"


# -- management commands ----------------------------------------------------------------

DJANGO_OPTIONS = {
    "help",
    "version",
    "verbosity",
    "settings",
    "pythonpath",
    "traceback",
    "no_color",
    "force_color",
    "skip_checks",
}


def _django() -> None:
    """Set Django up as development does, with its scratch files out of the tree."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "keelgate_site.settings")
    os.environ.setdefault("KEELGATE_DEBUG", "1")
    os.environ.setdefault("KEELGATE_VAR_DIR", tempfile.mkdtemp(prefix="keelgate-docs-"))
    import django

    django.setup()


def commands_page() -> str:
    _django()
    from django.core.management import get_commands, load_command_class

    lines = [
        "# Management commands",
        "",
        "Generated at build time from each command's own parser (`python manage.py <command> --help`",
        "prints the same). Django's common options (`--verbosity`, `--settings`, ...) are left out.",
        "",
    ]
    ours = {name: app for name, app in get_commands().items() if app.split(".")[0] in PACKAGES}
    for name in sorted(ours):
        command = load_command_class(ours[name], name)
        parser = command.create_parser("manage.py", name)
        if not command.help:
            log.warning("manage.py %s has no help", name)
        lines += [f"## `{name}`", "", _md(" ".join(str(command.help).split())), ""]
        usage = " ".join(parser.format_usage().split())
        usage = re.sub(r"\[--version\].*?\[--skip-checks\]\s*", "", usage)
        lines += ["```", usage.replace("usage: ", ""), "```", ""]
        options = [
            a
            for a in parser._actions
            if a.dest not in DJANGO_OPTIONS and not isinstance(a, argparse._HelpAction)
        ]
        if options:
            lines += ["| argument | what | default |", "| --- | --- | --- |"]
            for action in options:
                flags = ", ".join(action.option_strings) or action.metavar or action.dest
                what = action.help or ""
                if not what:
                    log.warning("argument %s of manage.py %s has no help", action.dest, name)
                if action.choices:
                    what = f"{what} (one of: {', '.join(map(str, action.choices))})".strip()
                if action.required and action.option_strings:
                    what = f"required; {what}".rstrip("; ")
                empty = action.default in (None, False, [], "", argparse.SUPPRESS)
                default = "" if empty else f"`{action.default}`"
                lines.append(f"| `{flags}` | {_md(what)} | {default} |")
            lines.append("")
        lines += [f"Source: `{ours[name].replace('.', '/')}/management/commands/{name}.py`", ""]
    return "\n".join(lines)


# -- error codes ------------------------------------------------------------------------


def errors_page() -> str:
    _django()
    import keelgate.errors as engine
    import sitekit.errors as site

    def tree(cls: type, depth: int) -> list[type]:
        found = [cls]
        for sub in sorted(cls.__subclasses__(), key=lambda c: c.__name__):
            found += tree(sub, depth + 1)
        return found

    lines = [
        "# Error codes",
        "",
        "Generated at build time from the error classes. Every error has a stable `code` that",
        "programs compare and fixed wording that people read; neither ever contains untrusted",
        "text. The REST API and the console answer each with its HTTP status (inherited along the",
        "tree) and a JSON body carrying the code. *—* means the error is never the caller's doing:",
        "the gateway's codes are the outcomes of one tool call, stored in the run's checkpoint, and",
        "any other reaching a request is a bug, answered 500. The trees are drawn in the",
        "docstrings of `keelgate/errors.py` and `sitekit/errors.py`.",
        "",
    ]
    for title, module in (("The engine (`keelgate.errors`)", engine), ("The site (`sitekit.errors`)", site)):
        lines += [f"## {title}", "", "| code | HTTP | wording | class: when |", "| --- " * 4 + "|"]
        for cls in tree(engine.KeelgateError, 0):
            if cls.__module__ != module.__name__:
                continue
            status = cls.http_status or "—"
            doc = " ".join((cls.__doc__ or "").strip().split("\n\n")[0].split())
            if not doc:
                log.warning("error class %s.%s has no docstring", cls.__module__, cls.__name__)
            lines.append(f"| `{cls.code}` | {status} | {_md(cls.message)} | `{cls.__name__}`: {_md(doc)} |")
        lines.append("")
    strays = [
        cls for cls in tree(engine.KeelgateError, 0) if cls.__module__ not in {engine.__name__, site.__name__}
    ]
    if strays:
        lines += ["## Elsewhere", "", "| code | HTTP | class | wording |", "| --- " * 4 + "|"]
        for cls in strays:
            lines.append(
                f"| `{cls.code}` | {cls.http_status or '—'} "
                f"| `{cls.__module__}.{cls.__name__}` | {_md(cls.message)} |"
            )
        lines.append("")
    lines += [
        "Not errors: `keelgate.errors.ControlSignal` and its `CrashFailpoint` derive from",
        "`BaseException`, so that a tool's `except Exception` cannot swallow a simulated crash.",
        "",
    ]
    return "\n".join(lines)


# -- audit event kinds ------------------------------------------------------------------


def audit_page() -> str:
    """``audit.kinds.EVENT_KINDS`` as a table, then each kind's body fields: that list is pinned
    to the source by ``tests/site/audit/test_kinds.py`` (kinds, and the fields bodies name
    there) and ``test_kind_fields.py`` (the fields bodies are written with), so the page only
    checks that every row is complete."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from audit.kinds import EVENT_KINDS

    if not EVENT_KINDS:
        log.warning("audit.kinds.EVENT_KINDS is empty: the audit event kinds page would list nothing")
    lines = [
        "# Audit event kinds",
        "",
        "Generated at build time from `audit/kinds.py`, the one list of the kinds the product",
        "writes to a tenant's audit chain (a test reads the source and fails on a kind missing",
        "there), with the modules that write each and every field its body may hold (tests fail",
        "on a field written that the list lacks). Every event also carries its sequence number,",
        "time, actor and hash link. An event about a call names it by `arguments_hash`; its",
        "arguments, and the tool's impact line drawn from them, are written only for the tenants",
        "of `KEELGATE_AUDIT_ARGUMENTS` ([settings](settings.md)); a tool's output never is. A",
        "person's decision says how it came: `via`, `key_id`, `address`.",
        "[Concepts](../concepts.md#the-audit-log) explains the log.",
        "",
        "| kind | what happened | written by |",
        "| --- | --- | --- |",
    ]
    sections: list[str] = []
    for kind in EVENT_KINDS.values():
        meaning = " ".join(kind.meaning.split())
        if not meaning:
            log.warning("audit kind %s has no meaning in audit/kinds.py", kind.name)
        if not kind.written_by:
            log.warning("audit kind %s names no module that writes it in audit/kinds.py", kind.name)
        if not kind.fields:
            log.warning("audit kind %s lists no body fields in audit/kinds.py", kind.name)
        anchor = kind.name.replace(".", "-").replace("_", "-")
        writers = ", ".join(f"`{w}`" for w in kind.written_by)
        lines.append(f"| [`{kind.name}`](#{anchor}) | {_md(meaning)} | {writers} |")
        sections += [f"### `{kind.name}` {{ #{anchor} }}", "", _md(meaning), "", "| field | what |"]
        sections.append("| --- | --- |")
        for name, what in kind.fields.items():
            if not what.strip():
                log.warning("field %s of audit kind %s says nothing in audit/kinds.py", name, kind.name)
            sections.append(f"| `{name}` | {_md(' '.join(what.split()))} |")
        sections.append("")
    lines += ["", "## The fields of each kind", "", *sections]
    return "\n".join(lines) + "\n"


# -- the hook ---------------------------------------------------------------------------

PAGES = {
    "reference/settings.md": settings_page,
    "reference/commands.md": commands_page,
    "reference/errors.md": errors_page,
    "reference/audit-events.md": audit_page,
}


def on_files(files: Files, config: Any) -> Files:
    """Add the generated pages (and the changelog) to the site."""
    for uri, build in PAGES.items():
        page = build()
        if uri != "reference/commands.md":  # wide tables: the page's own table of contents goes
            page = "---\nhide:\n  - toc\n---\n\n" + page
        files.append(File.generated(config, uri, content=page))
    changelog = (ROOT / "CHANGELOG.md").read_text().replace("](docs/", "](")  # links from the root
    files.append(File.generated(config, "changelog.md", content=changelog))
    return files


ROLE = re.compile(r":(?:class|func|meth|data|attr|mod|exc|obj):(<code>)~?")


def on_post_page(output: str, page: Any, config: Any) -> str:
    """The docstrings' Sphinx roles (``:class:`X```) read as plain code in the API reference."""
    return ROLE.sub(r"\1", output) if page.file.src_uri.startswith("reference/") else output


def _requirement_names() -> set[str]:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        requirements += extra
    names = {re.split(r"[\[<>=!~; ]", r, maxsplit=1)[0].lower() for r in requirements}
    return {n for n in names if n != "keelgate"}


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    """``dependencies.md`` names every dependency of pyproject.toml, and nothing else; the
    code's links into ``performance.md`` name sections it has."""
    if page.file.src_uri == "performance.md":
        _check_performance_links(markdown)
    if page.file.src_uri == "dependencies.md":
        listed = set(re.findall(r"^\| `([a-z0-9-]+)` \|", markdown, re.MULTILINE))
        for name in sorted(_requirement_names() - listed):
            log.warning("dependency %s of pyproject.toml is not on dependencies.md", name)
        for name in sorted(listed - _requirement_names()):
            log.warning("dependencies.md lists %s, which pyproject.toml does not", name)
    return markdown


PERFORMANCE_LINK = re.compile(r"docs/performance\.md#([a-z0-9-]+)")


def _check_performance_links(markdown: str) -> None:
    """Every ``docs/performance.md#anchor`` in the product's comments names a section that exists."""
    from markdown.extensions.toc import slugify

    anchors = set(re.findall(r"\{ ?#([a-z0-9-]+) ?\}", markdown))
    for heading in re.findall(r"^#+ (.+?)(?: \{.*\})?$", markdown, re.MULTILINE):
        anchors.add(slugify(heading, "-"))
    for path in [*_sources(), ROOT / "bench" / "README.md", ROOT / "ARCHITECTURE.md"]:
        for anchor in PERFORMANCE_LINK.findall(path.read_text()):
            if anchor not in anchors:
                log.warning("%s links to docs/performance.md#%s, which does not exist", _rel(path), anchor)
