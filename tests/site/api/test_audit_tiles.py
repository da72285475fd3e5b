"""A tenant's log as C2SP tlog-tiles under ``/api/v1/audit/tlog/<tenant>/``: the checkpoint,
hash tiles that are the stored tree, entry bundles that are the leaves, bounded by the latest
checkpoint, refused (never a 500) for any other path, and read by Go's ``tlog.TileHashReader``
from a running Daphne.

The log here is ``SIZE`` (600) events of t1 signed at 600: full level 0 tiles 0 and 1, a
partial one of 88, a partial level 1 tile of 2 (the hashes of the two full tiles).
"""

from __future__ import annotations

import base64
import gzip
import subprocess
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from audit.checkpoints import log_verifier_key, sign_checkpoint
from audit.models import AuditEvent, TreeNode
from audit.retention import audit_retire
from audit.tree import event_leaf
from audit.wiring import audit_log, integrate_pending
from keelgate.audit import TreeBuilder, leaf_bytes
from tests.site._serve import daphne
from tests.site.api.conftest import BASE

ROOT = Path(__file__).resolve().parents[3]
PREFIX = "/audit/tlog/t1"
SIZE = 600


def append(tenant_id: str, count: int, start: int = 0, **body: Any) -> None:
    """``count`` events, numbered at once (on PostgreSQL a record only inserts; a reader numbers it)."""
    log = audit_log()
    for n in range(start, start + count):
        log.record(tenant_id, actor="op", kind="note", body={"n": n, **body})
    integrate_pending([tenant_id])


def stored_tree(tenant_id: str = "t1") -> dict[tuple[int, int], bytes]:
    """Every complete subtree's hash, recomputed from the events' leaf hashes."""
    builder = TreeBuilder()
    nodes: dict[tuple[int, int], bytes] = {}
    for leaf in (
        AuditEvent.objects.filter(tenant_id=tenant_id).order_by("seq").values_list("leaf_hash", flat=True)
    ):
        nodes.update({(level, index): h for level, index, h in builder.add(bytes.fromhex(leaf))})
    return nodes


def records(bundle: bytes) -> list[bytes]:
    """An entry bundle's records: big-endian uint16 lengths, each then its data."""
    out = []
    while bundle:
        n = int.from_bytes(bundle[:2], "big")
        assert len(bundle) >= 2 + n
        out.append(bundle[2 : 2 + n])
        bundle = bundle[2 + n :]
    return out


def leaves(first: int, count: int, tenant_id: str = "t1") -> list[bytes]:
    """The leaf data of events ``first + 1`` to ``first + count`` (leaves ``first`` on)."""
    rows = AuditEvent.objects.filter(tenant_id=tenant_id, seq__gt=first, seq__lte=first + count).order_by(
        "seq"
    )
    return [leaf_bytes(event_leaf(row)) for row in rows]


@pytest.fixture
def grown(keys) -> int:
    """t1's log of SIZE events, signed at SIZE (the keys are bare rows: the log starts empty)."""
    append("t1", SIZE)
    checkpoint = sign_checkpoint("t1")
    assert checkpoint is not None and checkpoint.size == SIZE
    return SIZE


def test_the_checkpoint_is_at_the_prefix_as_the_api_serves_it(client, grown):
    """`<prefix>/checkpoint` is the note `GET /audit/checkpoint` serves, text/plain, not cached for long."""
    note = client.get(f"{PREFIX}/checkpoint")
    assert note.status_code == 200
    assert note["Content-Type"] == "text/plain; charset=utf-8"
    assert note.content == client.get("/audit/checkpoint").content
    assert note.content.decode().split("\n")[1] == str(SIZE)
    assert "no-cache" in note["Cache-Control"] and "private" in note["Cache-Control"]


def test_hash_tiles_are_the_stored_subtrees(client, grown):
    """Level 0 tiles are the leaf hashes, level 1 the hashes of full level 0 tiles (tree level
    8), 32 bytes each; full tiles 8192 bytes; partial ones as wide as the checkpoint's tree."""
    nodes = stored_tree()
    expected = {
        "tile/0/000": [nodes[(0, i)] for i in range(256)],
        "tile/0/001": [nodes[(0, i)] for i in range(256, 512)],
        "tile/0/002.p/88": [nodes[(0, i)] for i in range(512, 600)],
        "tile/0/002.p/5": [nodes[(0, i)] for i in range(512, 517)],  # an earlier checkpoint's width
        "tile/0/000.p/7": [nodes[(0, i)] for i in range(7)],
        "tile/1/000.p/2": [nodes[(8, 0)], nodes[(8, 1)]],
        "tile/1/000.p/1": [nodes[(8, 0)]],
    }
    for path, hashes in expected.items():
        response = client.get(f"{PREFIX}/{path}")
        assert response.status_code == 200, (path, response.content)
        assert response["Content-Type"] == "application/octet-stream"
        assert response.content == b"".join(hashes), path
        cache = response["Cache-Control"]
        assert "immutable" in cache and "private" in cache and "max-age=31536000" in cache
    assert len(client.get(f"{PREFIX}/tile/0/000").content) == 8192


def test_entry_bundles_are_the_leaves_rfc8785_bytes(client, grown):
    """Each record of a bundle is the RFC 8785 bytes of its event's `leaf` as `GET /audit/events`
    returns it, behind its uint16 length; 256 to a full bundle, the rest in a partial one."""
    items = client.get("/audit/events", {"limit": 500}).json()["items"]
    items += client.get("/audit/events", {"limit": 500, "after_seq": 500}).json()["items"]
    api_leaves = [leaf_bytes(item["leaf"]) for item in items]
    assert len(api_leaves) == SIZE
    got: list[bytes] = []
    for path in ("tile/entries/000", "tile/entries/001", "tile/entries/002.p/88"):
        response = client.get(f"{PREFIX}/{path}")
        assert response.status_code == 200, (path, response.content)
        assert response["Content-Type"] == "application/octet-stream"
        assert "immutable" in response["Cache-Control"]
        got += records(response.content)
    assert got == api_leaves
    assert records(client.get(f"{PREFIX}/tile/entries/001.p/3").content) == api_leaves[256:259]


def test_a_bundle_is_gzipped_for_a_client_that_asks(client, grown):
    """`Accept-Encoding: gzip` gets the same bytes gzipped (the spec's SHOULD); `Vary` says so."""
    plain = client.get(f"{PREFIX}/tile/entries/000").content
    zipped = client.get(f"{PREFIX}/tile/entries/000", **{"Accept-Encoding": "gzip"})
    assert zipped["Content-Encoding"] == "gzip" and "Accept-Encoding" in zipped["Vary"]
    assert gzip.decompress(zipped.content) == plain and len(zipped.content) < len(plain)


def test_nothing_beyond_the_latest_checkpoint_is_served(client, grown):
    """Events sequenced after the latest checkpoint are in no tile or bundle until one covers
    them: 404, for partial tiles and full ones, at every level."""
    append("t1", 10, start=SIZE)
    for path in (
        "tile/0/002.p/98",
        "tile/0/002.p/89",
        "tile/0/002",
        "tile/0/003.p/1",
        "tile/1/000",
        "tile/1/000.p/3",
        "tile/2/000.p/1",
        "tile/63/000.p/1",
        "tile/entries/002.p/89",
        "tile/entries/002",
        "tile/entries/003.p/1",
        "tile/0/x999/x999/x999/x999/x999/x999/999",
    ):
        response = client.get(f"{PREFIX}/{path}")
        assert response.status_code == 404, path
        assert response.json()["code"] == "not_found"
    sign_checkpoint("t1")
    assert client.get(f"{PREFIX}/tile/0/002.p/98").status_code == 200
    assert len(records(client.get(f"{PREFIX}/tile/entries/002.p/98").content)) == 98


@pytest.mark.parametrize(
    "path",
    [
        "tile/0/x01",  # two digits
        "tile/0/01",
        "tile/0/0001",
        "tile/0/1",
        "tile/0/-1",
        "tile/0/-01",
        "tile/0/+01",
        "tile/0/x000/001",  # a leading zero element: 1 is 001
        "tile/0/x001",  # no last element
        "tile/0/001/x002",
        "tile/0/x1000/000",
        "tile/0/x999/x999/x999/x999/x999/x999/x999/999",  # beyond any index
        "tile/0/000.p/0",
        "tile/0/000.p/256",
        "tile/0/000.p/300",
        "tile/0/000.p/01",
        "tile/0/000.p/-1",
        "tile/0/000.p/",
        "tile/0/000.p",
        "tile/0/000.p/1/2",
        "tile/0/000/",
        "tile/0/",
        "tile/0",
        "tile/00/000",
        "tile/01/000",
        "tile/64/000",
        "tile/-1/000",
        "tile/99999999999999999999/000",
        "tile/data/000",
        "tile/8/0/000",  # Go's own path, with the height
        "tile/entries",
        "tile/entries/",
        "tile/entries/x01",
        "tile/entries/000.p/0",
        "tile/entries/000.p/256",
        "tile/entries/entries/000",
        "tile/\u0661\u0662/000",  # Arabic-Indic digits
        "tile/0/\u0660\u0660\u0660",
        "tile/0/000%00",
        "tile/0/000%2F",
        "tile/0/000%0A",
        "tile/entries/%0A000",
    ],
)
def test_a_path_that_is_not_the_specs_encoding_of_a_tile_is_404(client, keys, path):
    """Levels beyond 0..63, widths beyond 1..255, leading zeros, other spellings, negative or
    non-ASCII numbers, Go's own paths: 404 `not_found` (the JSON error), never a 500."""
    append("t1", 3)
    sign_checkpoint("t1")
    response = client.get(f"{PREFIX}/{path}")
    assert response.status_code == 404, (path, response.status_code)
    assert response.json()["code"] == "not_found"


def test_another_tenants_log_and_strangers_get_404(api, keys, client, grown):
    """t2's key sees none of t1's prefix (404), nor t1's key t2's; a viewer key reads; a session
    reads its own tenant's log only; no credentials is 401; a prefix that is no slug is 404."""
    other = api(keys.t2)
    for path in ("checkpoint", "tile/0/000", "tile/entries/000"):
        assert other.get(f"{PREFIX}/{path}").status_code == 404
        assert api(keys.viewer).get(f"{PREFIX}/{path}").status_code == 200
        assert api(None).get(f"{PREFIX}/{path}").status_code == 401
    append("t2", 3)
    sign_checkpoint("t2")
    assert other.get("/audit/tlog/t2/checkpoint").status_code == 200
    assert client.get("/audit/tlog/t2/checkpoint").status_code == 404
    assert client.get("/audit/tlog/t2/tile/0/000.p/3").status_code == 404
    for prefix in ("/audit/tlog/T1", "/audit/tlog/-t1", "/audit/tlog/t1%20", "/audit/tlog/nobody"):
        assert client.get(f"{prefix}/checkpoint").status_code == 404, prefix
    users = get_user_model().objects
    session = Client()
    session.force_login(users.get(username="viewer"))
    assert session.get(f"{BASE}{PREFIX}/tile/0/000").status_code == 200
    session.force_login(users.get(username="other"))
    assert session.get(f"{BASE}{PREFIX}/tile/0/000").status_code == 404
    assert session.get(f"{BASE}/audit/tlog/t2/tile/0/000.p/3").status_code == 200


def test_a_tile_or_a_bundle_is_a_bounded_number_of_queries(client, grown):
    """A tile of any level or width and a bundle of 256 entries each take at most 3 queries
    (the checkpoint's size, the retention cut for a bundle, one range read), whatever their width."""
    client.get(f"{PREFIX}/checkpoint")  # the key is verified once, then remembered for a second
    for path, most in (
        ("tile/0/000", 2),
        ("tile/0/002.p/88", 2),
        ("tile/1/000.p/2", 2),
        ("tile/entries/000", 3),
        ("tile/entries/002.p/88", 3),
    ):
        with CaptureQueriesContext(connection) as queries:
            assert client.get(f"{PREFIX}/{path}").status_code == 200
        ours = [q["sql"] for q in queries.captured_queries if "audit_" in q["sql"]]
        assert len(ours) <= most, (path, ours)
        assert len(queries.captured_queries) <= most + 2, (path, queries.captured_queries)


def test_retired_entries_are_410_while_every_hash_tile_is_served(client, grown, tmp_path):
    """After events 1..300 are retired (the pruning model: entries gone, hashes kept) a bundle
    holding one is 410 `audit_retired`, the next ones are served, and every hash tile is too."""
    before = {p: client.get(f"{PREFIX}/{p}").content for p in ("tile/0/000", "tile/0/001", "tile/1/000.p/2")}
    done = audit_retire(
        "t1", archive=tmp_path / "t1.json", actor="rita", before_seq=301, progress=lambda _: None
    )
    assert done is not None
    for path in ("tile/entries/000", "tile/entries/001", "tile/entries/000.p/5", "tile/entries/001.p/50"):
        response = client.get(f"{PREFIX}/{path}")
        assert response.status_code == 410, path
        assert response.json()["code"] == "audit_retired"
    for path, content in before.items():
        assert client.get(f"{PREFIX}/{path}").content == content
    size = int(client.get(f"{PREFIX}/checkpoint").content.decode().split("\n")[1])
    assert size == SIZE + 1  # the retirement's own event, signed
    assert records(client.get(f"{PREFIX}/tile/entries/002.p/89").content) == leaves(512, 89)


def test_a_leaf_too_long_for_a_bundle_is_409_and_its_hash_still_served(client, keys):
    """A leaf over 65,535 bytes cannot be written in a bundle (its length is a uint16): the
    bundle is 409 `audit_entry_too_large` naming the event; the tiles still hold its hash."""
    append("t1", 2)
    append("t1", 1, start=2, text="x" * 70_000)
    sign_checkpoint("t1")
    response = client.get(f"{PREFIX}/tile/entries/000.p/3")
    assert response.status_code == 409
    assert response.json()["code"] == "audit_entry_too_large" and "event 3" in response.json()["detail"]
    assert records(client.get(f"{PREFIX}/tile/entries/000.p/2").content) == leaves(0, 2)
    assert client.get(f"{PREFIX}/tile/0/000.p/3").content[64:] == stored_tree()[(0, 2)]


def test_gos_tile_hash_reader_verifies_the_log_it_reads_over_http(keys, client, child_env, tmp_path):
    """Go's sumdb/tlog, given only the prefix and the published key, reads a running Daphne:
    the checkpoint opens (note.Open), the tiles give its root (TileHashReader, TreeHash),
    every record of every bundle is proven from tiles (RecordHash, ProveRecord, CheckRecord)
    and is its event's RFC 8785 leaf, the tree is consistent with an older checkpoint
    (ProveTree, CheckTree). A tampered stored hash is refused, at level 0 and at level 1."""
    from tests.interop.go_reference import go_tiles

    append("t1", 300)
    old = sign_checkpoint("t1")
    assert old is not None
    append("t1", SIZE - 300, start=300)
    assert sign_checkpoint("t1") is not None
    vkey = str(log_verifier_key("t1"))
    env = {**child_env, "KEELGATE_API_RATE_LIMIT": "0", "KEELGATE_LOG_LEVEL": "WARNING"}
    log = tmp_path / "daphne.log"
    with daphne(env, log) as port:
        prefix = f"http://127.0.0.1:{port}{BASE}{PREFIX}"

        def check(**kwargs: Any) -> subprocess.CompletedProcess[str]:
            return go_tiles(prefix, vkey=vkey, authorization=f"Bearer {keys.t1}", **kwargs)

        wanted = [0, 1, 255, 256, 511, 512, 599]
        done = check(records=wanted, old=(old.size, bytes.fromhex(old.root)))
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert lines[0].startswith("ok note: ") and f"size {SIZE}" in lines[0]
        assert f"ok tree of {SIZE} from tiles" in lines
        proven = {
            int(w[2]): base64.b64decode(w[3]) for w in (line.split() for line in lines) if w[1] == "record"
        }
        assert proven == {i: leaves(i, 1)[0] for i in wanted}
        assert [line.split()[2:] for line in lines if line.startswith("ok bundle")] == [
            ["tile/entries/000", "256"],
            ["tile/entries/001", "256"],
            ["tile/entries/002.p/88", "88"],
        ]
        assert f"ok consistency of 300 with {SIZE}" in lines

        assert check(records=[0], entries_from=0, old=(old.size, bytes(32))).returncode == 1
        wrong_key = go_tiles(prefix, vkey=vkey, authorization=f"Bearer {keys.t2}", entries_from=-1)
        assert wrong_key.returncode == 1 and "404" in wrong_key.stderr

        # A stored hash changed: a leaf of the partial level 0 tile and a level 1 hash (under
        # the root: TileHashReader refuses the tile), a leaf of a full tile (the proofs of the
        # records beside it, which carry it, no longer lead to the root).
        for level, index, record, says in (
            (0, 550, 0, "downloaded inconsistent tile"),
            (8, 1, 0, "downloaded inconsistent tile"),
            (0, 5, 4, "invalid transparency proof"),
        ):
            node = TreeNode.objects.get(tenant_id="t1", level=level, index=index)
            kept = bytes(node.hash)
            node.hash = bytes(31) + b"\x01"
            node.save(update_fields=["hash"])
            refused = check(records=[record], entries_from=-1)
            assert refused.returncode == 1 and says in refused.stderr, (level, index, refused.stderr)
            node.hash = kept
            node.save(update_fields=["hash"])
        assert check(records=[4], entries_from=-1).returncode == 0
    assert "api.unexpected_error" not in log.read_text(errors="replace")
