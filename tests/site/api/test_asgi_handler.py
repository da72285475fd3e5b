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
    # Django's own handler takes two hops per middleware (eight of them), one for the
    # view, one for the request_started signal and one to close the response; this one
    # does all of it in one.
    assert hops == ["OneHopASGIHandler._respond"], hops


def test_the_request_signals_fire_once_each_in_the_requests_thread():
    """request_started and request_finished (the connection goes back) run once, in the view's thread."""
    import threading

    from django.core import signals

    from keelgate_site.asgi import application

    seen: list[tuple[str, int]] = []

    def started(**kwargs):  # type: ignore[no-untyped-def]
        seen.append(("started", threading.get_ident()))

    def finished(**kwargs):  # type: ignore[no-untyped-def]
        seen.append(("finished", threading.get_ident()))

    signals.request_started.connect(started)
    signals.request_finished.connect(finished)
    try:
        asgi_get(application, "/api/v1/no-such-endpoint")
        asgi_get(application, "/api/v1/no-such-endpoint")
    finally:
        signals.request_started.disconnect(started)
        signals.request_finished.disconnect(finished)
    assert [name for name, _ in seen] == ["started", "finished", "started", "finished"]
    assert len({thread for _, thread in seen[:2]}) == 1
    assert seen[0][1] != threading.get_ident()  # not the test's (the event loop's) thread


def test_the_served_app_freezes_what_it_loaded_at_startup() -> None:
    """Daphne's process takes its startup heap out of the collector's walks (``gc.freeze``)."""
    import gc

    import keelgate_site.asgi  # noqa: F401

    assert gc.get_freeze_count() > 10_000


def test_keelgate_web_threads_bounds_the_threads_requests_run_on(settings):
    """With ``KEELGATE_WEB_THREADS=2``, eight requests at once run on two threads of the
    handler's own pool; without it, on the event loop's default pool."""
    import asyncio
    import threading

    from django.core import signals

    from keelgate_site.asgi import OneHopASGIHandler

    from .._asgi import asgi_request

    def threads_of(handler: OneHopASGIHandler) -> set[str]:
        names: set[str] = set()

        def started(**kwargs):  # type: ignore[no-untyped-def]
            names.add(threading.current_thread().name)

        async def eight() -> None:
            await asyncio.gather(*(asgi_request(handler, "/api/v1/no-such-endpoint") for _ in range(8)))

        signals.request_started.connect(started)
        try:
            asyncio.run(eight())
        finally:
            signals.request_started.disconnect(started)
        return names

    settings.KEELGATE_WEB_THREADS = 2
    bounded = threads_of(OneHopASGIHandler())
    assert bounded and all(name.startswith("request") for name in bounded), bounded
    assert len(bounded) <= 2
    settings.KEELGATE_WEB_THREADS = 0
    default = threads_of(OneHopASGIHandler())
    assert default and not any(name.startswith("request") for name in default), default
