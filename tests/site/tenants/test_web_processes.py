"""Several Daphne processes on one listening socket (``keelgate_serve --web-processes N``)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from keelgate_site.management.commands.keelgate_serve import daphne_on_socket, listening_socket

from .._serve import ROOT, keelgate_serve, serve_env, status, stop


def _wait_listening(log: Path, n: int, procs: list[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + 90
    while log.read_text(errors="replace").count("Listening on") < n:
        assert all(p.poll() is None for p in procs), log.read_text()[-2000:]
        assert time.monotonic() < deadline, log.read_text()[-2000:]
        time.sleep(0.2)


def test_two_daphne_share_one_socket_and_each_serves_it_alone(tmp_path):
    """Both processes accept on the one port: with either one frozen (SIGSTOP), the other
    answers every new connection; the port is the one the parent bound."""
    sock = listening_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    log = tmp_path / "daphne.log"
    with log.open("ab") as out:
        procs = daphne_on_socket(
            sock, 2, env=serve_env(tmp_path), extra=["-v", "1"], stdout=out, stderr=out, cwd=ROOT
        )
    try:
        _wait_listening(log, 2, procs)
        assert status(port) == 404
        for frozen, serving in ((procs[0], procs[1]), (procs[1], procs[0])):
            frozen.send_signal(signal.SIGSTOP)
            try:
                assert [status(port) for _ in range(6)] == [404] * 6
                assert serving.poll() is None
            finally:
                frozen.send_signal(signal.SIGCONT)
        procs[0].terminate()
        procs[0].wait(timeout=20)
        assert [status(port) for _ in range(3)] == [404] * 3  # the survivor keeps the port
    finally:
        stop(procs)
        sock.close()


_ACCEPTS = """
import socket, sys, time
from twisted.internet import protocol, tcp
if sys.argv[1] == "web_process":
    from keelgate_site.web_process import accept_one_per_turn
    accept_one_per_turn()
built = []
class Factory(protocol.Factory):
    def buildProtocol(self, addr):
        built.append(addr)
        return protocol.Protocol()
port = tcp.Port(0, Factory(), interface="127.0.0.1")
port.startListening()
clients = [socket.create_connection(("127.0.0.1", port.getHost().port)) for _ in range(5)]
time.sleep(0.3)  # all five in the listen queue
for _ in range(3):
    port.doRead()  # one turn of the event loop with the socket readable
    print(len(built))
"""


def _accepted_per_turn(variant: str) -> list[int]:
    """Connections a Twisted listener has accepted after each of three turns, five waiting."""
    out = subprocess.run(
        [sys.executable, "-c", _ACCEPTS, variant], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return [int(n) for n in out.stdout.split()]


def test_a_web_process_accepts_one_waiting_connection_per_turn():
    """Five connections wait: a web process takes one per turn of its loop, and leaves the
    rest to whichever process turns next; Twisted as it ships takes all five at once."""
    assert _accepted_per_turn("web_process") == [1, 2, 3]
    assert _accepted_per_turn("twisted") == [5, 5, 5]


def test_keelgate_serve_web_processes_starts_n_daphne_and_stops_them_all(tmp_path):
    """``--web-processes 2``: two Daphne children answer on the port; SIGTERM stops every child."""
    env = serve_env(tmp_path, KEELGATE_DEBUG="1")
    with keelgate_serve(env, "--web-processes", "2") as (proc, _):
        children = subprocess.run(
            ["ps", "-o", "pid=,args=", "--ppid", str(proc.pid)], capture_output=True, text=True, check=True
        ).stdout.splitlines()
        daphnes = [line for line in children if "keelgate_site.web_process" in line and "--fd" in line]
        assert len(daphnes) == 2, children
        pids = [int(line.split()[0]) for line in children]
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        assert proc.returncode == 0
        for pid in pids:
            assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
