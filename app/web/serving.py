"""The service's listeners: webhooks and hooks on separate ports by default, the certificate reloaded.

- webhook listener (`--port`, TLS when a certificate is given): `/webhooks/*` for the API server;
- hooks listener (`--hooks-port`, plain HTTP inside the cluster): `/hooks/*` for Metacontroller;
- both: `/healthz`, `/readyz`, `/metrics` and the API description (`/openapi.json`, `/docs`).

Apart, each port can be admitted from its one caller by a NetworkPolicy
(manifests/operator/networkpolicy.yaml). `--hooks-port 0` serves everything on `--port` (local
runs only). One process, one app and one lifespan (the webhook listener runs it).
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass, field
from typing import Any, Callable

import uvicorn

from app import vocab
from app.settings import Settings
from app.web.guard import HOOK_PATHS, WEBHOOK_PATHS, Listener
from app.web.tls import CertificateReloader


@dataclass
class Listeners:
    servers: list[uvicorn.Server]
    reloader: CertificateReloader | None
    # One bound socket per server (bind_socket), when the caller binds them before serving: a port
    # in use then fails before any listener has started. Empty: each server binds its own.
    sockets: list[socket.socket] = field(default_factory=list)

    def stop(self) -> None:
        for server in self.servers:
            server.should_exit = True


def listeners(app: Any, settings: Settings, *, host: str, port: int, hooks_port: int,
              **options: Any) -> Listeners:
    """`options` go to both uvicorn.Config (logging)."""
    tls = settings.tls_cert_file is not None and settings.tls_key_file is not None
    webhook_app = app if hooks_port == 0 else Listener(app, WEBHOOK_PATHS)
    webhooks = uvicorn.Config(
        webhook_app, host=host, port=port, lifespan="on", timeout_keep_alive=vocab.SERVER_KEEP_ALIVE_SECONDS, **options,
        ssl_certfile=str(settings.tls_cert_file) if tls else None,
        ssl_keyfile=str(settings.tls_key_file) if tls else None,
    )
    configs = [webhooks]
    if hooks_port != 0:
        # The second listener shares the first one's app and lifespan state.
        configs.append(uvicorn.Config(Listener(app, HOOK_PATHS), host=host, port=hooks_port, lifespan="off",
                                      timeout_keep_alive=vocab.SERVER_KEEP_ALIVE_SECONDS, **options))
    reloader = None
    if tls:
        webhooks.load()  # builds the SSLContext now, so the reloader holds the one the listener serves
        assert webhooks.ssl is not None and settings.tls_cert_file and settings.tls_key_file
        reloader = CertificateReloader(webhooks.ssl, settings.tls_cert_file, settings.tls_key_file)
    return Listeners([uvicorn.Server(c) for c in configs], reloader)


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket as uvicorn binds one (SO_REUSEADDR), or the OSError of the bind."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop when it is installed (a dependency on Linux), else asyncio's own.

    With uvloop, and httptools (which uvicorn's `http="auto"` picks when installed), the HTTP
    work of a request costs markedly less (bench/results.md#figures-quoted-from-the-code)."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run(listening: Listeners, settings: Settings) -> None:
    """`serve` on the fastest event loop available; returns when the listeners stop."""
    with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
        runner.run(serve(listening, settings))


async def serve(listening: Listeners, settings: Settings) -> None:
    """Runs the listeners until they stop (SIGTERM), with the certificate watcher beside them."""
    watcher = None
    if listening.reloader is not None and settings.tls_reload_seconds > 0:
        watcher = asyncio.create_task(listening.reloader.watch(settings.tls_reload_seconds))
    try:
        if listening.sockets:
            await asyncio.gather(*(server.serve(sockets=[sock])
                                   for server, sock in zip(listening.servers, listening.sockets, strict=True)))
        else:
            await asyncio.gather(*(server.serve() for server in listening.servers))
    finally:
        if watcher is not None:
            watcher.cancel()
