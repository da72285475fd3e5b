"""URL map: the console pages, the REST API under /api/v1/, /metrics, Slack's requests, and the admin."""

from django.contrib import admin
from django.urls import include, path

from keelgate_site.metrics import metrics_view
from notifications.slack import endpoints as slack

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include("keelgate_site.api_urls")),
    path("metrics", metrics_view, name="metrics"),
    path("slack/interactions/", slack.interactions, name="slack-interactions"),
    path("slack/commands/", slack.commands, name="slack-commands"),
    path("", include("keelgate_site.console_urls")),
]
