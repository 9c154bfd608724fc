"""How every Metacontroller hook answers when it cannot answer 200 (docs/metacontroller.md#errors-and-retries).

Never a 200 without `children` and `status`: any failure answers non-200, which Metacontroller
treats as "leave everything as it is and retry". One mapper, `answered`, serves every hook (the
ModelDeployment's sync, finalize and customize, the scaler's sync and customize), so an error of
one kind answers alike wherever it happens.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx2
import orjson
from fastapi.responses import Response
from lightkube.core.exceptions import ApiError

from app.api.strict import BadHookRequest
from app.kube.executor import ParentMismatch
from app.web.metrics import HOOK_ERRORS, HOOK_LATENCY

log = logging.getLogger("app.hooks")

RETRY_API_SECONDS = 5


def json_answer(body: Any, status_code: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status_code=status_code, media_type="application/json", headers=headers)


def error_answer(status_code: int, message: str, headers: dict[str, str] | None = None) -> Response:
    return json_answer({"error": message}, status_code, headers)


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


async def answered(hook: str, work: Callable[[], Awaitable[Response]]) -> Response:
    """`work`'s answer, or the one answer each kind of failure gets; every call timed."""
    started = time.perf_counter()
    try:
        return await work()
    except BadHookRequest as exc:
        HOOK_ERRORS.labels(hook, exc.kind).inc()
        return error_answer(exc.status_code, str(exc))
    except ParentMismatch as exc:
        HOOK_ERRORS.labels(hook, "parent_mismatch").inc()
        log.warning("%s hook: %s", hook, exc)
        return error_answer(exc.status_code, str(exc))
    except Exception as exc:  # noqa: BLE001 - any internal error must be a 5xx, never an empty 200
        if api_unavailable(exc):
            return unavailable_answer(hook, exc)
        HOOK_ERRORS.labels(hook, "internal").inc()
        log.exception("%s hook failed", hook)
        return error_answer(500, f"internal error: {type(exc).__name__}: {exc}")
    finally:
        HOOK_LATENCY.labels(hook).observe(time.perf_counter() - started)
