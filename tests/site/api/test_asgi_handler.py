"""The ASGI application enters Django's sync middleware chain once per request."""

from __future__ import annotations

import json

import asgiref.sync
import pytest

from .._asgi import asgi_get


@pytest.fixture
def hops(monkeypatch):
    """Counts sync_to_async calls: each one is a trip to a worker thread and back."""
    calls = []
    real = asgiref.sync.SyncToAsync.__call__

    async def counted(self, *args, **kwargs):
        calls.append(getattr(self.func, "__qualname__", repr(self.func)))
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(asgiref.sync.SyncToAsync, "__call__", counted)
    return calls


def test_an_api_request_runs_every_middleware_and_the_view_in_one_thread_hop(hops):
    from keelgate_site.asgi import application

    response = asgi_get(application, "/api/v1/no-such-endpoint")

    assert response["status"] == 404
    assert json.loads(response["body"])["code"] == "not_found"
    # The middleware still ran: the security middleware's and clickjacking's headers.
    assert response["headers"]["x-content-type-options"] == "nosniff"
    assert response["headers"]["x-frame-options"] == "DENY"
    # Django's own handler takes two hops per middleware (eight of them) and one for
    # the view; this one enters the chain once, and closes the response once.
    assert hops.count("BaseHandler.get_response") == 1
    assert len(hops) <= 3, hops


def test_the_served_app_freezes_what_it_loaded_at_startup() -> None:
    """Daphne's process takes its startup heap out of the collector's walks (``gc.freeze``)."""
    import gc

    import keelgate_site.asgi  # noqa: F401

    assert gc.get_freeze_count() > 10_000
