"""Slack's two doors, and the console's page for linking.

- ``POST /slack/interactions/``: a button click. Checked (signature and age, by the
  workspace the payload names), recorded (:func:`.interactions.click_record`) and
  answered 200 at once; decided afterwards by ``keelgate_notify``. A Deny… or a
  high-impact call's Approve… click opens a form instead (:mod:`.modals`); the form's
  submission is recorded as a click is.
- ``POST /slack/commands/``: the slash command ``/keelgate link CODE`` (and ``unlink``,
  ``help``). Checked the same way; answered with a message only the sender sees.
- ``/slack/link/``: the console page where a person makes a one-time code.

Slack's requests carry no CSRF token (they are signed instead), so the two doors are
exempt; anything unsigned, forged, replayed or malformed gets a clear 4xx in JSON with
a stable ``code``, never a 500, and nothing is recorded.
"""

from __future__ import annotations

import logging
from urllib.parse import parse_qs

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods, require_POST

from notifications.models import SlackLink, SlackWorkspace
from notifications.slack import signing
from notifications.slack.blocks import card_url
from notifications.slack.interactions import (
    Click,
    FormIncomplete,
    PayloadInvalid,
    allowed_reply_url,
    click_of,
    click_record,
    payload_of,
    team_of,
)
from notifications.slack.links import LinkRefused, link_by_code, link_code_create, unlink
from notifications.slack.modals import form_open
from notifications.slack.replies import ephemeral
from sitekit.pages import console_page
from tenants.models import Tenant
from tenants.selectors import memberships

log = logging.getLogger("keelgate.slack")

MAX_BODY = 64 * 1024

WORDS = {
    signing.SIGNATURE_INVALID: "The request is not signed by a registered Slack workspace.",
    signing.REQUEST_TOO_OLD: "The request's timestamp is more than five minutes away: refused as a replay.",
    signing.SECRET_MISSING: "The workspace's signing secret is not configured on this server.",
}


def _error(code: str, message: str, status: int) -> JsonResponse:
    return JsonResponse({"code": code, "message": message}, status=status)


def _checked(request: HttpRequest, team_id: str) -> SlackWorkspace | JsonResponse:
    """The enabled workspace ``team_id`` if the request is signed by it; else the 401 (or 503)."""
    workspace = SlackWorkspace.objects.select_related("tenant").filter(team_id=team_id, enabled=True).first()
    try:
        reason = (
            signing.SIGNATURE_INVALID
            if workspace is None
            else signing.refusal(workspace, request.body, request.headers)
        )
    except ImportError:  # the site was installed without the slack extra
        return _error("slack_unavailable", "Slack support is not installed (the slack extra).", 503)
    if reason is None and workspace is not None:
        return workspace
    log.warning("slack: a request was refused (%s)", reason)
    status = 503 if reason == signing.SECRET_MISSING else 401
    return _error(str(reason), WORDS[str(reason)], status)


@csrf_exempt
@require_POST
def interactions(request: HttpRequest) -> HttpResponse:
    """A verified click is recorded and answered 200 at once (Slack's retry of it: 200, recorded once)."""
    if len(request.body) > MAX_BODY:
        return _error("payload_too_large", "The body is larger than an interaction.", 413)
    try:
        payload = payload_of(request.body)
        workspace = _checked(request, team_of(payload))
        if isinstance(workspace, JsonResponse):
            return workspace
        click = click_of(payload)
    except PayloadInvalid as exc:
        return _error(exc.code, exc.message, 400)
    except FormIncomplete as exc:  # Slack keeps the form open and shows these under its fields
        return JsonResponse({"response_action": "errors", "errors": exc.errors})
    if click is None:
        return HttpResponse(status=200)
    if click.form is not None:
        _form(workspace, click)
        return HttpResponse(status=200)
    click_record(workspace, click)
    return HttpResponse(status=200)


def _form(workspace: SlackWorkspace, click: Click) -> None:
    """Open the form the click asks for; if Slack would not, tell the clicker where to decide instead."""
    assert click.form is not None
    problem = form_open(
        workspace, click.form, trigger_id=click.trigger_id, value=click.value, reply_to=click.response_url
    )
    if problem and click.response_url and allowed_reply_url(click.response_url):
        approval_id = int(click.value.partition(":")[0])
        ephemeral(
            click.response_url,
            f"Nothing was decided: the form could not be opened ({problem})."
            f" Decide in the Keelgate console: {card_url('approval', approval_id)}",
        )


@csrf_exempt
@require_POST
def commands(request: HttpRequest) -> HttpResponse:
    """``/keelgate link CODE``, ``/keelgate unlink``, ``/keelgate help``: answered to the sender only."""
    if len(request.body) > MAX_BODY:
        return _error("payload_too_large", "The body is larger than a command.", 413)
    try:
        form = {k: v[0] for k, v in parse_qs(request.body.decode("utf-8"), max_num_fields=30).items()}
    except (UnicodeDecodeError, ValueError):
        return _error("payload_invalid", "The body is not a form.", 400)
    team_id, slack_user = form.get("team_id", ""), form.get("user_id", "")
    if not team_id or not slack_user:
        return _error("payload_invalid", "The command names no team or user.", 400)
    workspace = _checked(request, team_id)
    if isinstance(workspace, JsonResponse):
        return workspace
    words = form.get("text", "").split()
    verb = words[0].lower() if words else "help"
    if verb == "link" and len(words) == 2:
        try:
            user = link_by_code(workspace=workspace, slack_user=slack_user, code=words[1])
        except LinkRefused as exc:
            return _ephemeral(f"Not linked: {exc}")
        return _ephemeral(f"Linked: in {workspace.tenant.slug} you now act as {user.get_username()}.")
    if verb == "unlink":
        gone = unlink(workspace=workspace, slack_user=slack_user, actor=f"slack:{slack_user}")
        return _ephemeral("Unlinked." if gone else "You were not linked.")
    if verb == "help":
        return _ephemeral(
            "`/keelgate link CODE` links you to your Keelgate user (the code is on the console's Slack"
            " page); `/keelgate unlink` removes the link."
        )
    return _error("unknown_command", "Keelgate knows link, unlink and help.", 400)


def _ephemeral(text: str) -> JsonResponse:
    return JsonResponse({"response_type": "ephemeral", "text": text})


@require_http_methods(["GET", "POST"])
@console_page
def link_page(request: HttpRequest) -> HttpResponse:
    """Each of the person's tenants with a Slack workspace, whether they are linked, and a code to link."""
    mine = memberships(request)
    workspaces = list(
        SlackWorkspace.objects.filter(tenant__slug__in=list(mine), enabled=True).select_related("tenant")
    )
    linked = {
        link.workspace_id: link.slack_user
        for link in SlackLink.objects.filter(workspace__in=workspaces, user_id=int(request.user.pk or 0))
    }
    code, code_tenant = "", ""
    if request.method == "POST":
        slug = request.POST.get("tenant", "")
        tenant = Tenant.objects.filter(slug=slug, slack_workspaces__in=workspaces).first()
        if tenant is not None:
            code, code_tenant = link_code_create(tenant=tenant, user=request.user), tenant.slug
    rows = [(w, linked.get(w.pk, "")) for w in workspaces]
    return render(
        request, "notifications/slack_link.html", {"rows": rows, "code": code, "code_tenant": code_tenant}
    )
