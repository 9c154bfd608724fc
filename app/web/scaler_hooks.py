"""The ModelDeploymentScaler's Metacontroller hooks: parse, plan, write, answer (docs/autoscaling.md).

A second CompositeController (parent `modeldeploymentscalers`, no children) calls
`/hooks/scaler/customize` and `/hooks/scaler/sync` on the same service. Never a 200 without
`status`: any failure answers non-200 and Metacontroller leaves the scaler as it is and retries.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import ValidationError

from app.api.hooks import sync_response
from app.api.scaler import BadScalerRequest, check_scaler_request
from app.control import observed as obs
from app.control import scaler as plan
from app.kube.executor import ParentMismatch, ParentRef, utc_now
from app import vocab
from app.web.hooks import api_unavailable, error_answer, field_errors, unavailable_answer
from app.web.metrics import HOOK_ERRORS, HOOK_LATENCY
from app.web.state import ServiceState

log = logging.getLogger("app.hooks.scaler")
router = APIRouter(prefix="/hooks/scaler", tags=["metacontroller"])


def _json(body: Any) -> Response:
    return Response(orjson.dumps(body), media_type="application/json")


def _invalid(exc: ValidationError, what: str) -> str:
    return f"the {what} does not match the schema: {field_errors(exc)}"


def _request(raw: bytes) -> dict[str, Any]:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadScalerRequest(f"request body is not JSON: {exc}") from exc
    check_scaler_request(body)
    result: dict[str, Any] = body
    return result


async def _sync(request: Request) -> Response:
    state: ServiceState = request.app.state.service
    body = _request(await request.body())
    try:
        scaler = plan.parse_scaler(body["parent"])
    except ValidationError as exc:
        raise _Unprocessable(_invalid(exc, "parent ModelDeploymentScaler")) from exc
    deployment = plan.target_deployment(scaler, body.get("related") or {})
    now = utc_now()
    try:
        result = plan.plan(scaler, deployment, state.scaler_settings, now=now)
    except ValidationError as exc:
        raise _Unprocessable(_invalid(exc, f"related ModelDeployment {scaler.spec.deployment_ref.name}")) from exc
    meta = scaler.metadata
    parent = ParentRef(namespace=meta.namespace, name=meta.name, uid=meta.uid, kind=vocab.KIND_MODEL_DEPLOYMENT_SCALER)
    refusal = await state.scaler_executor.run(parent, result.intents)
    if refusal is not None:
        result = plan.refused(result, f"the API server refused it: {refusal}", now)
        await state.scaler_executor.run(parent, result.intents)
    write = plan.write_of(result)
    log.info("scaler sync %s/%s: %s, %s", meta.namespace, meta.name,
             f"wrote {dict(write.replicas)}" if write and refusal is None else "no write",
             (obs.status_condition(result.status, vocab.COND_SCALER_ACTIVE) or {}).get("reason", ""))
    return _json(sync_response(result.status, [], result.resync_after))


class _Unprocessable(Exception):
    pass


@router.post("/sync")
async def sync(request: Request) -> Response:
    started = time.perf_counter()
    try:
        return await _sync(request)
    except BadScalerRequest as exc:
        HOOK_ERRORS.labels("scaler-sync", "bad_request").inc()
        return error_answer(400, str(exc))
    except _Unprocessable as exc:
        HOOK_ERRORS.labels("scaler-sync", "invalid_parent").inc()
        return error_answer(422, str(exc))
    except ParentMismatch as exc:
        HOOK_ERRORS.labels("scaler-sync", "parent_mismatch").inc()
        log.warning("scaler sync: %s", exc)
        return error_answer(exc.status_code, str(exc))
    except Exception as exc:  # noqa: BLE001 - any internal error must be a 5xx, never an empty 200
        if api_unavailable(exc):
            return unavailable_answer("scaler-sync", exc)
        HOOK_ERRORS.labels("scaler-sync", "internal").inc()
        log.exception("scaler sync hook failed")
        return error_answer(500, f"internal error: {type(exc).__name__}: {exc}")
    finally:
        HOOK_LATENCY.labels("scaler-sync").observe(time.perf_counter() - started)


@router.post("/customize")
async def customize(request: Request) -> Response:
    started = time.perf_counter()
    try:
        body = _request(await request.body())
        return _json(plan.customize(body["parent"]))
    except BadScalerRequest as exc:
        HOOK_ERRORS.labels("scaler-customize", "bad_request").inc()
        return error_answer(400, str(exc))
    except ValidationError as exc:
        HOOK_ERRORS.labels("scaler-customize", "invalid_parent").inc()
        return error_answer(422, _invalid(exc, "parent ModelDeploymentScaler"))
    except Exception as exc:  # noqa: BLE001
        HOOK_ERRORS.labels("scaler-customize", "internal").inc()
        log.exception("scaler customize hook failed")
        return error_answer(500, f"internal error: {type(exc).__name__}: {exc}")
    finally:
        HOOK_LATENCY.labels("scaler-customize").observe(time.perf_counter() - started)
