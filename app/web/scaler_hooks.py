"""The ModelDeploymentScaler's Metacontroller hooks: parse, plan, write, answer (docs/autoscaling.md).

A second CompositeController (parent `modeldeploymentscalers`, no children) calls
`/hooks/scaler/customize` and `/hooks/scaler/sync` on the same service. The request enters through
app.api.scaler's door; failures answer through app.web.answers like every hook's. Never a 200
without `status`.
"""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request
from fastapi.responses import Response

from app import vocab
from app.api.hooks import sync_response, sync_response_bytes
from app.api.scaler import parse_scaler_customize, parse_scaler_sync
from app.control import observed as obs
from app.control import scaler as plan
from app.kube.executor import ParentRef, utc_now
from app.web.answers import answered, json_answer
from app.web.state import ServiceState

log = logging.getLogger("app.hooks.scaler")
router = APIRouter(prefix="/hooks/scaler", tags=["metacontroller"])


async def _sync(request: Request) -> Response:
    state: ServiceState = request.app.state.service
    hook_request = parse_scaler_sync(await request.body())
    now = utc_now()
    result = plan.plan(hook_request, state.scaler_settings, now=now)
    meta = hook_request.scaler.metadata
    parent = ParentRef(namespace=meta.namespace, name=meta.name, uid=meta.uid, kind=vocab.KIND_MODEL_DEPLOYMENT_SCALER)
    # The API server's refusal of the write is found by making it: the pass is then re-planned as
    # refused and its Event recorded (docs/autoscaling.md#the-write).
    refusal = await state.scaler_executor.run(parent, result.intents)
    if refusal is not None:
        result = plan.refused(result, f"the API server refused it: {refusal}", now)
        await state.scaler_executor.run(parent, result.intents)
    write = plan.write_of(result)
    log.info("scaler sync %s/%s: %s, %s", meta.namespace, meta.name,
             f"wrote {dict(write.replicas)}" if write and refusal is None else "no write",
             (obs.status_condition(result.status, vocab.COND_SCALER_ACTIVE) or {}).get("reason", ""))
    return Response(sync_response_bytes(sync_response(result.status, [], result.resync_after)),
                    media_type="application/json")


@router.post("/sync")
async def sync(request: Request) -> Response:
    return await answered("scaler-sync", lambda: _sync(request))


async def _customize(request: Request) -> Response:
    return json_answer(plan.customize(parse_scaler_customize(await request.body())))


@router.post("/customize")
async def customize(request: Request) -> Response:
    return await answered("scaler-customize", lambda: _customize(request))
