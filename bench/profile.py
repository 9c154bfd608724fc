"""Where one sync's time goes: a pyinstrument profile of the production handler (in-process)."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path
from typing import Any, Callable

from bench import asgi, fixtures


def run(pods: int, out: Path, log: Callable[[str], None], repeats: int = 3) -> dict[str, Any]:
    from bench.sync_cost import SHAPE

    body = fixtures.request_bytes(pods, **SHAPE)
    app = asgi.server_app()
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(asgi.call(app, "/hooks/sync", body))  # warm-up
        gc.collect()
        try:
            from pyinstrument import Profiler
        except ImportError:
            return {"available": False, "reason": "pyinstrument is not installed (bench/run.sh installs it)"}
        profiler = Profiler(interval=0.0005)
        profiler.start()
        for _ in range(repeats):
            loop.run_until_complete(asgi.call(app, "/hooks/sync", body))
        profiler.stop()
    finally:
        loop.close()
    text = profiler.output_text(unicode=False, color=False, show_all=False)
    out.write_text(f"# pyinstrument: {repeats} syncs of a {pods}-Pod deployment through the ASGI app\n\n{text}")
    log(f"  wrote {out}")
    return {"available": True, "pods": pods, "repeats": repeats, "file": out.name}
