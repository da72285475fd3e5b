"""URL map: the console pages, the REST API under /api/v1/, and the admin."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include("keelgate_site.api_urls")),
    path("", include("keelgate_site.console_urls")),
]
