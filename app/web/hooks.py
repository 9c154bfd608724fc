"""Metacontroller hook endpoints: parse, call the pure logic, run the intents, answer.

Never a 200 without `children` and `status`: any failure answers non-200, which Metacontroller
treats as "leave everything as it is and retry".
"""

from __future__ import annotations

import logging
import time
from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import ValidationError

from app.api.hooks import CustomizeRequest, HookRequest, sync_response
from app.control.sync import SyncFailed, customize, reconcile
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


async def _parse(request: Request, model: type) -> Any:
    try:
        body = orjson.loads(await request.body())
    except orjson.JSONDecodeError as exc:
        raise _BadRequest(f"request body is not JSON: {exc}") from exc
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise _BadRequest(f"not a Metacontroller v2 hook request: {exc.errors()[:3]}") from exc


class _BadRequest(Exception):
    pass


async def _reconcile(request: Request, hook: str) -> Response:
    state: ServiceState = request.app.state.service
    started = time.perf_counter()
    try:
        hook_request: HookRequest = await _parse(request, HookRequest)
        if hook == "finalize":
            hook_request.finalizing = True
        result = reconcile(hook_request, state.sync_settings, now=utc_now())
        await state.executor.run(result.intents)
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
    log.info("%s %s/%s: %d children, %d intents, phase %s", hook,
             hook_request.parent.get("metadata", {}).get("namespace"),
             hook_request.parent.get("metadata", {}).get("name"), len(result.children), len(result.intents),
             result.status.get("phase"))
    return _json(sync_response(result.status, result.children, result.resync_after, result.finalized))


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
