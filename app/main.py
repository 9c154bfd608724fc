"""The FastAPI application: Metacontroller hooks, admission webhooks, health and metrics."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from app.api.hook_docs import describe_hooks
from app.control.sync import SyncSettings
from app.kube.client import Kube, load_config
from app.control.scaler import ScalerSettings
from app.kube.executor import Executor
from app.kube.activator_endpoints import keep_current
from app.kube.idleness import IdlenessReader
from app.kube.scaler_executor import ScalerExecutor
from app.settings import Settings
from app.web import hooks, scaler_hooks, webhooks
from app.web.guard import BodyLimit
from app.web.metrics import expire as expire_deployment_series
from app.web.state import ServiceState
from app.world import DirectoryWorld

log = logging.getLogger("app")


def build_state(settings: Settings) -> ServiceState:
    kube = None
    if settings.kube != "off":
        config = load_config(settings.kubeconfig)
        if config is not None:
            kube = Kube(config, timeout=settings.api_timeout_seconds)
    directory = DirectoryWorld(settings.world_dir) if settings.world_dir else None
    return ServiceState(
        settings=settings,
        sync_settings=SyncSettings(options=settings.render_options(),
                                   max_pods_per_deployment=settings.max_pods_per_deployment,
                                   gang_release_after_seconds=settings.gang_release_after_seconds,
                                   replica_stuck_after_seconds=settings.replica_stuck_after_seconds),
        executor=Executor(kube),
        kube=kube,
        directory_world=directory,
        scaler_settings=ScalerSettings(max_pods_per_deployment=settings.max_pods_per_deployment),
        scaler_executor=ScalerExecutor(kube),
    )


async def _keep_admission_check_active(state: ServiceState) -> None:
    """Kueue deactivates ClusterQueues whose AdmissionCheck is not Active: keep ours Active."""
    while True:
        try:
            await state.executor.keep_admission_check_active()
        except Exception as exc:  # noqa: BLE001 - keep trying; the next round may succeed
            log.warning("could not keep the AdmissionCheck active: %s", exc)
        await asyncio.sleep(state.settings.admission_check_keeper_seconds)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state = build_state(settings)
        app.state.service = state
        keeper = asyncio.create_task(_keep_admission_check_active(state)) if state.kube is not None else None
        # Idleness of the deployments parking scalers govern (docs/scale-to-zero.md#idle-after).
        reader = asyncio.create_task(IdlenessReader(state.kube).run()) if state.kube is not None else None
        # The activator's Pods, for the endpoint switch (docs/scale-to-zero.md#the-endpoint-switch).
        addresses = (asyncio.create_task(keep_current(state.kube, settings.activator_namespace,
                                                      state.sync_settings.activator))
                     if state.kube is not None else None)
        try:
            yield
        finally:
            for task in (keeper, reader, addresses):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            # The listeners have stopped: what runs after a hook's answer finishes, within the grace period.
            await state.executor.drain(settings.shutdown_drain_seconds)
            await state.executor.composition.close()
            if state.kube is not None:
                await state.kube.close()

    app = FastAPI(title="ModelDeployment operator", version="0.1.0", lifespan=lifespan)
    app.include_router(hooks.router)
    app.include_router(scaler_hooks.router)
    app.include_router(webhooks.router)
    describe_hooks(app)  # the hook bodies in /openapi.json
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes, max_values=settings.max_body_values)

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception) -> JSONResponse:
        # Never a plain-text 500: every answer is JSON (docs/metacontroller.md#trust). Handlers catch what they expect.
        log.error("unhandled error on %s: %r", request.url.path, exc)
        return JSONResponse({"error": f"internal error: {type(exc).__name__}"}, status_code=500)

    @app.get("/healthz", response_class=PlainTextResponse)
    async def healthz() -> str:
        return "ok"

    @app.get("/readyz", response_class=PlainTextResponse)
    async def readyz() -> str:
        return "ok"

    @app.get("/metrics")
    async def metrics() -> Response:
        # A deployment this replica no longer syncs shows nothing stale, even when no pass comes here.
        expire_deployment_series()
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    return app


app = create_app()
