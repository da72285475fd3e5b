"""``python -m keelgate_site.web_process``: Daphne, its access log redacted, taking one
new connection per turn on a shared socket.

Several web processes share one listening socket (``keelgate_serve --web-processes N``).
Linux wakes every process waiting on it when a connection arrives, and Twisted's
listener then accepts up to a hundred in a row (more after a full batch), so the first
process to wake took every connection of a burst: one of two processes held every
keep-alive connection while the other idled, and two processes served no more than one
(docs/performance.md#accept). Accepting one connection per turn of the event
loop, the processes that are running take turns at a burst, and one busy with requests
comes back to accept later than an idle one; a frozen process takes none. Not always
evenly: a process hands a request's work to a thread and keeps turning, so an idle one
can still take most of a burst while the other is off the CPU (bench 6 prints the
busiest process's share; docs/performance.md#accept).

A process on a socket of its own (``-p``, ``-b``: one Daphne per port behind a proxy,
docs/deploy.md) shares no burst, so only a process given a socket (``--fd``) takes
one per turn; otherwise it accepts as Daphne does.

Otherwise this is Daphne's own command line (``python -m daphne``), flags included,
except that its access log never writes a credential: Daphne writes each request's
whole target (``GET /api/v1/runs?api_key=kg_...``) to stdout, so every line's path
passes through :func:`sitekit.logs.redact_url` first (the path and the parameter names
stay, credential values go; the function says why redacted and not cut). Run the site
with this module, never ``python -m daphne``.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from twisted.internet import tcp

from sitekit.logs import RedactingFilter, redact_url


def accept_one_per_turn() -> None:
    """Pin every listening port's accept batch (``Port.numberAccepts``) to one connection."""
    # Port assigns the attribute itself (100, then adapted after each batch): a property
    # on the class makes those assignments no-ops.
    tcp.Port.numberAccepts = property(lambda self: 1, lambda self, value: None)  # type: ignore[assignment]


def redacting_cli() -> Any:
    """Daphne's command line, its server's access log passed through ``redact_url`` and
    the root logger's lines (Daphne's, Twisted's) through :class:`sitekit.logs.RedactingFilter`.

    Imported here, not at the top: ``daphne.server`` installs Twisted's asyncio reactor,
    which must come after :func:`accept_one_per_turn` and before anything else of Twisted.
    """
    from daphne.cli import CommandLineInterface
    from daphne.server import Server

    class RedactingServer(Server):  # type: ignore[misc]  # Daphne is untyped
        """Every action Daphne logs (an HTTP response, a websocket's connect and close)."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            # Built after Daphne's logging.basicConfig: its handler is on the root now.
            for handler in logging.getLogger().handlers:
                handler.addFilter(RedactingFilter())
            super().__init__(*args, **kwargs)

        def log_action(self, protocol: str, action: str, details: dict[str, Any]) -> None:
            if isinstance(details.get("path"), str):
                details = {**details, "path": redact_url(details["path"])}
            super().log_action(protocol, action, details)

    class RedactingCommandLine(CommandLineInterface):  # type: ignore[misc]
        server_class = RedactingServer

    return RedactingCommandLine


def main() -> None:
    if any(arg == "--fd" or arg.startswith("--fd=") for arg in sys.argv[1:]):
        accept_one_per_turn()
    redacting_cli().entrypoint()


if __name__ == "__main__":
    main()
