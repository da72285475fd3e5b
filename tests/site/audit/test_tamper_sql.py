"""Tampering with the audit tables in raw SQL is caught by ``verify_audit`` at the right seq.

Each case edits the database behind the store's back, the way someone with database
access would (events, tree nodes, the head, checkpoints), then checks that the command
fails naming the first bad event and why, while an untouched tenant still verifies. A
forger who also recomputes every leaf, subtree and the head (:func:`reseal`) passes
every check but the signed ones: a checkpoint stored earlier, or a digest kept elsewhere.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from io import StringIO
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test import override_settings

from audit.checkpoints import sign_checkpoint
from audit.models import AuditEvent as EventRow
from audit.models import ChainHead, Checkpoint, TreeNode
from audit.selectors import audit_digest, audit_verify
from audit.wiring import audit_log
from keelgate.audit import TreeBuilder, leaf_object, object_leaf_hash

pytestmark = pytest.mark.django_db

TENANT = "acme"
OTHER = "globex"
EVENTS = 5
TABLES = {
    "events": EventRow._meta.db_table,
    "head": ChainHead._meta.db_table,
    "nodes": TreeNode._meta.db_table,
    "checkpoints": Checkpoint._meta.db_table,
}


def sql(statement: str, params: list[Any] | None = None) -> None:
    """Run one statement on the test database, table names filled in."""
    with connection.cursor() as cursor:
        cursor.execute(statement.format(**TABLES), params or [])


def row(seq: int, tenant_id: str = TENANT) -> EventRow:
    """The stored row ``seq`` of a tenant."""
    return EventRow.objects.get(tenant_id=tenant_id, seq=seq)


def run_verify(*args: str) -> tuple[str, str | None]:
    """``verify_audit``'s stdout and its CommandError message (None when it passed)."""
    out = StringIO()
    try:
        call_command("verify_audit", *args, stdout=out)
    except CommandError as exc:
        return out.getvalue(), str(exc)
    return out.getvalue(), None


def other_key() -> str:
    """A fresh Ed25519 private key in the settings' format (base64 of 32 raw bytes)."""
    raw = Ed25519PrivateKey.generate().private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    return base64.b64encode(raw).decode()


def leaf_of(event: EventRow) -> bytes:
    """The leaf hash the public algorithm gives a stored event's fields (as a forger computes it)."""
    return object_leaf_hash(
        leaf_object(
            version=event.version,
            tenant_id=event.tenant_id,
            seq=event.seq,
            at=event.at,
            actor=event.actor,
            kind=event.kind,
            body=json.loads(event.body),
            prev_hash=event.prev_hash,
            hash=event.hash,
        )
    )


def events_root(tenant_id: str) -> str:
    """The root of the tenant's numbered events, recomputed from their fields alone."""
    builder = TreeBuilder()
    for event in EventRow.objects.filter(tenant_id=tenant_id, seq__isnull=False).order_by("seq"):
        builder.add(leaf_of(event))
    return builder.root().hex()


def reseal(tenant_id: str = TENANT, *, nodes: bool = True, head: bool = True) -> None:
    """What a forger does after editing events: recompute every stored leaf hash from the
    events' fields, then (unless told not to) every subtree hash and the head's size and
    root, so that everything unsigned agrees with the edited events again."""
    builder = TreeBuilder()
    made: list[tuple[int, int, bytes]] = []
    for event in EventRow.objects.filter(tenant_id=tenant_id, seq__isnull=False).order_by("seq"):
        leaf = leaf_of(event)
        sql("UPDATE {events} SET leaf_hash = %s WHERE id = %s", [leaf.hex(), event.id])
        made += builder.add(leaf)
    if nodes:
        sql("DELETE FROM {nodes} WHERE tenant_id = %s", [tenant_id])
        for level, index, hash_ in made:
            sql(
                'INSERT INTO {nodes} (tenant_id, level, "index", hash) VALUES (%s, %s, %s, %s)',
                [tenant_id, level, index, hash_],
            )
    if head:
        sql(
            "UPDATE {head} SET seq = %s, root = %s WHERE tenant_id = %s",
            [builder.size, builder.root().hex(), tenant_id],
        )


def insert(seq: int, *, actor: str = "mallory", leaf_hash: str | None = None) -> None:
    """Insert a numbered tree leaf as a raw row; its leaf hash right unless given."""
    at = row(1).at
    body = '{"forged":true}'
    if leaf_hash is None:
        leaf_hash = object_leaf_hash(
            leaf_object(
                version=2, tenant_id=TENANT, seq=seq, at=at, actor=actor, kind="note", body={"forged": True}
            )
        ).hex()
    sql(
        "INSERT INTO {events} (tenant_id, seq, at, actor, kind, body, run_id, tool, version, leaf_hash,"
        " prev_hash, hash) VALUES (%s, %s, %s, %s, %s, %s, '', '', 2, %s, '', '')",
        [TENANT, seq, at, actor, "note", body, leaf_hash],
    )


def set_column(column: str, value: Any, seq: int) -> Callable[[], None]:
    """A tampering: one column of the tenant's event ``seq`` set to ``value``."""

    def tamper() -> None:
        sql(f"UPDATE {{events}} SET {column} = %s WHERE tenant_id = %s AND seq = %s", [value, TENANT, seq])

    return tamper


def set_node(level: int, index: int, value: bytes) -> Callable[[], None]:
    """A tampering: one stored subtree hash of the tenant replaced."""

    def tamper() -> None:
        sql(
            'UPDATE {nodes} SET hash = %s WHERE tenant_id = %s AND level = %s AND "index" = %s',
            [value, TENANT, level, index],
        )

    return tamper


def strip_time_zone() -> None:
    set_column("at", row(3).at.rsplit("+", 1)[0], 3)()


def delete_event(seq: int) -> Callable[[], None]:
    def tamper() -> None:
        sql("DELETE FROM {events} WHERE tenant_id = %s AND seq = %s", [TENANT, seq])

    return tamper


def delete_head_row() -> None:
    sql("DELETE FROM {head} WHERE tenant_id = %s", [TENANT])


def delete_node() -> None:
    sql('DELETE FROM {nodes} WHERE tenant_id = %s AND level = 2 AND "index" = 0', [TENANT])


def edit_head_root() -> None:
    sql("UPDATE {head} SET root = %s WHERE tenant_id = %s", ["a" * 64, TENANT])


def head_back_root_stale() -> None:
    sql("UPDATE {head} SET seq = 3 WHERE tenant_id = %s", [TENANT])


def head_back_with_its_root() -> None:
    builder = TreeBuilder()
    for seq in (1, 2, 3):
        builder.add(bytes.fromhex(row(seq).leaf_hash))
    sql("UPDATE {head} SET seq = 3, root = %s WHERE tenant_id = %s", [builder.root().hex(), TENANT])


def head_forward() -> None:
    sql("UPDATE {head} SET seq = %s WHERE tenant_id = %s", [EVENTS + 2, TENANT])


def insert_forged_row() -> None:
    insert(EVENTS + 1)


def insert_forged_row_bad_leaf() -> None:
    insert(EVENTS + 1, leaf_hash="b" * 64)


def swap_seqs() -> None:
    sql("UPDATE {events} SET seq = -1 WHERE tenant_id = %s AND seq = 2", [TENANT])
    sql("UPDATE {events} SET seq = 2 WHERE tenant_id = %s AND seq = 4", [TENANT])
    sql("UPDATE {events} SET seq = 4 WHERE tenant_id = %s AND seq = -1", [TENANT])


def swap_seqs_and_leaves() -> None:
    """Swap two events' numbers and their leaf hashes: the leaf carries its number."""
    two, four = row(2).leaf_hash, row(4).leaf_hash
    swap_seqs()
    set_column("leaf_hash", two, 4)()
    set_column("leaf_hash", four, 2)()


def move_to_other_tenant() -> None:
    sql("UPDATE {events} SET tenant_id = %s WHERE tenant_id = %s AND seq = 3", ["zz-ghost", TENANT])


def rewrite_tail(*, nodes: bool, head: bool) -> Callable[[], None]:
    """Events 3.. get another actor and their leaf hashes recomputed; the nodes and the
    head too if told."""

    def tamper() -> None:
        sql("UPDATE {events} SET actor = %s WHERE tenant_id = %s AND seq >= 3", ["mallory", TENANT])
        reseal(nodes=nodes, head=head)

    return tamper


CASES: list[tuple[str, Callable[[], None], int, str]] = [
    ("update body", set_column("body", '{"n":999}', 3), 3, "leaf_mismatch"),
    ("update body to invalid JSON", set_column("body", "{not json", 3), 3, "leaf_mismatch"),
    ("update actor", set_column("actor", "someone-else", 2), 2, "leaf_mismatch"),
    ("update kind", set_column("kind", "approved", 4), 4, "leaf_mismatch"),
    ("update time", set_column("at", "2020-01-01T00:00:00.000000+00:00", 3), 3, "leaf_mismatch"),
    ("strip the time zone", strip_time_zone, 3, "leaf_mismatch"),
    ("update leaf hash", set_column("leaf_hash", "c" * 64, 4), 4, "leaf_mismatch"),
    ("give a tree leaf a hash", set_column("hash", "f" * 64, 4), 4, "hash_mismatch"),
    ("give a tree leaf a prev_hash", set_column("prev_hash", "e" * 64, 3), 3, "hash_mismatch"),
    ("relabel a tree leaf as chained", set_column("version", 1, 3), 3, "version_order"),
    ("relabel the first leaf as chained", set_column("version", 1, 1), 1, "prev_hash_mismatch"),
    ("an unknown version", set_column("version", 7, 2), 2, "version_order"),
    ("delete a middle row", delete_event(3), 3, "sequence_gap"),
    ("delete the first row", delete_event(1), 1, "sequence_gap"),
    ("delete the last row", delete_event(EVENTS), EVENTS, "head_mismatch"),
    ("delete the head row", delete_head_row, 1, "head_mismatch"),
    ("edit the head's root", edit_head_root, EVENTS, "root_mismatch"),
    ("move the head back, root stale", head_back_root_stale, 3, "root_mismatch"),
    ("move the head back with its root", head_back_with_its_root, 4, "head_mismatch"),
    ("move the head forward", head_forward, EVENTS + 1, "head_mismatch"),
    ("edit a leaf node", set_node(0, 3, b"\x11" * 32), 4, "node_mismatch"),
    ("edit an interior node", set_node(1, 1, b"\x22" * 32), 3, "node_mismatch"),
    ("delete the top complete node", delete_node, 1, "node_mismatch"),
    ("insert a forged numbered row beyond the head", insert_forged_row, EVENTS + 1, "head_mismatch"),
    ("insert a forged row with a bad leaf", insert_forged_row_bad_leaf, EVENTS + 1, "head_mismatch"),
    ("swap two rows' seq", swap_seqs, 2, "leaf_mismatch"),
    ("swap two rows' seq and leaf hashes", swap_seqs_and_leaves, 2, "leaf_mismatch"),
    ("renumber a row", set_column("seq", 50, 3), 3, "sequence_gap"),
    ("move a row to another tenant", move_to_other_tenant, 3, "sequence_gap"),
    ("rewrite the tail, nodes stale", rewrite_tail(nodes=False, head=False), 3, "node_mismatch"),
    ("rewrite the tail and nodes, head stale", rewrite_tail(nodes=True, head=False), EVENTS, "root_mismatch"),
]


@pytest.fixture
def chains() -> None:
    """Two tenants with ``EVENTS`` events each, appended through the real store."""
    log = audit_log()
    for n in range(EVENTS):
        log.append(TENANT, actor="agent", kind="note", body={"n": n})
        log.append(OTHER, actor="agent", kind="note", body={"n": n})


def test_untouched_logs_verify(chains: None) -> None:
    """Before any tampering both tenants verify, each to the root of its own events."""
    out, error = run_verify()
    assert error is None
    assert f"tenant={TENANT} events={EVENTS} head={EVENTS} ok" in out
    assert f"tenant={OTHER} events={EVENTS} head={EVENTS} ok" in out
    report = audit_verify(tenant_id=TENANT)
    assert report.head_hash == events_root(TENANT) == ChainHead.objects.get(tenant_id=TENANT).root


@pytest.mark.parametrize(("tamper", "bad_seq", "reason"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_tampering_is_found_at_first_bad_seq(
    chains: None, tamper: Callable[[], None], bad_seq: int, reason: str
) -> None:
    """After SQL tampering verify_audit fails naming the first bad seq and why; the other tenant stays ok."""
    tamper()
    out, error = run_verify()
    expected = f"tenant={TENANT} BROKEN at seq={bad_seq} reason={reason}"
    assert error is not None
    assert expected in error
    assert expected in out
    assert f"tenant={OTHER} events={EVENTS} head={EVENTS} ok" in out
    report = audit_verify(tenant_id=TENANT)
    assert (report.ok, report.first_bad_seq, report.reason) == (False, bad_seq, reason)
    assert report.checked == min(bad_seq - 1, EVENTS)  # everything before the break verified


def test_tampering_is_found_with_tenant_option(chains: None) -> None:
    """``--tenant`` verifies just that tenant and still fails on its tampered row."""
    set_column("actor", "someone-else", 2)()
    out, error = run_verify("--tenant", TENANT)
    assert error is not None and "seq=2 reason=leaf_mismatch" in error
    assert OTHER not in out


def test_moved_row_breaks_the_tenant_it_lands_in(chains: None) -> None:
    """A row moved into a tenant without a log is a numbered event no head counts: broken there."""
    move_to_other_tenant()
    out, _ = run_verify()
    assert "tenant=zz-ghost BROKEN at seq=3 reason=head_mismatch" in out


def test_a_row_moved_into_another_tenants_slot_is_not_its_leaf(chains: None) -> None:
    """An event moved into the gap of another tenant's deleted event is caught there: its leaf
    names its tenant."""
    sql("DELETE FROM {events} WHERE tenant_id = %s AND seq = 3", [OTHER])
    sql("UPDATE {events} SET tenant_id = %s WHERE tenant_id = %s AND seq = 3", [OTHER, TENANT])
    report = audit_verify(tenant_id=OTHER)
    assert (report.first_bad_seq, report.reason) == (3, "leaf_mismatch")


def test_two_tamperings_name_the_earlier(chains: None) -> None:
    """A subtree hash edited at seq 2 and an event at seq 4: the report names seq 2, the first break."""
    set_node(0, 1, b"\x33" * 32)()
    set_column("actor", "someone-else", 4)()
    report = audit_verify(tenant_id=TENANT)
    assert (report.first_bad_seq, report.reason) == (2, "node_mismatch")


def test_a_resealed_rewrite_passes_every_unsigned_check(chains: None) -> None:
    """Every event rewritten with its leaf, the nodes and the head recomputed: nothing in the
    database but a signature can tell (which is what checkpoints and digests are for)."""
    sql("UPDATE {events} SET actor = %s WHERE tenant_id = %s", ["mallory", TENANT])
    reseal()
    report = audit_verify(tenant_id=TENANT)
    assert (report.ok, report.checked) == (True, EVENTS)
    assert report.head_hash == events_root(TENANT)


def test_a_resealed_rewrite_is_caught_by_a_checkpoint_stored_before(chains: None) -> None:
    """A checkpoint signed at 5, two more events, then the whole history rewritten and resealed:
    checkpoint_mismatch at the checkpoint's size."""
    assert sign_checkpoint(TENANT) is not None
    log = audit_log()
    log.append(TENANT, actor="agent", kind="note", body={"n": 5})
    log.append(TENANT, actor="agent", kind="note", body={"n": 6})
    sql("UPDATE {events} SET actor = %s WHERE tenant_id = %s", ["mallory", TENANT])
    reseal()
    out, error = run_verify()
    expected = f"tenant={TENANT} BROKEN at seq={EVENTS} reason=checkpoint_mismatch"
    assert error is not None and expected in error
    assert f"tenant={OTHER} events={EVENTS} head={EVENTS} ok" in out


def test_a_resealed_rewrite_is_caught_by_a_kept_digest(chains: None) -> None:
    """A digest of the head at 5 kept elsewhere, then history rewritten and resealed:
    digest_mismatch at the digest's seq, though the log verifies alone."""
    digest = dict(audit_digest(tenant_id=TENANT))
    sql("UPDATE {events} SET actor = %s WHERE tenant_id = %s AND seq >= 2", ["mallory", TENANT])
    reseal()
    assert audit_verify(tenant_id=TENANT).ok
    report = audit_verify(tenant_id=TENANT, against=digest)
    assert (report.ok, report.first_bad_seq, report.reason) == (False, EVENTS, "digest_mismatch")


def test_an_edited_or_forged_checkpoint_does_not_verify(chains: None) -> None:
    """A checkpoint whose note was edited (its root swapped for another), or one signed with
    another key, is checkpoint_mismatch at its size."""
    checkpoint = sign_checkpoint(TENANT)
    assert checkpoint is not None
    body, _, signatures = checkpoint.note.partition("\n\n")
    origin, size, root = body.splitlines()[:3]
    forged_root = "A" * (len(root) - 1) + "="
    note = f"{origin}\n{size}\n{forged_root}\n\n{signatures}"
    sql("UPDATE {checkpoints} SET note = %s WHERE tenant_id = %s", [note, TENANT])
    report = audit_verify(tenant_id=TENANT)
    assert (report.ok, report.first_bad_seq, report.reason) == (False, EVENTS, "checkpoint_mismatch")
    with override_settings(KEELGATE_AUDIT_SIGNING_KEY=other_key()):
        assert sign_checkpoint(OTHER) is not None  # a forger's key, not the site's
    report = audit_verify(tenant_id=OTHER)
    assert (report.ok, report.first_bad_seq, report.reason) == (False, EVENTS, "checkpoint_mismatch")


def test_truncating_below_a_checkpoint_is_caught(chains: None) -> None:
    """Events 4.. deleted, the tree and head resealed at 3: a checkpoint signed at 5 still says
    the log held 5 events (checkpoint_mismatch), as a kept digest would."""
    assert sign_checkpoint(TENANT) is not None
    sql("DELETE FROM {events} WHERE tenant_id = %s AND seq >= 4", [TENANT])
    reseal()
    assert ChainHead.objects.get(tenant_id=TENANT).seq == 3
    report = audit_verify(tenant_id=TENANT)
    assert (report.ok, report.reason) == (False, "checkpoint_mismatch")


def test_a_forged_append_with_its_tree_verifies_a_log_vouches_for_signed_prefixes_only(chains: None) -> None:
    """A forged event numbered after the head, with its leaf, nodes and head recomputed, verifies:
    appending is what the log allows, and a checkpoint or digest signed before it still holds."""
    checkpoint = sign_checkpoint(TENANT)
    digest = dict(audit_digest(tenant_id=TENANT))
    insert(EVENTS + 1)
    reseal()
    assert checkpoint is not None
    report = audit_verify(tenant_id=TENANT, against=digest)
    assert (report.ok, report.head_seq) == (True, EVENTS + 1)
