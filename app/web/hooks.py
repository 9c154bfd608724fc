"""Metacontroller hook endpoints: parse, call the pure logic, run the intents, answer.

Never a 200 without `children` and `status`: any failure answers non-200, which Metacontroller
treats as "leave everything as it is and retry".
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import logging
import time
from collections.abc import Iterator
from typing import Any, TypeVar

import httpx2
import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response
from lightkube.core.exceptions import ApiError
from pydantic import BaseModel, ValidationError

from app.api import strict
from app.api.hooks import CustomizeRequest, HookRequest, read_sync_request, sync_response
from app.api.objects import KubeObject
from app.control.intents import Intent
from app.control.sync import SyncFailed, SyncSettings, customize, reconcile
from app.kube.executor import ParentMismatch, ParentRef, utc_now
from app.web import metrics
from app.web.metrics import HOOK_ERRORS, HOOK_LATENCY
from app.web.state import ServiceState

log = logging.getLogger("app.hooks")
router = APIRouter(prefix="/hooks", tags=["metacontroller"])

RETRY_SOON_SECONDS = 30
RETRY_LATER_SECONDS = 300
RETRY_API_SECONDS = 5


def _json(body: Any, status_code: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status_code=status_code, media_type="application/json", headers=headers)


def error_answer(status_code: int, message: str, headers: dict[str, str] | None = None) -> Response:
    return _json({"error": message}, status_code, headers)


def _json_body(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise _BadRequest(f"request body is not JSON: {exc}") from exc


def _decode_sync(raw: bytes) -> Any:
    """The request as plain values (managedFields dropped when it is shaped like a hook request)."""
    try:
        decoded = read_sync_request(raw)
    except RecursionError as exc:
        raise _BadRequest("request body is nested too deeply to be a Metacontroller hook request") from exc
    return _json_body(raw) if decoded is None else decoded


def _answer_bytes(answer: dict[str, Any]) -> bytes:
    """The answer as JSON; a value echoed from the request that JSON cannot carry (an integer beyond
    64 bits, nesting beyond orjson's limit) is the request's fault, answered 400."""
    try:
        return orjson.dumps(answer)
    except orjson.JSONEncodeError as exc:
        raise _BadRequest(f"the request carries a value the answer would echo but cannot encode ({exc}) — send "
                          "Kubernetes objects as the API server stores them") from exc


_Model = TypeVar("_Model", bound=BaseModel)


def _validate(body: Any, model: type[_Model]) -> _Model:
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise _BadRequest(f"not a Metacontroller v2 hook request: {field_errors(exc)}") from exc


def api_unavailable(exc: BaseException) -> bool:
    """The API server could not be reached, or answered that it cannot serve now (restarting,
    overloaded): no fault of this service's, and Metacontroller retries the pass."""
    if isinstance(exc, ApiError):
        return exc.response.status_code >= 500 or exc.response.status_code == 429
    return isinstance(exc, (httpx2.TransportError, TimeoutError, OSError))


def unavailable_answer(hook: str, exc: BaseException) -> Response:
    """503 + Retry-After: the side effects stopped where the API server went away; the answer is
    not given, so Metacontroller leaves children and status as they are and calls again."""
    HOOK_ERRORS.labels(hook, "api_unavailable").inc()
    log.warning("%s hook: the API server is unavailable: %s: %s", hook, type(exc).__name__, exc)
    return error_answer(503, f"the API server is unavailable ({type(exc).__name__}: {exc}); the pass is retried",
                  {"Retry-After": str(RETRY_API_SECONDS)})


def field_errors(exc: ValidationError) -> str:
    """The first errors as `path: message` (pydantic's own list echoes the input, which may be huge)."""
    return "; ".join(f"{_loc(e.get('loc', ()))}: {e.get('msg')}"
                     for e in exc.errors(include_url=False, include_input=False)[:3])


# The union-branch tags pydantic appends to a location (`accelerator.int`): not field names.
_BRANCH_TAGS = {"int", "str", "float", "bool", "list", "dict", "none", "literal"}


def _loc(loc: tuple[Any, ...]) -> str:
    """A pydantic error location as a field path: `spec.roles[0].replicas`."""
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc
                   if isinstance(p, int) or (p not in _BRANCH_TAGS and "[" not in str(p))).lstrip(".")


class _BadRequest(Exception):
    pass


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off while one request is parsed, reconciled and answered.

    A sync request is a tree of up to millions of dicts and lists (JSON has no cycles) that lives
    for one pass: the collector can free none of it, yet each of its passes walks all of it, at a
    cost of several times the parse itself on a large request
    (bench/results.md#figures-quoted-from-the-code). Reference counting frees the request when the pass
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


class _RenderFailed(Exception):
    """A SyncFailed with the parent its Event is about (the executor checks it before writing)."""

    def __init__(self, parent: ParentRef, failure: SyncFailed) -> None:
        super().__init__(str(failure))
        self.parent = parent
        self.failure = failure


def _parent_ref(parent: KubeObject) -> ParentRef:
    meta = parent["metadata"]
    return ParentRef(namespace=meta.get("namespace") or "", name=meta["name"], uid=meta["uid"])


def _sync_pass(raw: bytes, hook: str, settings: SyncSettings) -> tuple[bytes, list[Intent], str, ParentRef]:
    """Check, parse, reconcile, serialize: the answer's bytes, the intents, a log line and the parent
    the intents are about.

    Only these outlive this call, so the request is freed on return.
    """
    decoded = _decode_sync(raw)
    try:
        strict.check_sync_request(decoded)
    except strict.BadHookRequest as exc:
        raise _BadRequest(str(exc)) from exc
    hook_request: HookRequest = _validate(decoded, HookRequest)
    del decoded
    parent = _parent_ref(hook_request.parent)
    if hook == "finalize":
        hook_request.finalizing = True
        parent = dataclasses.replace(parent, finalizing=True)
    now = utc_now()
    try:
        result = reconcile(hook_request, settings, now=now)
    except SyncFailed as exc:
        metrics.observe_render_failure(hook_request.parent, exc.resolves_later)
        raise _RenderFailed(parent, exc) from exc
    except RecursionError as exc:
        raise _BadRequest("the parent is nested too deeply to be a ModelDeployment") from exc
    body = _answer_bytes(sync_response(result.status, result.children, result.resync_after, result.finalized))
    metrics.observe_sync(hook_request.parent, result.status, result.intents, result.finalized, now)
    line = (f"{hook} {parent.namespace}/{parent.name}: {len(result.children)} children, "
            f"{len(result.intents)} intents, phase {result.status.get('phase')}")
    return body, result.intents, line, parent


async def _reconcile(request: Request, hook: str) -> Response:
    state: ServiceState = request.app.state.service
    started = time.perf_counter()
    try:
        raw = await request.body()
        with _gc_paused():
            body, intents, line, parent = _sync_pass(raw, hook, state.sync_settings)
        await state.executor.run(parent, intents)
    except _BadRequest as exc:
        HOOK_ERRORS.labels(hook, "bad_request").inc()
        return error_answer(400, str(exc))
    except ValidationError as exc:
        HOOK_ERRORS.labels(hook, "invalid_parent").inc()
        return error_answer(422, f"the parent ModelDeployment does not match the schema: {field_errors(exc)}")
    except ParentMismatch as exc:
        HOOK_ERRORS.labels(hook, "parent_mismatch").inc()
        log.warning("%s hook: %s", hook, exc)
        return error_answer(exc.status_code, str(exc))
    except _RenderFailed as failed:
        failure = failed.failure
        HOOK_ERRORS.labels(hook, "render_failed").inc()
        try:
            await state.executor.run(failed.parent, failure.intents)
        except ParentMismatch as mismatch:
            HOOK_ERRORS.labels(hook, "parent_mismatch").inc()
            return error_answer(mismatch.status_code, str(mismatch))
        except Exception as exc:  # noqa: BLE001 - only the API server's absence is answered here
            if not api_unavailable(exc):
                raise
            return unavailable_answer(hook, exc)
        retry = RETRY_SOON_SECONDS if failure.resolves_later else RETRY_LATER_SECONDS
        log.warning("render failed: %s", failure)
        # 429 + Retry-After: Metacontroller requeues without touching children or status.
        return error_answer(429, f"render failed: {failure}", {"Retry-After": str(retry)})
    except Exception as exc:  # noqa: BLE001 - any internal error must be a 5xx, never an empty 200
        if api_unavailable(exc):
            return unavailable_answer(hook, exc)
        HOOK_ERRORS.labels(hook, "internal").inc()
        log.exception("%s hook failed", hook)
        return error_answer(500, f"internal error: {type(exc).__name__}: {exc}")
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
        raw = _json_body(await request.body())
        try:
            strict.check_customize_request(raw)
        except strict.BadHookRequest as exc:
            raise _BadRequest(str(exc)) from exc
        parsed: CustomizeRequest = _validate(raw, CustomizeRequest)
        body = customize(parsed.parent)
    except _BadRequest as exc:
        HOOK_ERRORS.labels("customize", "bad_request").inc()
        return error_answer(400, str(exc))
    except ValidationError as exc:
        HOOK_ERRORS.labels("customize", "invalid_parent").inc()
        return error_answer(422, f"the parent ModelDeployment does not match the schema: {field_errors(exc)}")
    except Exception as exc:  # noqa: BLE001
        HOOK_ERRORS.labels("customize", "internal").inc()
        log.exception("customize hook failed")
        return error_answer(500, f"internal error: {type(exc).__name__}: {exc}")
    finally:
        HOOK_LATENCY.labels("customize").observe(time.perf_counter() - started)
    return _json(body)
