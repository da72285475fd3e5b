"""The approvals app's statements on PostgreSQL: a decision's lock, with the decider's
role; and the live push tailer's three reads on its own async connection.

``approvals.services._lock_with_role`` says in ORM terms what a decision's first step
does (lock the approval row until the decision commits, then read the person's role in
its tenant); on PostgreSQL it is this one statement, the first of the decision's commit
group, so the ``BEGIN`` goes in its message: one round trip where the ORM took two,
and none of the ORM's building of each query.
"""

from __future__ import annotations

import functools
from typing import Any

from django.db import connection

from approvals.models import Approval
from audit.models import AuditEvent, ChainHead, PendingEvent
from sitekit.commits import DjangoCommitGroup
from sitekit.db import model_from_row, select_columns
from tenants.models import Membership, Tenant


def lock_with_role(
    group: DjangoCommitGroup, tenant_id: str, approval_id: int, user: Any
) -> tuple[Approval, str | None] | None:
    """The approval, locked until the transaction ends, and ``user``'s role in its tenant
    (None without a membership); None if the tenant has no such approval."""
    authenticated = user is not None and user.is_authenticated
    params = [user.pk if authenticated else None, tenant_id, tenant_id, approval_id]
    answer = group.query(_lock_with_role_sql(), params)
    if not answer.rows:
        return None
    *columns, held = answer.rows[0]
    return model_from_row(Approval, columns), held


@functools.cache
def _lock_with_role_sql() -> str:
    qn = connection.ops.quote_name
    table = qn(Approval._meta.db_table)
    role = (
        f"(SELECT m.{qn('role')} FROM {qn(Membership._meta.db_table)} m"
        f" JOIN {qn(Tenant._meta.db_table)} t ON t.{qn('id')} = m.{qn('tenant_id')}"
        f" WHERE m.{qn('user_id')} = %s AND t.{qn('slug')} = %s"
        f" AND m.{qn('deactivated_at')} IS NULL LIMIT 1)"
    )
    return (
        f"SELECT {select_columns(Approval)}, {role} FROM {table}"
        f" WHERE {table}.{qn('tenant_id')} = %s AND {table}.{qn('id')} = %s FOR UPDATE OF {table}"
    )


TAIL_EVENTS = (
    f"SELECT seq, kind, actor, body FROM {AuditEvent._meta.db_table}"
    " WHERE tenant_id = %s AND seq > %s ORDER BY seq LIMIT %s"
)
"""The tailer's read of a tenant's events after a seq (``approvals.outbox.read_items_on``)."""
TAIL_HEADS = f"SELECT tenant_id, seq FROM {ChainHead._meta.db_table} WHERE tenant_id = ANY(%s)"
"""The tailer's read of its tenants' chain heads (``approvals.outbox.heads_on``)."""
TAIL_PENDING = (
    "SELECT tenant_id FROM unnest(%s::text[]) AS watched(tenant_id) WHERE EXISTS"
    f" (SELECT 1 FROM {PendingEvent._meta.db_table} p WHERE p.tenant_id = watched.tenant_id)"
)
"""Which of the tailer's tenants have events waiting to be numbered
(``approvals.outbox.pending_on``): one probe of the queue's index per tenant."""
