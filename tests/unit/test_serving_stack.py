"""`modeldeployment serve` runs on uvloop and httptools: both are dependencies, and the
listeners pick them up (bench/results.md#sync-throughput-through-uvicorn measures what they change)."""

from __future__ import annotations

import asyncio

import uvicorn

from app.settings import Settings
from app.web.serving import event_loop_factory, listeners, run


def test_the_event_loop_is_uvloops():
    import uvloop

    factory = event_loop_factory()
    assert factory is uvloop.new_event_loop
    loop = factory()
    try:
        assert isinstance(loop, uvloop.Loop)
    finally:
        loop.close()


def test_the_listeners_parse_http_with_httptools():
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    async def app(scope, receive, send):  # pragma: no cover - never called
        raise AssertionError

    listening = listeners(app, Settings(kube="off"), host="127.0.0.1", port=0, hooks_port=0, log_level="warning")
    config = listening.servers[0].config
    config.load()
    assert config.http_protocol_class is HttpToolsProtocol


def test_run_serves_on_uvloop_until_the_listeners_stop():
    seen: list[str] = []

    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    seen.append(type(asyncio.get_running_loop()).__module__)
                    listening.stop()
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return

    listening = listeners(app, Settings(kube="off"), host="127.0.0.1", port=0, hooks_port=0, log_level="warning")
    run(listening, Settings(kube="off"))
    assert seen and seen[0].startswith("uvloop")
    assert isinstance(listening.servers[0], uvicorn.Server)


def test_both_listeners_keep_idle_connections_longer_than_gos_http_clients():
    """The API server's and Metacontroller's Go transports drop an idle connection after 90 s; a
    server that closes first races their next POST on it (seen as EOF on a webhook answer)."""
    from app import vocab
    from app.main import create_app
    from app.settings import Settings
    from app.web.serving import listeners

    app = create_app(Settings(kube="off"))
    listening = listeners(app, Settings(kube="off"), host="127.0.0.1", port=0, hooks_port=1, log_level="warning")
    assert [s.config.timeout_keep_alive for s in listening.servers] == [vocab.SERVER_KEEP_ALIVE_SECONDS] * 2
    assert vocab.SERVER_KEEP_ALIVE_SECONDS > 90
