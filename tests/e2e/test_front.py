"""tests/e2e/front.py itself: a replica that answers what is not HTTP costs the caller a 502 it can
retry, not a connection closed under it, and the front says so on stderr."""

from __future__ import annotations

import socket
import threading

import httpx
import pytest

from cluster import free_ports
from front import HttpFront


def _listener() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


def test_a_replica_answering_what_is_not_http_is_a_502(capsys: pytest.CaptureFixture[str]) -> None:
    backend = _listener()

    def answer_garbage() -> None:
        conn, _ = backend.accept()
        conn.recv(65536)
        conn.sendall(b'"names": ["a", "b"]}]}\r\n\r\n')  # the middle of a JSON answer, no status line
        conn.close()

    threading.Thread(target=answer_garbage, daemon=True).start()
    (port,) = free_ports(1)
    front = HttpFront(port, [backend.getsockname()[1]])
    front.start()
    try:
        response = httpx.post(f"http://127.0.0.1:{port}/customize", json={}, timeout=10)
    finally:
        front.stop()
        backend.close()
    assert response.status_code == 502
    assert "BadStatusLine" in capsys.readouterr().err
