"""One address in front of N operator replicas, as the operator's Service is in a cluster.

Metacontroller calls one hooks URL and the API server one webhook URL; in a cluster a Service
spreads those calls over the operator's replicas, so consecutive passes for one deployment land on
different replicas. Here:

- `HttpFront` (the hooks, plain HTTP): each request goes to the next replica in turn (round robin
  per request, whatever connection it came on: Metacontroller keeps its connections open, and a
  per-connection balance would pin every pass to one replica);
- `TcpFront` (the webhooks, TLS passed through untouched): each connection goes to the next replica.

A replica that refuses the connection is skipped (as a Service drops an endpoint that is not
Ready); with none left, the front answers 503 (hooks) or closes the connection (webhooks).
`stop()` closes the listener, so callers get "connection refused" as from a Service with no
endpoint and no proxy; `start()` listens on the same port again.
"""

from __future__ import annotations

import contextlib
import http.client
import itertools
import select
import socket
import socketserver
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# Hop-by-hop headers are not forwarded (RFC 9110 section 7.6.1).
HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade"}


class _Balance:
    """The replicas' ports, in turn; changed while running (an upgrade adds and removes replicas)."""

    def __init__(self, ports: list[int]) -> None:
        self.ports = list(ports)
        self.lock = threading.Lock()
        self.turn = itertools.count()
        self.served: dict[int, int] = {}

    def order(self) -> list[int]:
        with self.lock:
            ports = list(self.ports)
            start = next(self.turn) % len(ports) if ports else 0
        return ports[start:] + ports[:start]

    def count(self, port: int) -> None:
        with self.lock:
            self.served[port] = self.served.get(port, 0) + 1

    def set(self, ports: list[int]) -> None:
        with self.lock:
            self.ports = list(ports)


class _Server:
    def __init__(self, port: int, balance: _Balance) -> None:
        self.port = port
        self.balance = balance
        self.server: socketserver.BaseServer | None = None
        self.thread: threading.Thread | None = None
        # Open client connections: closed by stop(), so a kept-alive caller reconnects and is refused.
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()

    def _make(self) -> socketserver.BaseServer:
        raise NotImplementedError

    def start(self) -> None:
        self.server = self._make()
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.2},
                                       name=f"front-{self.port}", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
        with self.connections_lock:
            for conn in self.connections:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
            self.connections.clear()

    def opened(self, conn: socket.socket) -> None:
        with self.connections_lock:
            self.connections.add(conn)

    def closed(self, conn: socket.socket) -> None:
        with self.connections_lock:
            self.connections.discard(conn)

    def set_backends(self, ports: list[int]) -> None:
        self.balance.set(ports)

    @property
    def served(self) -> dict[int, int]:
        """Requests (hooks) or connections (webhooks) each replica's port took."""
        with self.balance.lock:
            return dict(self.balance.served)


class HttpFront(_Server):
    def __init__(self, port: int, backends: list[int]) -> None:
        super().__init__(port, _Balance(backends))

    def _make(self) -> socketserver.BaseServer:
        balance, front = self.balance, self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                front.opened(self.connection)

            def finish(self) -> None:
                front.closed(self.connection)
                super().finish()

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
                return

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP | {"host"}}
                for port in balance.order():
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                    try:
                        conn.connect()
                    except OSError:
                        conn.close()
                        continue  # not listening: the next replica
                    try:
                        conn.request(self.command, self.path, body=body, headers=headers)
                        response = conn.getresponse()
                        data = response.read()
                    except (OSError, http.client.HTTPException) as exc:
                        # The replica went away mid-request, or answered what is not HTTP: never sent
                        # twice, and said on stderr with both ends of the connection (an answer read
                        # without its start was a stale TLS reader in this process taking its bytes:
                        # bench/watch.py).
                        where = _ends(conn.sock)
                        sys.stderr.write(f"front {front.port}: replica {port} ({where}) {self.command} "
                                         f"{self.path}: {exc!r}\n")
                        self._answer(502, [("Content-Type", "text/plain")], f"replica {port}: {exc}".encode())
                        return
                    finally:
                        conn.close()
                    balance.count(port)
                    self._answer(response.status, [(k, v) for k, v in response.getheaders()
                                                   if k.lower() not in HOP_BY_HOP | {"content-length"}], data)
                    return
                self._answer(503, [("Content-Type", "text/plain")], b"no operator replica listens")

            def _answer(self, code: int, headers: list[tuple[str, str]], data: bytes) -> None:
                self.send_response(code)
                for key, value in headers:
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = _forward

        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        return server


class TcpFront(_Server):
    def __init__(self, port: int, backends: list[int]) -> None:
        super().__init__(port, _Balance(backends))

    def _make(self) -> socketserver.BaseServer:
        balance, front = self.balance, self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                client: socket.socket = self.request
                front.opened(client)
                for port in balance.order():
                    try:
                        upstream = socket.create_connection(("127.0.0.1", port), timeout=5)
                    except OSError:
                        continue
                    balance.count(port)
                    upstream.settimeout(None)
                    _pump(client, upstream)
                    break
                front.closed(client)

        class Server(socketserver.ThreadingTCPServer):
            allow_reuse_address = True
            daemon_threads = True

        return Server(("127.0.0.1", self.port), Handler)


def _ends(sock: socket.socket | None) -> str:
    """"local -> peer" of a connection, as far as it is still known."""
    try:
        return f"{sock.getsockname()} -> {sock.getpeername()}" if sock is not None else "closed"
    except OSError:
        return "closed"


def _pump(a: socket.socket, b: socket.socket) -> None:
    """Copy bytes both ways until either side closes."""
    try:
        while True:
            readable, _, _ = select.select([a, b], [], [], 300)
            if not readable:
                return
            for side in readable:
                data = side.recv(65536)
                if not data:
                    return
                (b if side is a else a).sendall(data)
    except OSError:
        return
    finally:
        b.close()
