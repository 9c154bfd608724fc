"""The benchmark's server process: the production app under uvicorn, plus one trivial endpoint.

    python -m bench.server --port P --trivial-bytes N [--world DIR]

Serves app.main.create_app() exactly as `modeldeployment serve` does (uvicorn, lifespan on, the
same log level; logs go to this process's stderr, which the harness sends to a file), with no
API server unless `--kube auto` (then $KUBECONFIG's: the webhook benchmark's live world reads);
without one, side effects are logged and skipped. The benchmark's app instance also gets `POST /bench/trivial`, which reads the request body
and answers N bytes of prebuilt JSON: the same HTTP work as a sync, and no sync; and, with
`--floor-response FILE`, `POST /bench/floor`: the JSON floor as an endpoint (orjson-parse the
request, orjson-serialize that answer). Both are mounted here only, never in app/main.py.
"""

from __future__ import annotations

import argparse

import uvicorn
from fastapi import Request
from fastapi.responses import Response


def shim_kube_timeout() -> None:
    """Bench-only workaround, used only when the shipped client cannot read (reported as such).

    lightkube >= 1.0 runs on httpx2 and needs its Timeout; app.kube.client passes httpx's, so
    every read raises TypeError and admission fails closed. This builds the same client with the
    timeout type lightkube expects, nothing else changed.
    """
    import httpx2
    from lightkube import AsyncClient

    from app import vocab
    from app.kube import client as kube_client

    def __init__(self, config, *, timeout: float) -> None:  # type: ignore[no-untyped-def]
        self.client = AsyncClient(config, timeout=httpx2.Timeout(timeout), field_manager=vocab.EVENT_SOURCE_COMPONENT)
        self.timeout = timeout

    kube_client.Kube.__init__ = __init__  # type: ignore[method-assign]


def build(trivial_bytes: int, world_dir: str | None, kube: str = "off", floor_response: str | None = None) -> object:
    import gc

    import orjson

    from app.main import create_app
    from app.settings import Settings

    settings = Settings(kube=kube, world_dir=world_dir)
    app = create_app(settings)
    # A JSON body of exactly `trivial_bytes` bytes, built once.
    filler = max(trivial_bytes - len(b'{"pad":""}'), 0)
    body = b'{"pad":"' + b"x" * filler + b'"}'

    @app.post("/bench/trivial")
    async def trivial(request: Request) -> Response:
        await request.body()
        return Response(body, media_type="application/json")

    if floor_response:
        # The JSON floor as an endpoint: parse the request, serialize a sync's answer, nothing else
        # (collector paused as in the sync hook). No sync that reads its request can be faster.
        answer = orjson.loads(open(floor_response, "rb").read())

        @app.post("/bench/floor")
        async def floor(request: Request) -> Response:
            raw = await request.body()
            gc.disable()
            try:
                parsed = orjson.loads(raw)
                out = orjson.dumps(answer)
                del parsed
            finally:
                gc.enable()
            return Response(out, media_type="application/json")

    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--trivial-bytes", type=int, default=1024)
    parser.add_argument("--world", default=None)
    parser.add_argument("--kube", default="off", choices=("off", "auto"))
    parser.add_argument("--shim-kube-timeout", action="store_true")
    parser.add_argument("--floor-response", default=None, help="a sync answer (JSON file): serves /bench/floor")
    parser.add_argument("--stack", default="serve", choices=("serve", "h11-asyncio"))
    args = parser.parse_args()
    if args.shim_kube_timeout:
        shim_kube_timeout()
    app = build(args.trivial_bytes, args.world, args.kube, args.floor_response)
    # The same server as `modeldeployment serve` (app/cli.py): app/web/serving.py's listener (one
    # port here) on its event loop (uvloop) and uvicorn's HTTP parser (httptools when installed);
    # `--stack h11-asyncio` is the stack before those two (a reference row in the results).
    if args.stack == "h11-asyncio":
        uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="info", lifespan="on", loop="asyncio", http="h11")
        return
    from app.settings import Settings
    from app.web.serving import listeners, run

    settings = Settings(kube=args.kube, world_dir=args.world)
    run(listeners(app, settings, host="127.0.0.1", port=args.port, hooks_port=0, log_level="info"), settings)


if __name__ == "__main__":
    main()
