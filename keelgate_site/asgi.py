"""ASGI entry point: HTTP through Django, websockets through Channels.

The console's static files (htmx and its websocket extension, the stylesheet) are
served by Django itself: the product runs as one Daphne process with no CDN and no
front web server in the embedded setup.
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "keelgate_site.settings")
django_asgi_app = get_asgi_application()

# These imports need Django set up first.
from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402
from django.urls import path  # noqa: E402

from approvals.consumers import InboxConsumer  # noqa: E402

websocket_urlpatterns = [
    path("ws/inbox/", InboxConsumer.as_asgi()),
]

application = ProtocolTypeRouter(
    {
        "http": ASGIStaticFilesHandler(django_asgi_app),
        # The session cookie authenticates the socket; the Origin check stops another
        # site's page from opening it with the operator's cookies (cross-site hijacking).
        "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
