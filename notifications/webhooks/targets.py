"""Where a webhook may go: http(s) only, and only to public addresses unless settings allow more.

A tenant chooses its webhook URL, so without this guard it could make the server call
its own loopback services, the cloud metadata address (169.254.169.254) or the private
network behind it (SSRF). The host is resolved and *every* address it resolves to must
be allowed; the check runs when an endpoint is registered and again before each attempt
(DNS can change in between), and the request then goes to the address that was checked,
so a second lookup cannot swap it (DNS rebinding).
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings

from sitekit.errors import WebhookUrlRefusedError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class Target:
    """A webhook URL taken apart: what to connect to and what to ask for."""

    scheme: str
    host: str
    """The hostname (no brackets for IPv6), sent as ``Host`` and as TLS server name."""
    port: int
    path: str
    """The path and query, ``/`` if empty."""


def parse_url(url: str) -> Target:
    """The URL's parts; WebhookUrlRefusedError if it is not a plain http(s) URL with a host."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise WebhookUrlRefusedError("not a valid URL") from exc
    if parts.scheme not in ("http", "https"):
        raise WebhookUrlRefusedError("only http and https URLs are allowed")
    if not parts.hostname:
        raise WebhookUrlRefusedError("the URL has no host")
    if parts.username is not None or parts.password is not None:
        raise WebhookUrlRefusedError("credentials in the URL are not allowed")
    path = parts.path or "/"
    if parts.query:
        path = f"{path}?{parts.query}"
    return Target(
        scheme=parts.scheme,
        host=parts.hostname,
        port=port or (443 if parts.scheme == "https" else 80),
        path=path,
    )


def resolve(target: Target) -> list[IPAddress]:
    """The host's addresses, all of them allowed; WebhookUrlRefusedError if any is not."""
    try:
        infos = socket.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise WebhookUrlRefusedError("the host does not resolve") from exc
    addresses: list[IPAddress] = []
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if address not in addresses:
            addresses.append(address)
    for address in addresses:
        reason = refusal(address)
        if reason:
            raise WebhookUrlRefusedError(f"{reason} address {address} is not allowed")
    if not addresses:
        raise WebhookUrlRefusedError("the host does not resolve")
    return addresses


def check_url(url: str) -> tuple[Target, list[IPAddress]]:
    """Parse and resolve ``url``; the one check registration and delivery both make."""
    target = parse_url(url)
    return target, resolve(target)


def refusal(address: IPAddress) -> str:
    """Why ``address`` may not receive webhooks (a kind of address), or "" if it may."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if any(address in network for network in _allowed_networks()):
        return ""
    kind = _kind(address)
    if kind and getattr(settings, "KEELGATE_WEBHOOK_ALLOW_PRIVATE", False):
        return ""
    return kind


def _kind(address: IPAddress) -> str:
    for kind, test in (
        ("an unspecified", address.is_unspecified),
        ("a loopback", address.is_loopback),
        ("a link-local", address.is_link_local),
        ("a multicast", address.is_multicast),
        ("a private", address.is_private),
        ("a reserved", address.is_reserved),
        ("a non-public", not address.is_global),
    ):
        if test:
            return kind
    return ""


def _allowed_networks() -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    names = getattr(settings, "KEELGATE_WEBHOOK_ALLOWED_NETWORKS", [])
    return [ipaddress.ip_network(name.strip(), strict=False) for name in names]
