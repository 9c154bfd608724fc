"""The service's configuration, from the environment (documented defaults in docs/operations.md)."""

from __future__ import annotations

from pathlib import Path

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from app import vocab
from app.model.context import RenderOptions


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MODELDEPLOYMENT_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = 8080
    # Metacontroller's hooks listen here, apart from the webhooks on `port` (docs/operations.md,
    # "Security"); 0 serves hooks and webhooks on `port` together (local runs only).
    hooks_port: int = 8081
    max_body_bytes: int = Field(default=vocab.DEFAULT_MAX_BODY_BYTES, ge=1)
    max_body_values: int = Field(default=vocab.DEFAULT_MAX_BODY_VALUES, ge=1)
    max_pods_per_deployment: int = Field(default=vocab.DEFAULT_MAX_PODS_PER_DEPLOYMENT, ge=1)
    # How often the webhook listener looks for a renewed certificate and key (0: never reloads).
    tls_reload_seconds: float = 10.0
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    # A directory of YAML standing in for the cluster (local runs). Unset: the API server.
    world_dir: Path | None = None
    # "auto": in-cluster or kubeconfig when one is found; "off": no API server (side effects logged).
    kube: str = "auto"
    kubeconfig: Path | None = None
    gang_release_after_seconds: float = 600.0
    admission_check_keeper_seconds: float = 60.0
    # Webhook reads must finish well inside the API server's webhook timeout.
    api_timeout_seconds: float = 4.0
    # One JSON object per log line (app and uvicorn alike), else plain lines; the root level.
    log_json: bool = False
    log_level: str = "INFO"

    kv_cache_dtype_owned: bool = Field(
        default=True,
        validation_alias=AliasChoices(vocab.SETTING_KV_CACHE_DTYPE_OWNED, "MODELDEPLOYMENT_KV_CACHE_DTYPE_OWNED"),
    )
    router_image: str = Field(
        default=RenderOptions().router_image,
        validation_alias=AliasChoices(vocab.SETTING_ROUTER_IMAGE, "MODELDEPLOYMENT_ROUTER_IMAGE"),
    )
    routing_sidecar_image: str = Field(
        default=RenderOptions().routing_sidecar_image,
        validation_alias=AliasChoices(vocab.SETTING_ROUTING_SIDECAR_IMAGE, "MODELDEPLOYMENT_ROUTING_SIDECAR_IMAGE"),
    )

    def render_options(self) -> RenderOptions:
        return RenderOptions(kv_cache_dtype_owned=self.kv_cache_dtype_owned, router_image=self.router_image,
                             routing_sidecar_image=self.routing_sidecar_image)
