"""The browser tests' hands in the database: a process that reads JSON commands on stdin.

It runs with the same environment as Daphne and the worker (the same SQLite file), so
the test process itself never opens the database: every change it makes goes through
the services (or, for the hostile run, the checkpoint store), exactly as in production.
One command per line in, one JSON answer per line out.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
import uuid
from datetime import UTC, datetime
from typing import Any


def main() -> None:
    import django

    django.setup()
    handlers = {**_handlers(), **_inbox_handlers(), **_audit_handlers()}
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        try:
            result = {"ok": True, "value": handlers[request["op"]](**request.get("args", {}))}
        except Exception as exc:  # report to the test, keep serving
            result = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}
        sys.stdout.write(json.dumps(result, default=str) + "\n")
        sys.stdout.flush()


def _handlers() -> dict[str, Any]:
    from django.contrib.auth import get_user_model
    from django.db import connection, transaction

    from approvals.models import Approval, UnknownOutcome
    from audit.wiring import audit_log
    from keelgate.loop import (
        ActionOutcome,
        ActionStatus,
        ApprovalState,
        LoopState,
        Phase,
        PlannedAction,
        StopReason,
        VerdictRecord,
    )
    from runs.agents.brokerage import PaperBrokerage
    from runs.engine.stores import DjangoCheckpointStore
    from runs.models import Checkpoint, Run, RunStatus
    from runs.services import run_start
    from tenants.models import Membership, Role, Tenant

    User = get_user_model()

    def seed(password: str) -> dict[str, Any]:
        acme, _ = Tenant.objects.get_or_create(slug="acme", defaults={"name": "Acme"})
        other, _ = Tenant.objects.get_or_create(slug="other", defaults={"name": "Other"})
        people = {
            "alice": (acme, Role.ADMIN),
            "bob": (acme, Role.APPROVER),
            "carol": (acme, Role.VIEWER),
            "mallory": (other, Role.ADMIN),
        }
        for name, (tenant, role) in people.items():
            user, _ = User.objects.get_or_create(username=name)
            user.set_password(password)
            user.save()
            Membership.objects.update_or_create(user=user, tenant=tenant, defaults={"role": role})
        return {"users": sorted(people)}

    def member(username: str, role: str, password: str) -> str:
        """One more person of acme (a test that needs more deciders than the seed has)."""
        acme = Tenant.objects.get(slug="acme")
        user, _ = User.objects.get_or_create(username=username)
        user.set_password(password)
        user.save()
        Membership.objects.update_or_create(user=user, tenant=acme, defaults={"role": role})
        return username

    def start_run(run_id: str, agent: str = "paper-trader", goal: str = "buy 10 ACME", **limits: Any) -> str:
        alice = User.objects.get(username="alice")
        run_start(tenant_id="acme", agent=agent, goal=goal, user=alice, run_id=run_id, limits=limits or None)
        return run_id

    def run(run_id: str) -> dict[str, Any]:
        row = Run.objects.get(tenant_id="acme", run_id=run_id)
        state = DjangoCheckpointStore().load("acme", run_id)
        return {
            "status": row.status,
            "stop_reason": row.stop_reason,
            "outcome": row.outcome,
            "phase": row.phase,
            "final_answer": state.final_answer if state else None,
        }

    def wait_run(run_id: str, status: str, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = run(run_id)
            if found["status"] == status:
                return found
            time.sleep(0.05)
        raise TimeoutError(f"{run_id} is {run(run_id)}, not {status}")

    def approval(run_id: str, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            row = Approval.objects.filter(tenant_id="acme", run_id=run_id).first()
            if row is not None:
                return {
                    "pk": row.pk,
                    "status": row.status,
                    "decided_by": row.decided_by,
                    "requested_at": row.requested_at.timestamp(),
                    "created_at": _inbox_row_committed(row),
                }
            time.sleep(0.05)
        raise TimeoutError(f"no approval for {run_id}")

    def _inbox_row_committed(row: Approval) -> float | None:
        """When the checkpoint that first put this action in the inbox was saved."""
        for entry in Checkpoint.objects.entries(row.tenant_id, row.run_id):
            state = LoopState.from_json(entry.text)
            action = state.action(row.action_id)
            if action is not None and action.approval is not None:
                return entry.saved_at.timestamp()
        return None

    def unknown(run_id: str, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            row = UnknownOutcome.objects.filter(tenant_id="acme", run_id=run_id).first()
            if row is not None:
                return {
                    "pk": row.pk,
                    "settled": row.settled,
                    "settled_by": row.settled_by,
                    "executed": row.executed,
                }
            time.sleep(0.05)
        raise TimeoutError(f"no unknown outcome for {run_id}")

    def set_mode(mode: str) -> str:
        PaperBrokerage().set_mode(mode)  # type: ignore[arg-type]
        return mode

    def ledger() -> list[dict[str, Any]]:
        return [
            {
                "key": e.key,
                "executions": e.executions,
                "replays": e.replays,
                "quantity": e.quantity,
                "result": e.result,
            }
            for e in PaperBrokerage().ledger()
        ]

    def hostile_run(run_id: str, payloads: dict[str, str]) -> dict[str, Any]:
        """A waiting run whose goal, arguments, output, rationale, verdict and answer are payloads."""
        script, img, url = payloads["script"], payloads["img"], payloads["url"]
        now = datetime.now(UTC)
        goal = f"buy 1 ACME {script} {img} {url}"
        with transaction.atomic():
            Run.objects.create(
                tenant_id="acme",
                run_id=run_id,
                agent="paper-trader",
                goal=goal,
                as_of=now,
                status=RunStatus.WAITING,
                created_by="alice",
            )
            state = LoopState(
                tenant_id="acme",
                run_id=run_id,
                agent_id="paper-trader",
                goal=goal,
                as_of=now,
                trace_id=uuid.uuid4().hex,
                phase=Phase.ACT,
                iteration=1,
                stop_reason=StopReason.APPROVAL_PENDING,
                final_answer=f"done {img}",
                verdicts=[VerdictRecord(iteration=1, decision="reject", reasons=[script], flags=[img])],
                actions=[
                    PlannedAction(
                        action_id="a-read",
                        iteration=1,
                        tool="get_quote",
                        arguments={"symbol": script, "link": url},
                        idempotency_key=f"{run_id}-k0",
                        rationale=img,
                        outcome=ActionOutcome(
                            status=ActionStatus.DONE,
                            output=json.dumps({"html": script, "img": img, "link": url}),
                            at=now,
                        ),
                    ),
                    PlannedAction(
                        action_id="a-write",
                        iteration=1,
                        tool="place_order",
                        arguments={"note": script, "img": img, "url": url},
                        idempotency_key=f"{run_id}-k1",
                        outcome=ActionOutcome(status=ActionStatus.AWAITING_APPROVAL, at=now),
                        approval=ApprovalState(required=1, reason=f"reason {img}", requested_at=now),
                    ),
                    PlannedAction(
                        action_id="a-unknown",
                        iteration=1,
                        tool="place_order",
                        arguments={"symbol": img, "side": url},
                        idempotency_key=f"{run_id}-k2",
                        outcome=ActionOutcome(
                            status=ActionStatus.UNKNOWN,
                            code="outcome_unknown",
                            detail="raised",
                            output=script,
                            at=now,
                        ),
                    ),
                ],
                seq=1,
                created_at=now,
                updated_at=now,
            )
            DjangoCheckpointStore().save(state)
            audit_log().append(
                "acme", actor="agent:paper-trader", kind="run.stopped", body={"run_id": run_id}
            )
        return {
            "approval": Approval.objects.get(tenant_id="acme", run_id=run_id).pk,
            "unknown": UnknownOutcome.objects.get(tenant_id="acme", run_id=run_id).pk,
        }

    def close() -> bool:
        connection.close()
        return True

    return {
        "seed": seed,
        "member": member,
        "start_run": start_run,
        "run": run,
        "wait_run": wait_run,
        "approval": approval,
        "unknown": unknown,
        "set_mode": set_mode,
        "ledger": ledger,
        "hostile_run": hostile_run,
        "close": close,
    }


def _inbox_handlers() -> dict[str, Any]:
    """Rows for the inbox's paging and filter tests (rows only: nobody decides them); standing
    rules; and settling what a test left waiting."""
    from datetime import timedelta

    from django.contrib.auth import get_user_model

    from approvals.models import Approval

    def many_approvals(n: int, tool: str) -> list[int]:
        now = datetime.now(UTC)
        rows = [
            Approval(
                tenant_id="acme",
                run_id=f"{tool}-{i:03d}",
                action_id="a1",
                agent="paper-trader",
                tool=tool,
                arguments="{}",
                requested_at=now - timedelta(days=30) + timedelta(minutes=i),
            )
            for i in range(n)
        ]
        return [row.pk for row in Approval.objects.bulk_create(rows)]

    def drop_approvals(tool: str) -> int:
        return Approval.objects.filter(tenant_id="acme", tool=tool).delete()[0]

    def touch_run(run_id: str) -> int:
        """An audit event naming the run: every open inbox re-renders the run's cards live."""
        from audit.wiring import audit_log

        return audit_log().append("acme", actor="test", kind="test.touch", body={"run_id": run_id}).seq

    def standing_rule(symbol: str, revoke: bool = False) -> int:
        """alice's standing rule for orders of ``symbol`` only (no other test buys it); revoked if asked."""
        from approvals.standing import standing_create

        alice = get_user_model().objects.get(username="alice")
        made = standing_create(
            tenant_id="acme",
            user=alice,
            agent="paper-trader",
            tool="place_order",
            bounds={"quantity": {"max": 1}, "symbol": {"equals": symbol}},
            expires_at=datetime.now(UTC) + timedelta(days=1),
            note=f"only {symbol}",
        )
        assert made is not None
        if revoke:
            standing_revoke(made.pk)
        return made.pk

    def standing_revoke(rule_id: int) -> int:
        from approvals.standing import standing_revoke as revoke

        revoke(tenant_id="acme", rule_id=rule_id, user=get_user_model().objects.get(username="alice"))
        return rule_id

    def decision_link(run_id: str, username: str) -> str:
        """The path of a decision link for ``run_id``'s pending call, made for ``username`` as a
        waiting email makes one (the token itself never stored)."""
        import secrets

        from django.urls import reverse

        from notifications.emails.links import TOKEN_PREFIX, link_lifetime, token_hash
        from notifications.models import DecisionLink

        row = Approval.objects.get(tenant_id="acme", run_id=run_id)
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        now = datetime.now(UTC)
        DecisionLink.objects.create(
            token_hash=token_hash(token),
            user=get_user_model().objects.get(username=username),
            approval_id=row.pk,
            arguments_hash=row.arguments_hash,
            created_at=now,
            expires_at=now + link_lifetime(),
        )
        return reverse("decision-link", args=[token])

    def settle(run_id: str) -> str:
        """Whatever of ``run_id`` waits for a person, decided by alice, so no other test sees it: a
        pending call denied; an unknown outcome recorded as executed (the brokerage's ``fail`` mode
        accepts the order before it fails), so the run ends without asking again."""
        from approvals.models import ApprovalStatus, UnknownOutcome
        from approvals.services import approval_decide, unknown_reconcile

        alice = get_user_model().objects.get(username="alice")
        for row in Approval.objects.filter(tenant_id="acme", run_id=run_id, status=ApprovalStatus.PENDING):
            approval_decide(
                tenant_id="acme", approval_id=row.pk, user=alice, decision="deny", note="a test's"
            )
        for unknown in UnknownOutcome.objects.filter(tenant_id="acme", run_id=run_id, settled=False):
            unknown_reconcile(
                tenant_id="acme", item_id=unknown.pk, user=alice, executed=True, note="in the ledger"
            )
        return run_id

    return {
        "many_approvals": many_approvals,
        "drop_approvals": drop_approvals,
        "touch_run": touch_run,
        "standing_rule": standing_rule,
        "standing_revoke": standing_revoke,
        "decision_link": decision_link,
        "settle": settle,
    }


def _audit_handlers() -> dict[str, Any]:
    def every_kind(password: str) -> dict[str, Any]:
        """Tenant ``kinds`` with its own viewer ``kit``, and one event of every kind in its chain.

        A tenant of its own: the other tests' people and chains stay as they were.
        """
        from django.contrib.auth import get_user_model

        from audit.selectors import audit_heads
        from tenants.models import Membership, Role, Tenant
        from tests.site.audit.every_kind import append_every_kind

        tenant, _ = Tenant.objects.get_or_create(slug="kinds", defaults={"name": "Kinds"})
        kit, _ = get_user_model().objects.get_or_create(username="kit")
        kit.set_password(password)
        kit.save()
        Membership.objects.update_or_create(user=kit, tenant=tenant, defaults={"role": Role.VIEWER})
        if audit_heads(["kinds"])["kinds"] == 0:
            append_every_kind("kinds", empty_too=True)
        return {"head": audit_heads(["kinds"])["kinds"]}

    def review_log(password: str) -> dict[str, Any]:
        """Tenant ``review`` with its viewer ``rev``: the review tests' log (LOG, 30 events,
        appended through the product's log) and a finished run ``r-1`` whose events are in it."""
        from django.contrib.auth import get_user_model

        from audit.models import AuditEvent
        from runs.models import Run, RunStatus
        from tenants.models import Membership, Role, Tenant
        from tests.site.audit.review_log import append_log

        tenant, _ = Tenant.objects.get_or_create(slug="review", defaults={"name": "Review"})
        rev, _ = get_user_model().objects.get_or_create(username="rev")
        rev.set_password(password)
        rev.save()
        Membership.objects.update_or_create(user=rev, tenant=tenant, defaults={"role": Role.VIEWER})
        if not AuditEvent.objects.filter(tenant_id="review").exists():
            append_log("review")
            Run.objects.create(
                tenant_id="review",
                run_id="r-1",
                agent="paper-trader",
                goal="buy 1 ACME",
                as_of=datetime.now(UTC),
                status=RunStatus.DONE,
                created_by="rev",
            )
        return {"head": 30}

    def append_event(tenant_id: str, actor: str, kind: str) -> int:
        """One event through the audit log, as a writer of the product appends it."""
        from audit.wiring import audit_log

        return audit_log().append(tenant_id, actor=actor, kind=kind, body={"note": "<b>live</b>"}).seq

    return {"every_kind": every_kind, "review_log": review_log, "append_event": append_event}


if __name__ == "__main__":
    main()
