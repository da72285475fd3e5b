"""The REST API under /api/v1/ (see keelgate_site/api.py), and a JSON 404 for any other path in it."""

from django.urls import path, re_path
from django.views.decorators.csrf import csrf_exempt

from keelgate_site.api import api, api_not_found, guarded

urlpatterns = [
    path("", guarded(api.urls)),
    # Last: a path no operation matches is still answered in the API's JSON error shape, a
    # path with a newline too (a tile's path: ``.`` alone stops at one).
    re_path(r"^[\s\S]*$", csrf_exempt(api_not_found)),
]
