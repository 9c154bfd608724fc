"""The service's configuration, from the environment (documented defaults in docs/operations.md)."""

from __future__ import annotations

from pathlib import Path

from pydantic import AliasChoices, Field, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app import quantity, vocab
from app.model.context import (
    DEFAULT_ROUTER_RESOURCES,
    DEFAULT_ROUTING_SIDECAR_RESOURCES,
    ContainerResources,
    RenderOptions,
)

# The resource settings of the operator's own containers: field -> its environment variable.
RESOURCE_SETTINGS = {
    "router_cpu_request": vocab.SETTING_ROUTER_CPU_REQUEST,
    "router_memory_request": vocab.SETTING_ROUTER_MEMORY_REQUEST,
    "router_cpu_limit": vocab.SETTING_ROUTER_CPU_LIMIT,
    "router_memory_limit": vocab.SETTING_ROUTER_MEMORY_LIMIT,
    "routing_sidecar_cpu_request": vocab.SETTING_ROUTING_SIDECAR_CPU_REQUEST,
    "routing_sidecar_memory_request": vocab.SETTING_ROUTING_SIDECAR_MEMORY_REQUEST,
    "routing_sidecar_cpu_limit": vocab.SETTING_ROUTING_SIDECAR_CPU_LIMIT,
    "routing_sidecar_memory_limit": vocab.SETTING_ROUTING_SIDECAR_MEMORY_LIMIT,
}


def _resource_alias(field: str) -> AliasChoices:
    return AliasChoices(RESOURCE_SETTINGS[field], f"MODELDEPLOYMENT_{field.upper()}")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MODELDEPLOYMENT_", extra="ignore")

    # `modeldeployment serve`'s listeners (its --host, --port and --hooks-port win over these). The
    # local defaults keep clear of 8080, where kubectl without a kubeconfig looks for an API server;
    # the manifests and the chart pass their own ports (8443 and 8080).
    host: str = "127.0.0.1"
    # The admission webhooks (TLS with tls_cert_file and tls_key_file, else plain HTTP).
    port: int = Field(default=8443, ge=0, le=65535)
    # Metacontroller's hooks listen here, apart from the webhooks on `port` (docs/operations.md,
    # "Security"); 0 serves hooks and webhooks on `port` together (local runs only).
    hooks_port: int = Field(default=8081, ge=0, le=65535)
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
    # A replica this long in one non-Ready stage gets one ReplicaStuck Warning (docs/status.md#events).
    replica_stuck_after_seconds: float = Field(default=600.0, gt=0)
    admission_check_keeper_seconds: float = 60.0
    # How long a stopping service waits for the teardowns it carries out after a finalize's answer
    # (docs/metacontroller.md#finalize), after the requests in flight (Metacontroller's hook timeout,
    # 10 s): inside the Pod's termination grace period (30 s, docs/operations.md#settings-environment-of-the-service).
    shutdown_drain_seconds: float = Field(default=10.0, ge=0)
    # The namespace of the activator's Service (docs/scale-to-zero.md#the-endpoint-switch): the
    # operator's own; the manifests and the chart pass it from the Pod's namespace.
    activator_namespace: str = "gpustack-system"
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

    # Upgrade rehearsal (docs/operations.md#rehearsing-an-upgrade): 0 in production.
    render_rehearsal: int = Field(
        default=0, ge=0, le=1000,
        validation_alias=AliasChoices(vocab.SETTING_RENDER_REHEARSAL, "render_rehearsal"),
    )

    router_cpu_request: str = Field(default=DEFAULT_ROUTER_RESOURCES.cpu_request,
                                    validation_alias=_resource_alias("router_cpu_request"))
    router_memory_request: str = Field(default=DEFAULT_ROUTER_RESOURCES.memory_request,
                                       validation_alias=_resource_alias("router_memory_request"))
    router_cpu_limit: str = Field(default=DEFAULT_ROUTER_RESOURCES.cpu_limit,
                                  validation_alias=_resource_alias("router_cpu_limit"))
    router_memory_limit: str = Field(default=DEFAULT_ROUTER_RESOURCES.memory_limit,
                                     validation_alias=_resource_alias("router_memory_limit"))
    routing_sidecar_cpu_request: str = Field(default=DEFAULT_ROUTING_SIDECAR_RESOURCES.cpu_request,
                                             validation_alias=_resource_alias("routing_sidecar_cpu_request"))
    routing_sidecar_memory_request: str = Field(default=DEFAULT_ROUTING_SIDECAR_RESOURCES.memory_request,
                                                validation_alias=_resource_alias("routing_sidecar_memory_request"))
    routing_sidecar_cpu_limit: str = Field(default=DEFAULT_ROUTING_SIDECAR_RESOURCES.cpu_limit,
                                           validation_alias=_resource_alias("routing_sidecar_cpu_limit"))
    routing_sidecar_memory_limit: str = Field(default=DEFAULT_ROUTING_SIDECAR_RESOURCES.memory_limit,
                                              validation_alias=_resource_alias("routing_sidecar_memory_limit"))

    @field_validator(*RESOURCE_SETTINGS, mode="after")
    @classmethod
    def _positive_quantity(cls, value: str, info: ValidationInfo) -> str:
        """Each resource setting is a positive Kubernetes quantity (a Pod with another is refused)."""
        name = RESOURCE_SETTINGS[info.field_name or ""]
        try:
            amount = quantity.parse(value)
        except quantity.QuantityError as exc:
            raise ValueError(f"{name}: {exc}; give a quantity such as 500m or 2 (CPU), 512Mi or 2Gi (memory)") from None
        if amount <= 0:
            raise ValueError(f"{name}: {value!r} is not above zero; give a positive quantity")
        return value.strip()

    @model_validator(mode="after")
    def _requests_within_limits(self) -> Settings:
        """A request above its limit is refused by the API server for every router Pod: say so at start."""
        for who in ("router", "routing_sidecar"):
            for resource in ("cpu", "memory"):
                request, limit = f"{who}_{resource}_request", f"{who}_{resource}_limit"
                if quantity.parse(getattr(self, request)) > quantity.parse(getattr(self, limit)):
                    raise ValueError(f"{RESOURCE_SETTINGS[request]} ({getattr(self, request)}) is above "
                                     f"{RESOURCE_SETTINGS[limit]} ({getattr(self, limit)}); raise the limit or "
                                     "lower the request")
        return self

    def render_options(self) -> RenderOptions:
        return RenderOptions(kv_cache_dtype_owned=self.kv_cache_dtype_owned, router_image=self.router_image,
                             routing_sidecar_image=self.routing_sidecar_image,
                             render_rehearsal=self.render_rehearsal,
                             router_resources=ContainerResources(
                                 cpu_request=self.router_cpu_request, memory_request=self.router_memory_request,
                                 cpu_limit=self.router_cpu_limit, memory_limit=self.router_memory_limit),
                             routing_sidecar_resources=ContainerResources(
                                 cpu_request=self.routing_sidecar_cpu_request,
                                 memory_request=self.routing_sidecar_memory_request,
                                 cpu_limit=self.routing_sidecar_cpu_limit,
                                 memory_limit=self.routing_sidecar_memory_limit))
