"""``python -m keelgate_site.web_process``: Daphne, taking one new connection per turn.

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

Otherwise this is Daphne's own command line (``python -m daphne``), flags included.
"""

from __future__ import annotations

from twisted.internet import tcp


def accept_one_per_turn() -> None:
    """Pin every listening port's accept batch (``Port.numberAccepts``) to one connection."""
    # Port assigns the attribute itself (100, then adapted after each batch): a property
    # on the class makes those assignments no-ops.
    tcp.Port.numberAccepts = property(lambda self: 1, lambda self, value: None)  # type: ignore[assignment]


def main() -> None:
    accept_one_per_turn()
    from daphne.cli import CommandLineInterface  # installs Twisted's asyncio reactor

    CommandLineInterface.entrypoint()


if __name__ == "__main__":
    main()
