"""Metacontroller hook endpoints of the ModelDeployment: parse, reconcile, carry out, answer.

Each pass is parse (app.api.hooks, the one door) → reconcile (pure) → the executor, once, with
the pass's intents → serialize. A refusal is a value: its events are recorded like any intent and
it answers 429 + Retry-After (docs/metacontroller.md#errors-and-retries). Every other failure
answers through app.web.answers, the mapper every hook shares; never a 200 without `children`
and `status`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import logging
from collections.abc import Iterator
from fastapi import APIRouter, Request
from lightkube.core.exceptions import ApiError
from fastapi.responses import Response

from app.api.hooks import BadHookRequest, parse_customize, parse_sync, sync_response, sync_response_bytes
from app.api.objects import KubeObject
from app.control import gang
from app.control.intents import Intent
from app.control.sync import Refusal, SyncSettings, customize, reconcile
from app.kube.executor import ParentRef, utc_now
from app.web import metrics
from app.web.answers import answered, error_answer, json_answer
from app.web.state import ServiceState

log = logging.getLogger("app.hooks")
router = APIRouter(prefix="/hooks", tags=["metacontroller"])

RETRY_SOON_SECONDS = 30
RETRY_LATER_SECONDS = 300


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


@dataclasses.dataclass(frozen=True)
class _Pass:
    """What outlives one pass's request (so the request is freed before the executor runs): the
    parent the intents are about, the intents, and the answer (bytes), or the refusal."""

    parent: ParentRef
    intents: list[Intent]
    body: bytes = b""
    refusal: Refusal | None = None
    line: str = ""
    teardown_unfinished: bool = False  # a finalize pass answering `finalized: false`
    needs_peers: bool = False  # the joint set reached its release bound: run again with the holders


def _parent_ref(parent: KubeObject, *, finalizing: bool) -> ParentRef:
    meta = parent["metadata"]
    return ParentRef(namespace=meta.get("namespace") or "", name=meta["name"], uid=meta["uid"], finalizing=finalizing)


def _sync_pass(raw: bytes, hook: str, settings: SyncSettings, peers: list[gang.Holder] | None = None) -> _Pass:
    """Parse, reconcile, serialize (no I/O)."""
    request = parse_sync(raw, finalizing=hook == "finalize")
    parent = _parent_ref(request.parent, finalizing=hook == "finalize")
    now = utc_now()
    try:
        outcome = reconcile(request, settings, now=now, peers=peers)
    except RecursionError as exc:
        raise BadHookRequest("an object of the request is nested too deeply to plan from — send Kubernetes objects "
                             "as the API server stores them") from exc
    if isinstance(outcome, Refusal):
        metrics.observe_render_failure(request.parent, outcome.retryable)
        return _Pass(parent, outcome.events, refusal=outcome)
    body = sync_response_bytes(sync_response(outcome.status, outcome.children, outcome.resync_after,
                                             outcome.finalized))
    metrics.observe_sync(request.parent, outcome.status, outcome.intents, outcome.finalized, now)
    line = (f"{hook} {parent.namespace}/{parent.name}: {len(outcome.children)} children, "
            f"{len(outcome.intents)} intents, phase {outcome.status.get('phase')}")
    return _Pass(parent, outcome.intents, body, line=line, teardown_unfinished=outcome.finalized is False,
                 needs_peers=outcome.needs_peers)


async def _reconcile(request: Request, hook: str) -> Response:
    state: ServiceState = request.app.state.service
    raw = await request.body()
    with _gc_paused():
        done = _sync_pass(raw, hook, state.sync_settings)
    if done.needs_peers:
        # A joint set at its release bound yields only if it comes first among the sets holding part
        # of a pool (docs/kueue.md#deadlock-release): one list of the deployments, then the pass again.
        peers = await _joint_holders(state)
        with _gc_paused():
            done = _sync_pass(raw, hook, state.sync_settings, peers)
    if done.teardown_unfinished:
        # Its answer stands whatever the deletes do: they run after it (docs/metacontroller.md#finalize).
        state.executor.run_after_answer(done.parent, done.intents,
                                        lambda exc: metrics.HOOK_ERRORS.labels(hook, "after_answer").inc())
    else:
        await state.executor.run(done.parent, done.intents)
    if done.refusal is not None:
        metrics.HOOK_ERRORS.labels(hook, "render_failed").inc()
        log.warning("render failed: %s", done.refusal.message)
        retry = RETRY_SOON_SECONDS if done.refusal.retryable else RETRY_LATER_SECONDS
        # 429 + Retry-After: Metacontroller requeues without touching children or status.
        return error_answer(429, f"render failed: {done.refusal.message}", {"Retry-After": str(retry)})
    log.info("%s", done.line)
    return Response(done.body, media_type="application/json")


async def _joint_holders(state: ServiceState) -> list[gang.Holder]:
    """Every deployment's joint admission holding record: one list of the ModelDeployments. None
    without an API server, or when the list fails (logged): the pass then decides as a set alone."""
    kube = state.executor.kube
    if kube is None:
        return []
    try:
        return gang.holders(await kube.model_deployments())
    except (ApiError, OSError) as exc:
        log.warning("could not list the ModelDeployments for the deadlock release: %s", exc)
        return []


@router.post("/sync")
async def sync(request: Request) -> Response:
    return await answered("sync", lambda: _reconcile(request, "sync"))


@router.post("/finalize")
async def finalize(request: Request) -> Response:
    return await answered("finalize", lambda: _reconcile(request, "finalize"))


async def _customize(request: Request) -> Response:
    return json_answer(customize(parse_customize(await request.body())))


@router.post("/customize")
async def customize_hook(request: Request) -> Response:
    return await answered("customize", lambda: _customize(request))
