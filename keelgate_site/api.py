"""The REST API at ``/api/v1/``: one NinjaAPI, three routers, and how errors look.

Every error is JSON ``{"code": ..., "detail": ...}``: ``code`` is stable, ``detail``
is the fixed wording of the code plus, for Keelgate errors, their trusted detail (an
id, a field name, who decided). Domain errors become HTTP responses in one handler:
each error class carries its status (``http_status``, inherited along the engine's
tree and the site's, ``sitekit.errors``). A 500 is only ever a bug: it is logged with
its traceback and answered with fixed wording, never the exception's text.
"""

from __future__ import annotations

import functools
import logging
import re
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError

from approvals.api import router as approvals_router
from audit.api import router as audit_router
from keelgate.errors import KeelgateError
from runs.api import router as runs_router
from sitekit.api import PydanticJSONRenderer, validation_words
from sitekit.errors import RateLimitedError
from sitekit.pages import CONTENT_SECURITY_POLICY, hardened
from tenants.api_auth import API_AUTH

logger = logging.getLogger("keelgate.api")

INVALID_INPUT = "The request is invalid"
MALFORMED_BODY = "The request body is not valid JSON."
BODY_TOO_LARGE = "The request body is too large."
UNAUTHENTICATED = "Authenticate with 'Authorization: Bearer <API key>' or a session cookie."
NOT_FOUND = "Not found."
METHOD_NOT_ALLOWED = "This path does not take that method; see the Allow header."
INTERNAL = "Keelgate failed to handle the request; the error was logged."

DOCS_CONTENT_SECURITY_POLICY = CONTENT_SECURITY_POLICY.replace("img-src 'self'", "img-src 'self' data:")
"""The console's policy, plus ``data:`` images: Swagger UI's stylesheet draws its icons so."""


def docs_page(view: Any) -> Any:
    """The docs page and the OpenAPI document: Swagger UI from this site ("ninja" app), CSP-clean."""

    @functools.wraps(view)
    def with_policy(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        response: HttpResponse = view(request, *args, **kwargs)
        response["Content-Security-Policy"] = DOCS_CONTENT_SECURITY_POLICY
        return response

    return hardened(with_policy)


api = NinjaAPI(
    title="Keelgate API",
    version="1",
    description=(
        "Drive Keelgate runs, approvals, reconciliation and the audit chain.\n\n"
        "**Authentication**: `Authorization: Bearer <API key>` (create one with "
        "`manage.py create_api_key --tenant T --user U`, or in the admin); a key acts in its "
        "own tenant as its user, with that user's role. Browsers may use their session "
        "instead (unsafe methods need the `X-CSRFToken` header); a session user in several "
        "tenants names one with `?tenant=`.\n\n"
        '**Errors** are `{"code": ..., "detail": ...}` with a stable code. Another '
        "tenant's objects are absent (404 `not_found`). Each key is rate limited (429 "
        "`rate_limited` with `Retry-After`)."
    ),
    urls_namespace="api-v1",
    docs_url="/docs",
    docs_decorator=docs_page,
    openapi_url="/openapi.json",
    auth=API_AUTH,
    renderer=PydanticJSONRenderer(),
)


def _error(request: HttpRequest, status: int, code: str, detail: str) -> HttpResponse:
    return api.create_response(request, {"code": code, "detail": detail}, status=status)


@api.exception_handler(KeelgateError)
def keelgate_error(request: HttpRequest, exc: KeelgateError) -> HttpResponse:
    """Every domain error, with the status its class carries (none: a bug, 500)."""
    if exc.http_status is None:
        return unexpected_error(request, exc)
    detail = f"{exc.message} ({exc.detail})" if exc.detail else exc.message
    response = _error(request, exc.http_status, exc.code, detail)
    if isinstance(exc, RateLimitedError):
        response["Retry-After"] = str(exc.retry_after)
    return response


def _field(loc: Any) -> str:
    # ninja puts the source first and, for bodies, the parameter name second:
    # ("body", "payload", "goal") names the field body.goal.
    parts = [str(p) for p in (loc or ())]
    if len(parts) >= 2 and parts[0] == "body":
        parts = ["body", *parts[2:]]
    return ".".join(parts)[:120] or "request"


@api.exception_handler(ValidationError)
def validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    """Wrong types, missing or unknown fields, values out of range: 422 naming the fields."""
    problems = [f"{_field(error.get('loc'))}: {validation_words(error)}" for error in exc.errors[:10]]
    return _error(request, 422, "invalid_input", f"{INVALID_INPUT}: {'; '.join(problems)}.")


@api.exception_handler(AuthenticationError)
def authentication_error(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    """No key, a wrong or revoked key, no session."""
    response = _error(request, 401, "unauthenticated", UNAUTHENTICATED)
    response["WWW-Authenticate"] = "Bearer"
    return response


@api.exception_handler(HttpError)
def http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    """Ninja's own refusals: the one it raises today is 400 for a body that is not JSON."""
    if exc.status_code == 400:
        return _error(request, 400, "malformed_body", MALFORMED_BODY)
    if exc.status_code == 401:
        return authentication_error(request, AuthenticationError())
    if 400 <= exc.status_code < 500:
        return _error(request, exc.status_code, f"http_{exc.status_code}", "The request was refused.")
    return unexpected_error(request, exc)


@api.exception_handler(RequestDataTooBig)
def body_too_large(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    """A body over ``DATA_UPLOAD_MAX_MEMORY_SIZE``."""
    return _error(request, 413, "body_too_large", BODY_TOO_LARGE)


@api.exception_handler(Http404)
def not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
    """Django's Http404, worded as the API's own not_found."""
    return _error(request, 404, "not_found", NOT_FOUND)


@api.exception_handler(Exception)
def unexpected_error(request: HttpRequest, exc: Exception) -> HttpResponse:
    """The last resort: a bug. Logged with its traceback; the answer says nothing of it."""
    logger.error("api.unexpected_error %s %s", request.method, request.path, exc_info=exc)
    return _error(request, 500, "internal_error", INTERNAL)


def guarded(urls: Any) -> Any:
    """``api.urls`` answering two things in the API's own error shape, which ninja does not:

    - a query parameter the operation does not declare is 422 ``invalid_input`` (ninja
      ignores it, so a typo such as ``?stauts=pending`` would silently list everything);
    - a known path with another method is a JSON 405 (ninja answers a bare one).
    """
    patterns, app_name, namespace = urls
    for pattern in patterns:
        pattern.callback = _guard(pattern.callback)
    return patterns, app_name, namespace


@functools.cache
def _declared_query() -> dict[tuple[str, str], frozenset[str]]:
    """Each operation's query parameters, from the API's own OpenAPI document."""
    declared = {}
    for path, operations in api.get_openapi_schema()["paths"].items():
        for method, operation in operations.items():
            names = {p["name"] for p in operation.get("parameters", []) if p.get("in") == "query"}
            declared[(path, method.upper())] = frozenset(names)
    return declared


def _unknown_query(request: HttpRequest) -> list[str]:
    match = request.resolver_match
    if match is None or not request.GET:
        return []
    path = "/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", match.route)
    declared = _declared_query().get((path, request.method or ""))
    if declared is None:
        return []
    return sorted(set(request.GET) - declared)


def _guard(view: Any) -> Any:
    @functools.wraps(view)  # keeps csrf_exempt and ninja's markers
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        unknown = _unknown_query(request)
        if unknown:
            names = ", ".join(re.sub(r"[^\w.-]", "?", name[:40]) for name in unknown[:5])
            return _error(request, 422, "invalid_input", f"{INVALID_INPUT}: unknown query parameter {names}.")
        response = view(request, *args, **kwargs)
        if response.status_code == 405 and not response.get("Content-Type", "").startswith(
            "application/json"
        ):
            allowed = response.get("Allow", "")
            response = JsonResponse({"code": "method_not_allowed", "detail": METHOD_NOT_ALLOWED}, status=405)
            response["Allow"] = allowed
        return response

    return wrapper


def api_not_found(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
    """Any other path under /api/v1/: the same JSON 404 (Django would answer HTML)."""
    return JsonResponse({"code": "not_found", "detail": NOT_FOUND}, status=404)


api.add_router("", runs_router)
api.add_router("", approvals_router)
api.add_router("", audit_router)
