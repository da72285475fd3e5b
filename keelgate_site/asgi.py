"""ASGI entry point: HTTP through Django, websockets through Channels.

The console's static files (htmx and its websocket extension, the stylesheet) are
served by Django itself: the product runs as one Daphne process with no CDN and no
front web server in the embedded setup.
"""

import gc
import ipaddress
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import django
from asgiref.sync import sync_to_async
from django.apps import apps
from django.conf import settings
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler
from django.http import HttpResponseBase
from django.urls import set_script_prefix

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "keelgate_site.settings")


class OneHopASGIHandler(ASGIHandler):
    """Django's ASGI handler, with a request's sync work done in one thread hop.

    Every view of the site is sync. Django's ASGI handler runs the middleware in async
    mode, and a sync hook of a middleware (all of Django's own) then goes to a thread
    and back: two thread hops per middleware, and one more for the view, per request;
    the ``request_started`` signal and the response's close (``request_finished``,
    which gives the database connection back) take one each. This handler does what a
    WSGI server does, in one call: the signal, the request, the sync middleware chain
    and the view, and for a response
    held in memory its close; only a streaming response is closed after it was sent.
    The same middleware, views and signals run, in the order a WSGI server runs them.
    A client that leaves mid-request is not watched for: a sync view cannot be
    interrupted anyway, and its answer goes to a closed connection.

    The call goes to the event loop's thread pool, as to a WSGI server's worker
    threads: Django's handler gives each request a thread-sensitive context, which
    started a thread for every request and joined it after. Nothing of a request needs
    a thread of its own across calls any more: its database connection is borrowed and
    given back inside the one call. Thread hops were most of a small request's CPU
    (docs/performance.md#one-hop-asgi).
    """

    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=False)
        threads = settings.KEELGATE_WEB_THREADS
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="request") if threads > 0 else None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        await self.handle(scope, receive, send)

    async def handle(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        set_script_prefix(settings.FORCE_SCRIPT_NAME or scope.get("root_path", "") or "")
        try:
            response = await sync_to_async(self._respond, thread_sensitive=False, executor=self._pool)(
                scope, body_file
            )
            try:
                await self.send_response(response, send)
            finally:
                if response.streaming:
                    await sync_to_async(response.close, thread_sensitive=False)()
        finally:
            body_file.close()

    def _respond(self, scope: dict[str, Any], body_file: Any) -> HttpResponseBase:
        signals.request_started.send(sender=self.__class__, scope=scope)
        request, error_response = self.create_request(scope, body_file)
        if request is None:  # Django's own answer to a request it cannot read (400, 413)
            assert error_response is not None
            response: HttpResponseBase = error_response
        else:
            response = self.get_response(request)
        if not response.streaming:
            response.close()  # request_finished: the request's connection goes back now
        return response


django.setup(set_prefix=False)
django_asgi_app = OneHopASGIHandler()

# These imports need Django set up first.
from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402
from django.urls import get_resolver, path  # noqa: E402

from approvals.consumers import InboxConsumer  # noqa: E402

websocket_urlpatterns = [
    path("ws/inbox/", InboxConsumer.as_asgi()),
]


def _to_loopback(scope: dict[str, Any]) -> bool:
    server = scope.get("server")
    if not server:
        return True
    try:
        return ipaddress.ip_address(str(server[0]).strip("[]")).is_loopback
    except ValueError:  # a Unix socket: only this machine can open it
        return True


def loopback_only(app: Any) -> Any:
    """With DEBUG on, answer only connections made to a loopback address of this machine.

    DEBUG pages show settings and URL patterns; a development server bound to 0.0.0.0
    by mistake still shows them to no one else (HTTP 403, websockets closed).
    """
    if not settings.DEBUG:
        return app

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket") and not _to_loopback(scope):
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})
                return
            headers = [(b"content-type", b"text/plain")]
            await send({"type": "http.response.start", "status": 403, "headers": headers})
            await send({"type": "http.response.body", "body": b"DEBUG is on: loopback only.\n"})
            return
        await app(scope, receive, send)

    return guarded


def with_mcp(app: Any) -> Any:
    """``/mcp/`` to the MCP gateway (``mcp_gateway.server``) when it is installed; the rest to ``app``."""
    if not apps.is_installed("mcp_gateway"):
        return app
    from mcp_gateway.server import McpEndpoint

    endpoint = McpEndpoint()

    async def route(scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        if path == "/mcp" or path.startswith("/mcp/"):
            await endpoint(scope, receive, send)
        else:
            await app(scope, receive, send)

    return route


application = ProtocolTypeRouter(
    {
        "http": with_mcp(ASGIStaticFilesHandler(django_asgi_app)),
        # The session cookie authenticates the socket; the Origin check stops another
        # site's page from opening it with the operator's cookies (cross-site hijacking).
        "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
application = loopback_only(application)


def _freeze_startup_heap() -> None:
    """Take what the process loaded at startup out of the garbage collector's sight.

    Django, ninja, pydantic and the URL map are a heap of objects that live as long as
    the process, and every full collection walked all of them again, in the middle of
    some request, which showed in the tail latency. Frozen (``gc.freeze``), they are no
    longer walked (docs/performance.md#frozen-heap).
    """
    get_resolver().url_patterns  # noqa: B018  (imports every view and the API now, not at the first request)
    gc.collect()
    gc.freeze()


_freeze_startup_heap()
