"""``manage.py keelgate_demo [--password P]``: a demo tenant, an operator and some runs.

Idempotent. Creates tenant ``demo``, operator ``operator`` (admin; the password is
printed when generated), one run driven to an unknown outcome (its order was accepted
by the brokerage, which then failed), and two queued paper-trader runs that a worker
turns into pending approvals.
"""

from __future__ import annotations

import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from approvals.models import Approval
from approvals.services import approval_decide
from runs.agents.brokerage import PaperBrokerage
from runs.engine.worker import Worker
from runs.models import Run
from runs.services import run_start
from tenants.models import Membership, Role, Tenant
from tenants.services import member_add, member_set_role


class Command(BaseCommand):
    help = "Create the demo tenant, operator and runs (idempotent)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--password", help="the operator's password (generated if omitted for a new user)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        tenant, _ = Tenant.objects.get_or_create(slug="demo", defaults={"name": "Demo"})
        user, created = get_user_model().objects.get_or_create(username="operator")
        password = options["password"] or (secrets.token_urlsafe(9) if created else None)
        if password:
            user.set_password(password)
            user.save()
        if Membership.objects.filter(user=user, tenant=tenant).exists():
            member_set_role(tenant=tenant, user=user, role=Role.ADMIN, by="manage.py keelgate_demo")
        else:
            member_add(tenant=tenant, username=user.username, role=Role.ADMIN, by="manage.py keelgate_demo")
        if options["password"]:
            # The caller knows it; echoed, it would land in keelgate_serve's output and logs.
            self.stdout.write("login: operator (the password given)")
        elif password:
            self.stdout.write(f"login: operator / {password}")  # generated: printed once, or nobody knows it
        else:
            self.stdout.write("login: operator (password unchanged)")
        if Run.objects.filter(tenant_id="demo").exists():
            self.stdout.write("demo runs exist already")
            return
        self._unknown_outcome_run(user)
        for goal in ("buy 10 ACME", "sell 5 BETA"):
            run, _ = run_start(tenant_id="demo", agent="paper-trader", goal=goal, user=user)
            self.stdout.write(f"queued {run.run_id}: {goal}")

    def _unknown_outcome_run(self, user: Any) -> None:
        """Drive one run to an unknown outcome in-process, for the inbox to show."""
        brokerage = PaperBrokerage()
        worker = Worker(lease_seconds=30)
        run, _ = run_start(
            tenant_id="demo", agent="paper-trader", goal="buy 3 GAMMA", user=user, run_id="demo-unknown"
        )
        self._drive(worker)
        approval = Approval.objects.get(tenant_id="demo", run_id=run.run_id)
        approval_decide(tenant_id="demo", approval_id=approval.pk, user=user, decision="approve", note="demo")
        brokerage.set_mode("fail")
        try:
            self._drive(worker)
        finally:
            brokerage.set_mode("normal")
        self.stdout.write(f"{run.run_id}: the brokerage failed after accepting the order -> unknown outcome")

    def _drive(self, worker: Worker) -> None:
        claim = worker.claim()
        if claim is not None:
            worker.execute(claim)
