"""URL map: the console pages, the REST API under /api/v1/, /metrics, and the admin."""

from django.contrib import admin
from django.urls import include, path

from keelgate_site.metrics import metrics_view

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include("keelgate_site.api_urls")),
    path("metrics", metrics_view, name="metrics"),
    path("", include("keelgate_site.console_urls")),
]
