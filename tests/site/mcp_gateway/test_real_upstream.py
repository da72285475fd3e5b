"""A real MCP server from PyPI behind the gateway: the reference git server (``mcp-server-git``).

Registered as a stdio upstream (``python -m mcp_server_git -r REPO``) of a live site
(``bench/_mcp.py``: Daphne and a worker, on the database of this pass of the suite), its
tools offered as ``git__*`` with its own schemas. Its ``git_commit`` is a WRITE:
forwarded once by the worker, and the same call re-issued from a new session (a new
request id) returns the first commit's answer as a replay: the repository has one new
commit, not an error for a second commit with nothing staged.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys

import mcp_server_git  # noqa: F401  (the dev extra installs it: missing, the module fails, never skips)
import pytest

from bench._mcp import Site, Upstream, client
from tests.site.mcp_gateway._live import database, this_pass

pytestmark = pytest.mark.slow

POLICY = """
[tools.git_status]
side_effect = "read"
[tools.git_log]
side_effect = "read"
[tools.git_add]
side_effect = "write"
[tools.git_commit]
side_effect = "write"
"""


def _git(repo, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True)
    return done.stdout


@pytest.fixture(scope="module")
def repo_site(tmp_path_factory):
    root = tmp_path_factory.mktemp("git-upstream")
    repo = root / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "agent@example.com")
    _git(repo, "config", "user.name", "Agent")
    (repo / "README").write_text("start\n")
    _git(repo, "add", "README")
    _git(repo, "commit", "-q", "-m", "start")
    upstream = Upstream(root)
    upstream.start()
    command = f"{sys.executable} -m mcp_server_git -r {repo}"
    site = None
    try:
        with database(this_pass()) as db:
            site = Site(
                root,
                upstream,
                database_url=db.get("DATABASE_URL", ""),
                wait_seconds=60,
                more_upstreams={"git": (command, POLICY)},
            )
            site.start()
            yield repo, site
            site.stop()
    finally:
        if site is not None:
            site.stop()
        upstream.child.stop()


def _text(result) -> str:
    return " ".join(getattr(c, "text", "") for c in result.content)


def test_a_commit_through_the_gateway_runs_once_and_its_reissue_is_a_replay(repo_site):
    repo, site = repo_site
    (repo / "notes.txt").write_text("written by the agent\n")

    async def session_calls():
        async with client(site.url, site.key) as session:
            tools = {t.name: t for t in (await session.list_tools()).tools}
            added = await session.call_tool("git__git_add", {"repo_path": str(repo), "files": ["notes.txt"]})
            first = await session.call_tool(
                "git__git_commit", {"repo_path": str(repo), "message": "from the gateway"}
            )
        async with client(site.url, site.key) as session:  # the re-issue: a new session, a new id
            again = await session.call_tool(
                "git__git_commit", {"message": "from the gateway", "repo_path": str(repo)}
            )
            log = await session.call_tool("git__git_log", {"repo_path": str(repo)})
        return tools, added, first, again, log

    tools, added, first, again, log = asyncio.run(session_calls())
    assert {"repo_path", "message"} <= set(tools["git__git_commit"].input_schema["properties"])
    assert not added.is_error, _text(added)
    assert not first.is_error, _text(first)
    assert (first.meta or {})["io.keelgate/status"] == "done"
    assert (first.meta or {})["io.keelgate/replayed"] is False
    assert (again.meta or {})["io.keelgate/replayed"] is True
    assert _text(again) == _text(first)  # the first commit's answer, not "nothing staged"
    assert _git(repo, "rev-list", "--count", "HEAD").strip() == "2"
    assert _git(repo, "log", "-1", "--format=%s").strip() == "from the gateway"
    assert "from the gateway" in _text(log)
