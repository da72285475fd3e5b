"""The cut-over: every event written so far (hash-chained, ``version`` 1) becomes a leaf.

Nothing already stored is re-hashed: each event keeps its chain link and verifies under
it; this adds, beside it, its leaf (whose object carries that link), the subtrees its
leaves complete, and the head's root, so the first checkpoint signed afterwards covers
the chain too. New events are tree leaves only (``version`` 2).
"""

from __future__ import annotations

import json

from django.db import migrations

from keelgate.audit import leaf_object, new_nodes, object_leaf_hash, tree_root

CHUNK = 5000


def integrate_chains(apps, schema_editor):  # type: ignore[no-untyped-def]
    ChainHead = apps.get_model("audit", "ChainHead")
    AuditEvent = apps.get_model("audit", "AuditEvent")
    TreeNode = apps.get_model("audit", "TreeNode")

    def reader(tenant_id):  # type: ignore[no-untyped-def]
        def read(wanted):  # type: ignore[no-untyped-def]
            found = {}
            for level, index, hash_ in TreeNode.objects.filter(
                tenant_id=tenant_id, level__in={lv for lv, _ in wanted}, index__in={i for _, i in wanted}
            ).values_list("level", "index", "hash"):
                found[(level, index)] = bytes(hash_)
            return [found[node] for node in wanted]

        return read

    tenants = set(ChainHead.objects.values_list("tenant_id", flat=True))
    tenants |= set(AuditEvent.objects.order_by().values_list("tenant_id", flat=True).distinct())
    for tenant_id in sorted(tenants):
        size = 0
        rows = AuditEvent.objects.filter(tenant_id=tenant_id).order_by("seq")
        while True:
            chunk = list(rows.filter(seq__gt=size)[:CHUNK])
            if not chunk:
                break
            leaves = []
            for row in chunk:
                if row.seq != size + len(leaves) + 1:
                    raise RuntimeError(f"tenant {tenant_id}: a gap before seq {row.seq}; run verify_audit")
                body = json.loads(row.body)
                leaf = leaf_object(
                    version=1,
                    tenant_id=row.tenant_id,
                    seq=row.seq,
                    at=row.at,
                    actor=row.actor,
                    kind=row.kind,
                    body=body,
                    prev_hash=row.prev_hash,
                    hash=row.hash,
                )
                row.leaf_hash = object_leaf_hash(leaf).hex()
                row.version = 1
                if isinstance(body, dict):
                    run_id, tool = body.get("run_id"), body.get("tool")
                    row.run_id = run_id[:128] if isinstance(run_id, str) else ""
                    row.tool = tool[:200] if isinstance(tool, str) else ""
                leaves.append(bytes.fromhex(row.leaf_hash))
            made = new_nodes(size, leaves, reader(tenant_id))
            AuditEvent.objects.bulk_update(chunk, ["leaf_hash", "version", "run_id", "tool"], batch_size=1000)
            TreeNode.objects.bulk_create(
                [TreeNode(tenant_id=tenant_id, level=lv, index=i, hash=h) for lv, i, h in made], batch_size=1000
            )
            size += len(chunk)
        last = rows.filter(seq=size).values_list("hash", flat=True).first() if size else None
        root = tree_root(size, reader(tenant_id)).hex() if size else ""
        head, _ = ChainHead.objects.get_or_create(tenant_id=tenant_id, defaults={"seq": 0, "hash": "0" * 64})
        head.seq, head.chain_seq, head.root = size, size, root
        if last is not None:
            head.hash = last
        head.save()


class Migration(migrations.Migration):
    dependencies = [("audit", "0002_tree")]

    operations = [migrations.RunPython(integrate_chains, migrations.RunPython.noop)]
