"""Metacontroller hook endpoints: parse, call the pure logic, run the intents, answer.

Never a 200 without `children` and `status`: any failure answers non-200, which Metacontroller
treats as "leave everything as it is and retry".
"""

from __future__ import annotations

import contextlib
import gc
import logging
import time
from collections.abc import Iterator
from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import ValidationError

from app.api.hooks import CustomizeRequest, HookRequest, read_sync_request, sync_response
from app.control.intents import Intent
from app.control.sync import SyncFailed, SyncSettings, customize, reconcile
from app.kube.executor import utc_now
from app.web.metrics import HOOK_ERRORS, HOOK_LATENCY
from app.web.state import ServiceState

log = logging.getLogger("app.hooks")
router = APIRouter(prefix="/hooks", tags=["metacontroller"])

RETRY_SOON_SECONDS = 30
RETRY_LATER_SECONDS = 300


def _json(body: Any, status_code: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status_code=status_code, media_type="application/json", headers=headers)


def _error(status_code: int, message: str, headers: dict[str, str] | None = None) -> Response:
    return _json({"error": message}, status_code, headers)


def _parse_body(raw: bytes, model: type) -> Any:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise _BadRequest(f"request body is not JSON: {exc}") from exc
    return _validate(body, model)


def _validate(body: Any, model: type) -> Any:
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise _BadRequest(f"not a Metacontroller v2 hook request: {exc.errors()[:3]}") from exc


async def _parse(request: Request, model: type) -> Any:
    return _parse_body(await request.body(), model)


class _BadRequest(Exception):
    pass


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off while one request is parsed, reconciled and answered.

    A sync request is a tree of up to millions of dicts and lists (JSON has no cycles) that lives
    for one pass: the collector can free none of it, yet each of its passes walks all of it, which
    cost 4-5x the parse itself at 1,000 Pods. Reference counting frees the request when the pass
    returns, exactly as before. The section holds no `await`, so no other request runs meanwhile.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _sync_pass(raw: bytes, hook: str, settings: SyncSettings) -> tuple[bytes, list[Intent], str]:
    """Parse, reconcile, serialize: the answer's bytes, the intents and a log line.

    Only the bytes and the intents outlive this call, so the request is freed on return.
    """
    decoded = read_sync_request(raw)
    hook_request: HookRequest = _parse_body(raw, HookRequest) if decoded is None else _validate(decoded, HookRequest)
    del decoded
    if hook == "finalize":
        hook_request.finalizing = True
    result = reconcile(hook_request, settings, now=utc_now())
    body = orjson.dumps(sync_response(result.status, result.children, result.resync_after, result.finalized))
    meta = hook_request.parent.get("metadata", {})
    line = (f"{hook} {meta.get('namespace')}/{meta.get('name')}: {len(result.children)} children, "
            f"{len(result.intents)} intents, phase {result.status.get('phase')}")
    return body, result.intents, line


async def _reconcile(request: Request, hook: str) -> Response:
    state: ServiceState = request.app.state.service
    started = time.perf_counter()
    try:
        raw = await request.body()
        with _gc_paused():
            body, intents, line = _sync_pass(raw, hook, state.sync_settings)
        await state.executor.run(intents)
    except _BadRequest as exc:
        HOOK_ERRORS.labels(hook, "bad_request").inc()
        return _error(400, str(exc))
    except ValidationError as exc:
        HOOK_ERRORS.labels(hook, "invalid_parent").inc()
        return _error(422, f"the parent ModelDeployment does not match the schema: {exc.errors()[:3]}")
    except SyncFailed as exc:
        HOOK_ERRORS.labels(hook, "render_failed").inc()
        await state.executor.run(exc.intents)
        retry = RETRY_SOON_SECONDS if exc.resolves_later else RETRY_LATER_SECONDS
        log.warning("render failed: %s", exc)
        # 429 + Retry-After: Metacontroller requeues without touching children or status.
        return _error(429, f"render failed: {exc}", {"Retry-After": str(retry)})
    except Exception as exc:  # noqa: BLE001 - any internal error must be a 5xx, never an empty 200
        HOOK_ERRORS.labels(hook, "internal").inc()
        log.exception("%s hook failed", hook)
        return _error(500, f"internal error: {type(exc).__name__}: {exc}")
    finally:
        HOOK_LATENCY.labels(hook).observe(time.perf_counter() - started)
    log.info("%s", line)
    return Response(body, media_type="application/json")


@router.post("/sync")
async def sync(request: Request) -> Response:
    return await _reconcile(request, "sync")


@router.post("/finalize")
async def finalize(request: Request) -> Response:
    return await _reconcile(request, "finalize")


@router.post("/customize")
async def customize_hook(request: Request) -> Response:
    started = time.perf_counter()
    try:
        parsed: CustomizeRequest = await _parse(request, CustomizeRequest)
        body = customize(parsed.parent)
    except _BadRequest as exc:
        HOOK_ERRORS.labels("customize", "bad_request").inc()
        return _error(400, str(exc))
    except ValidationError as exc:
        HOOK_ERRORS.labels("customize", "invalid_parent").inc()
        return _error(422, f"the parent ModelDeployment does not match the schema: {exc.errors()[:3]}")
    except Exception as exc:  # noqa: BLE001
        HOOK_ERRORS.labels("customize", "internal").inc()
        log.exception("customize hook failed")
        return _error(500, f"internal error: {type(exc).__name__}: {exc}")
    finally:
        HOOK_LATENCY.labels("customize").observe(time.perf_counter() - started)
    return _json(body)
