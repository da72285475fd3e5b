"""WSGI entry point (the console is served by Daphne over ASGI; this is for tools)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "keelgate_site.settings")
application = get_wsgi_application()
