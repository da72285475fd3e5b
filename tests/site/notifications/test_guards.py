"""Guards: a hanging receiver is cut off at the timeout; private addresses, odd schemes refused (SSRF)."""

from __future__ import annotations

import ipaddress
import socket
import threading
import time

import pytest

from audit.wiring import audit_log
from notifications.models import WebhookAttempt, WebhookDelivery, WebhookEndpoint
from notifications.webhooks import deliver_due
from notifications.webhooks.services import webhook_endpoint_register
from notifications.webhooks.targets import Target, check_url, refusal
from notifications.webhooks.transport import post
from sitekit.errors import WebhookUrlRefusedError
from tenants.models import Tenant
from tests.site.notifications._receiver import hang


def append_event(run_id: str = "r1") -> None:
    audit_log().append(
        "t1",
        actor="keelgate:reminders",
        kind="approval.expiring",
        body={"run_id": run_id, "action_id": "1-2", "tool": "place_order", "expires_at": "2030-01-01"},
    )


def register(url: str, receiver=None):
    endpoint, secret = webhook_endpoint_register(tenant=Tenant.objects.get(slug="t1"), url=url, actor="test")
    if receiver is not None:
        receiver.secret = secret
    return endpoint


# -- timeout ------------------------------------------------------------------------------


def test_a_receiver_that_hangs_is_cut_off_at_the_timeout(operator, settings, receivers):
    """The receiver sleeps 10 s; the attempt ends after about 1 s as 'timed out' and is retried later."""
    settings.KEELGATE_WEBHOOK_TIMEOUT_SECONDS = 1.0
    receiver = receivers(policy=hang(10))
    register(receiver.url, receiver)
    append_event()
    started = time.monotonic()
    deliver_due()
    took = time.monotonic() - started
    assert 0.9 <= took < 3.0
    attempt = WebhookAttempt.objects.get()
    assert attempt.status_code is None and attempt.error == "timed out after 1s"
    assert 900 <= attempt.duration_ms < 3000
    delivery = WebhookDelivery.objects.get()
    assert (delivery.status, delivery.last_error) == ("pending", "timed out after 1s")
    assert len(receiver.requests) == 1


def test_a_receiver_that_drips_its_answer_is_cut_off_too(settings):
    """Socket timeouts bound each read; a byte every 0.3 s would never trip them. The deadline does."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    stop = threading.Event()

    def drip() -> None:
        conn, _ = server.accept()
        conn.recv(65536)
        for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 100:
            if stop.is_set():
                break
            try:
                conn.sendall(bytes([byte]))
            except OSError:
                break
            time.sleep(0.3)
        conn.close()

    thread = threading.Thread(target=drip, daemon=True)
    thread.start()
    try:
        started = time.monotonic()
        response = post(
            Target("http", "127.0.0.1", port, "/"), ipaddress.ip_address("127.0.0.1"), b"{}", {}, 1.0
        )
        took = time.monotonic() - started
    finally:
        stop.set()
        server.close()
    assert response.status is None and response.error == "timed out after 1s"
    assert took < 2.0


# -- SSRF -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://10.1.2.3/hook", "a private address 10.1.2.3"),
        ("http://169.254.169.254/latest/meta-data/", "a link-local address 169.254.169.254"),
        ("http://[::1]:8080/hook", "a loopback address ::1"),
        ("http://[::ffff:10.0.0.1]/hook", "a private address ::ffff:a00:1"),  # IPv4-mapped
        ("http://192.168.1.1/", "a private address"),
        ("http://0.0.0.0/", "an unspecified address"),
        ("http://224.0.0.1/", "a multicast address"),
        ("http://100.64.0.1/", "address 100.64.0.1 is not allowed"),
        ("file:///etc/passwd", "only http and https"),
        ("ftp://example.com/x", "only http and https"),
        ("gopher://127.0.0.1:6379/_INFO", "only http and https"),
        ("http://user:pw@127.0.0.1/x", "credentials"),
        ("http:///nohost", "no host"),
        ("http://127.0.0.1:99999/", "not a valid URL"),
    ],
)
def test_urls_to_private_addresses_and_other_schemes_are_refused(url, reason):
    """Only http(s) to allowed addresses: 10.x, the metadata address, [::1] (only 127/8 is allowed), file://."""
    with pytest.raises(WebhookUrlRefusedError) as refused:
        check_url(url)
    assert reason in refused.value.detail
    assert refused.value.code == "webhook_url_refused" and refused.value.http_status == 422


def test_ipv4_loopback_is_allowed_only_because_these_tests_allow_it(settings):
    """127.0.0.0/8 is in the tests' allow-list; without it loopback is refused; ALLOW_PRIVATE opens all."""
    assert refusal(ipaddress.ip_address("127.0.0.1")) == ""
    settings.KEELGATE_WEBHOOK_ALLOWED_NETWORKS = []
    assert refusal(ipaddress.ip_address("127.0.0.1")) == "a loopback"
    with pytest.raises(WebhookUrlRefusedError):
        check_url("http://127.0.0.1:9/x")
    settings.KEELGATE_WEBHOOK_ALLOW_PRIVATE = True
    assert refusal(ipaddress.ip_address("10.0.0.1")) == ""
    assert refusal(ipaddress.ip_address("8.8.8.8")) == ""


def test_a_public_address_passes_and_the_url_keeps_its_path_and_query():
    """A public address passes; a URL is taken apart into host, port and path with its query."""
    assert refusal(ipaddress.ip_address("93.184.215.14")) == ""
    target, addresses = check_url("http://127.0.0.1:8080/a?b=c")
    assert (target.host, target.port, target.path) == ("127.0.0.1", 8080, "/a?b=c")
    assert addresses == [ipaddress.ip_address("127.0.0.1")]


def test_registration_refuses_a_private_url_and_stores_nothing(operator):
    """The service refuses before writing: no endpoint, no audit event."""
    with pytest.raises(WebhookUrlRefusedError):
        register("http://10.0.0.5/hook")
    assert not WebhookEndpoint.objects.exists()


def test_delivery_checks_the_address_again_and_refuses_without_calling(operator, settings, receivers):
    """Allowed at registration, refused later (settings or DNS changed): a failed attempt, no request made."""
    receiver = receivers()
    register(receiver.url, receiver)
    append_event()
    settings.KEELGATE_WEBHOOK_ALLOWED_NETWORKS = []
    deliver_due()
    attempt = WebhookAttempt.objects.get()
    assert attempt.status_code is None and attempt.error.startswith("refused: a loopback address 127.0.0.1")
    assert not receiver.requests
    settings.KEELGATE_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    WebhookDelivery.objects.update(next_attempt_at=WebhookDelivery.objects.get().created_at)
    deliver_due()
    assert len(receiver.acknowledged()) == 1


def fake_dns(monkeypatch, answers: dict[str, list[str]]) -> None:
    """Answer these names from a table (no DNS server here), everything else as before."""
    real = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        if host in answers:
            return [
                (socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port))
                for a in answers[host]
            ]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


def test_a_name_with_one_private_address_among_allowed_ones_is_refused(monkeypatch):
    """Every address must be allowed: one private answer among loopback ones refuses the name."""
    fake_dns(monkeypatch, {"mixed.example.test": ["127.0.0.1", "10.0.0.7"]})
    with pytest.raises(WebhookUrlRefusedError) as refused:
        check_url("https://mixed.example.test/hook")
    assert "10.0.0.7" in refused.value.detail


def test_the_request_goes_to_the_checked_address_with_the_name_as_host(operator, monkeypatch, receivers):
    """A name resolved once is connected to at that address; the receiver sees the name in ``Host``."""
    receiver = receivers()
    fake_dns(monkeypatch, {"hooks.example.test": ["127.0.0.1"]})
    port = receiver.server.server_address[1]
    register(f"http://hooks.example.test:{port}/in", receiver)
    append_event()
    deliver_due()
    (request,) = receiver.acknowledged()
    assert request.headers["host"] == f"hooks.example.test:{port}" and request.verified
