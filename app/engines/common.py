"""What an engine renderer hands the Pod renderer: argv, env, annotations, volumes, ports."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from app import vocab
from app.api.v1 import Role
from app.model.context import DeploymentContext

# The store connector's kv_role (docs/rendering.md#kv-cache-attachment): a prefiller both saves to the store and loads the
# prefixes the pool already holds, so it is kv_both like a Server; a decoder only loads.
STORE_KV_ROLE = {vocab.ROLE_KIND_SERVER: "kv_both", vocab.ROLE_KIND_PREFILL: "kv_both",
                 vocab.ROLE_KIND_DECODE: "kv_consumer"}
# The direct P/D leg's kv_role, also the outer role of a MultiConnector.
LEG_KV_ROLE = {vocab.ROLE_KIND_PREFILL: "kv_producer", vocab.ROLE_KIND_DECODE: "kv_consumer"}


@dataclass
class EngineRender:
    argv: list[str] = field(default_factory=list)
    # Operator-owned variables (admission refuses a user duplicate) in render order.
    env: list[dict[str, Any]] = field(default_factory=list)
    # Defaulted variables: a user's own value wins, with no refusal.
    defaulted_env: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    volumes: list[dict[str, Any]] = field(default_factory=list)
    mounts: list[dict[str, Any]] = field(default_factory=list)
    # Extra container ports the engine opens (KV events), as (name, port).
    ports: list[tuple[str, int]] = field(default_factory=list)


def compact_json(document: dict[str, Any]) -> str:
    """Stable JSON for argv and annotations (sorted keys, no spaces): part of the fingerprint."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"))


def value_env(name: str, value: str) -> dict[str, Any]:
    return {"name": name, "value": value}


def cache_rendered(ctx: DeploymentContext, role: Role) -> bool:
    """A managed role on a usable attachment gets the cache client."""
    return role.managed and ctx.attachment is not None and ctx.attachment.usable


def dtype_rendered(ctx: DeploymentContext, role: Role) -> str | None:
    """The Binding's dtype, rendered as --kv-cache-dtype while the operator owns that flag."""
    if not cache_rendered(ctx, role) or not ctx.options.kv_cache_dtype_owned:
        return None
    domain = ctx.attachment.domain if ctx.attachment else None
    return domain.dtype if domain and domain.dtype else None


def tenant(ctx: DeploymentContext) -> str:
    domain = ctx.attachment.domain if ctx.attachment else None
    return domain.name if domain and domain.name else "default"


# The role kinds that produce cache blocks, so publish KV events where the deployment does.
KV_EVENT_PRODUCER_KINDS = (vocab.ROLE_KIND_SERVER, vocab.ROLE_KIND_PREFILL)


def transfer_leg_rendered(ctx: DeploymentContext, role: Role) -> bool:
    """The direct prefill-to-decode leg: a routed pair's managed Prefill and Decode roles."""
    return ctx.routed_pair and role.managed and role.kind in (vocab.ROLE_KIND_PREFILL, vocab.ROLE_KIND_DECODE)


# The kvTransfer/backend protocol whose transport an Ascend pool runs (the store spells it `ascend`).
ASCEND_PROTOCOL = "CANN"


def on_ascend(ctx: DeploymentContext, role: Role) -> bool:
    """The role's InstanceType is an Ascend pool (observed manufacturer), where vLLM names other connectors."""
    instance_type = ctx.world.instance_types.get(role.instance_type)
    manufacturer = instance_type.status.detail.manufacturer if instance_type is not None else None
    return (manufacturer or "").lower() == vocab.MANUFACTURER_ASCEND


def model_source(ctx: DeploymentContext) -> tuple[str, dict[str, Any] | None, str | None]:
    """(what the engine loads, a model volume or None, a revision or None) for the served model."""
    state = ctx.artifact
    if state is None or state.artifact is None or not state.ready:
        return ctx.md.spec.model.name, None, None
    source = state.artifact.spec.source
    if source.persistent_volume_claim is not None:
        pvc = source.persistent_volume_claim
        path = vocab.MODEL_MOUNT_PATH
        if pvc.path:
            path = f"{path}/{pvc.path.strip('/')}" if pvc.path.strip("/") else path
        volume = {"name": vocab.MODEL_VOLUME, "persistentVolumeClaim": {"claimName": pvc.claim_name, "readOnly": True}}
        return path, volume, None
    revision = state.artifact.status.resolved.revision if state.artifact.status.resolved else None
    if source.hugging_face is not None:
        return source.hugging_face.repository, None, revision or source.hugging_face.revision
    return ctx.md.spec.model.name, None, revision


def model_arguments(ctx: DeploymentContext, out: EngineRender) -> tuple[str, list[str]]:
    """What the engine loads, and the arguments that keep the served name and pin the revision.

    Mounts the artifact's volume into `out` when the weights come from one. Both engines spell
    --served-model-name and --revision the same way.
    """
    load, volume, revision = model_source(ctx)
    args: list[str] = []
    if load != ctx.md.spec.model.name:
        args += ["--served-model-name", ctx.md.spec.model.name]
    if revision:
        args += ["--revision", revision]
    if volume is not None:
        out.volumes.append(volume)
        out.mounts.append({"name": vocab.MODEL_VOLUME, "mountPath": vocab.MODEL_MOUNT_PATH, "readOnly": True})
    return load, args
