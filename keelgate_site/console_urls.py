"""The console pages: login, the inbox (home), decisions, runs and the audit chain.

The websocket route (``/ws/inbox/``) is in ``keelgate_site.asgi``.
"""

from django.urls import path

from approvals import views as approvals
from audit import views as audit
from notifications import link_views
from notifications import views as notifications
from notifications.slack import endpoints as slack
from runs import views as runs
from tenants import views as tenants

urlpatterns = [
    path("login/", tenants.login, name="login"),
    path("logout/", tenants.logout, name="logout"),
    path("", approvals.inbox, name="inbox"),
    path("approvals/bulk/", approvals.bulk_decide, name="approvals-bulk"),
    path("approvals/<int:pk>/approve/", approvals.approve, name="approval-approve"),
    path("approvals/<int:pk>/deny/", approvals.deny, name="approval-deny"),
    path("approvals/standing/", approvals.standing_page, name="standing"),
    path("approvals/standing/<int:pk>/revoke/", approvals.standing_revoke_view, name="standing-revoke"),
    path("approvals/standing/<int:pk>/endorse/", approvals.standing_endorse_view, name="standing-endorse"),
    path("approvals/standing/<int:pk>/edit/", approvals.standing_edit_view, name="standing-edit"),
    path("unknown/<int:pk>/reconcile/", approvals.reconcile, name="unknown-reconcile"),
    path("unknown/<int:pk>/check/", approvals.check, name="unknown-check"),
    path("runs/", runs.run_list, name="runs"),
    path("runs/rows/", runs.run_rows, name="runs-rows"),
    path("runs/start/", runs.run_start_view, name="run-start"),
    # Run ids are opaque (an API client may choose one with a slash): the suffixed
    # routes come first so "<run>/status/" is never read as a run id.
    path("runs/<slug:tenant_id>/<path:run_id>/status/", runs.run_status, name="run-status"),
    path("runs/<slug:tenant_id>/<path:run_id>/resume/", runs.run_resume_view, name="run-resume"),
    path("runs/<slug:tenant_id>/<path:run_id>/replay/", runs.run_replay, name="run-replay"),
    path("runs/<slug:tenant_id>/<path:run_id>/timeline/", runs.run_timeline_view, name="run-timeline"),
    path("runs/<slug:tenant_id>/<path:run_id>/cancel/", approvals.run_cancel_view, name="run-cancel"),
    path("runs/<slug:tenant_id>/<path:run_id>/", runs.run_detail, name="run"),
    path("audit/", audit.audit_index, name="audit"),
    path("audit/<slug:tenant_id>/", audit.audit_chain, name="audit-chain"),
    path("audit/<slug:tenant_id>/rows/", audit.audit_rows, name="audit-rows"),
    path("audit/<slug:tenant_id>/decisions/", audit.audit_decisions, name="audit-decisions"),
    path("audit/<slug:tenant_id>/decisions/rows/", audit.audit_decision_rows, name="audit-decision-rows"),
    path("audit/<slug:tenant_id>/events/<int:seq>/", audit.audit_event_view, name="audit-event"),
    path("audit/<slug:tenant_id>/checkpoints/", audit.audit_checkpoints_view, name="audit-checkpoints"),
    path("audit/<slug:tenant_id>/verify/", audit.audit_verify_view, name="audit-verify"),
    path("audit/<slug:tenant_id>/export/", audit.audit_export_view, name="audit-export"),
    path("webhooks/", notifications.webhooks, name="webhooks"),
    path("webhooks/register/", notifications.webhook_register, name="webhook-register"),
    path("webhooks/<int:pk>/edit/", notifications.webhook_edit, name="webhook-edit"),
    path("webhooks/<int:pk>/rotate/", notifications.webhook_rotate, name="webhook-rotate"),
    path("webhooks/<int:pk>/enable/", notifications.webhook_enable, name="webhook-enable"),
    path("webhooks/<int:pk>/delete/", notifications.webhook_delete, name="webhook-delete"),
    path("webhooks/<int:pk>/test/", notifications.webhook_test, name="webhook-test"),
    path("webhooks/deliveries/<int:pk>/", notifications.webhook_delivery, name="webhook-delivery"),
    path(
        "webhooks/deliveries/<int:pk>/redeliver/", notifications.webhook_redeliver, name="webhook-redeliver"
    ),
    path("slack/link/", slack.link_page, name="slack-link"),
    path("people/", tenants.people, name="people"),
    path("people/<slug:tenant_id>/add/", tenants.person_add, name="person-add"),
    path("people/<slug:tenant_id>/invite/", tenants.person_invite, name="person-invite"),
    path("people/<slug:tenant_id>/<int:user_id>/role/", tenants.person_role, name="person-role"),
    path(
        "people/<slug:tenant_id>/<int:user_id>/deactivate/",
        tenants.person_deactivate,
        name="person-deactivate",
    ),
    path("keys/", tenants.api_keys, name="api-keys"),
    path("keys/<slug:tenant_id>/create/", tenants.api_key_create_view, name="api-key-create"),
    path("keys/<slug:tenant_id>/<int:key_id>/revoke/", tenants.api_key_revoke_view, name="api-key-revoke"),
    path("invite/<str:token>/", tenants.invitation, name="invitation"),
    path("link/<str:token>/", link_views.decision_link, name="decision-link"),
]
