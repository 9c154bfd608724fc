"""Admission webhooks (AdmissionReview v1) for ModelDeployment: thin HTTP over app.admission.review.

`POST /webhooks/mutate` and `POST /webhooks/validate`. A JSON object always gets HTTP 200 and an
AdmissionReview (refusing what it cannot read); a body that is not a JSON object is not an
AdmissionReview at all and gets 400. Never a 5xx.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from app import vocab
from app.admission import review
from app.admission import scaler as scaler_review
from app.api.v1 import ModelDeployment
from app.kube.client import ClusterUnreachable
from app.web.metrics import WEBHOOK_DECISIONS, WEBHOOK_LATENCY
from app.web.state import ServiceState
from app.world import World

router = APIRouter(prefix="/webhooks", tags=["admission"])


def world_source(state: ServiceState | None, *, instance_types_only: bool = False) -> review.WorldSource:
    """Cluster objects for one decision: the world directory when set, else the API server, read live
    (only the roles' InstanceTypes with `instance_types_only`: all the mutating webhook's defaults read)."""

    async def source(md: ModelDeployment) -> World:
        if state is not None and state.directory_world is not None:
            return state.directory_world.snapshot()
        if state is not None and state.kube is not None:
            return await state.kube.world_for(md, instance_types_only=instance_types_only)
        raise ClusterUnreachable("no API server is configured for the webhook (and no world directory is set)")

    return source


def nested_deeper_than(value: Any, limit: int) -> bool:
    """Whether a decoded JSON value nests deeper than `limit` containers (iterative: no recursion)."""
    stack = [(value, 1)]
    while stack:
        current, depth = stack.pop()
        children: Iterable[Any]
        if isinstance(current, dict):
            children = current.values()
        elif isinstance(current, list):
            children = current
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


async def _body(request: Request) -> dict[str, Any] | Response:
    raw = await request.body()
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        return JSONResponse({"error": f"the body is not JSON, so not an AdmissionReview: {exc}"}, status_code=400)
    if not isinstance(body, dict):
        return JSONResponse({"error": "the body is not a JSON object, so not an AdmissionReview"}, status_code=400)
    if nested_deeper_than(body, vocab.MAX_JSON_DEPTH):
        # Refused inside an AdmissionReview, before any rule walks it recursively.
        message = (f"malformed AdmissionReview: nested deeper than {vocab.MAX_JSON_DEPTH} levels, which no "
                   "Kubernetes object is")
        return ascii_json(review.answer(review.request_uid(body), allowed=False, code=400, reason="BadRequest",
                                        message=message))
    return body


def _state(request: Request) -> ServiceState | None:
    return getattr(request.app.state, "service", None)


def _answer(webhook: str, started: float, answer: dict[str, Any]) -> Response:
    allowed = bool((answer.get("response") or {}).get("allowed"))
    WEBHOOK_DECISIONS.labels(webhook, str(allowed).lower()).inc()
    WEBHOOK_LATENCY.labels(webhook).observe(time.perf_counter() - started)
    return ascii_json(answer)


def ascii_json(answer: dict[str, Any], status_code: int = 200) -> Response:
    """JSON with every non-ASCII character escaped: a forged `uid` holding a lone surrogate (which
    UTF-8 cannot encode) is echoed as its `\\udXXX` escape instead of failing the answer."""
    body = json.dumps(answer, ensure_ascii=True, separators=(",", ":"))
    return Response(body.encode("ascii"), status_code=status_code, media_type="application/json")


@router.post("/mutate")
async def mutate(request: Request) -> Response:
    started = time.perf_counter()
    body = await _body(request)
    if not isinstance(body, dict):
        return body
    return _answer("mutate", started, await review.mutate_review(body, world_source(_state(request),
                                                                                instance_types_only=True)))


@router.post("/validate")
async def validate(request: Request) -> Response:
    started = time.perf_counter()
    body = await _body(request)
    if not isinstance(body, dict):
        return body
    state = _state(request)
    owned = state.settings.kv_cache_dtype_owned if state is not None else True
    max_pods = state.settings.max_pods_per_deployment if state is not None else vocab.DEFAULT_MAX_PODS_PER_DEPLOYMENT
    return _answer("validate", started, await review.validate_review(body, world_source(state),
                                                                     kv_cache_dtype_owned=owned, max_pods=max_pods))


def scaler_sources(state: ServiceState | None) -> tuple[scaler_review.ScalerWorldSource, scaler_review.StoredScalerSource]:
    """The deployment and the namespace's scalers, read live from the API server. Without one (a local
    run on a world directory) nothing is known beside the scaler: the rules that read the cluster pass."""

    async def world(namespace: str, deployment: str) -> tuple[Any, list[Any]]:
        if state is not None and state.kube is not None:
            return await state.kube.scaler_world(namespace, deployment)
        if state is not None and state.directory_world is not None:
            return None, []
        raise ClusterUnreachable("no API server is configured for the webhook (and no world directory is set)")

    async def stored(namespace: str, name: str) -> Any:
        if state is not None and state.kube is not None:
            return await state.kube.stored_scaler(namespace, name)
        raise ClusterUnreachable("no API server is configured to read the stored scaler of a /scale write")

    return world, stored


@router.post("/scaler/validate")
async def validate_scaler(request: Request) -> Response:
    started = time.perf_counter()
    body = await _body(request)
    if not isinstance(body, dict):
        return body
    state = _state(request)
    max_pods = state.settings.max_pods_per_deployment if state is not None else vocab.DEFAULT_MAX_PODS_PER_DEPLOYMENT
    world, stored = scaler_sources(state)
    return _answer("validate-scaler", started,
                   await scaler_review.validate_scaler_review(body, world, stored, max_pods=max_pods))
