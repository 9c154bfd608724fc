"""Pure rendering of one role: its Pod template, its Pods per replica, and its Services.

A role renders one template (everything that comes from the spec and the world); each Pod is
that template stamped with its replica ordinal and member index. The template's hash is the
fingerprint: a replica whose Pods carry another fingerprint was built from an older render.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import orjson

from app import vocab
from app.api.cluster import InstanceType
from app.api.objects import KubeObject
from app.api.v1 import Role
from app.engines import argv as engine_argv
from app.engines import takeover
from app.engines.common import EngineRender, cache_rendered
from app.engines.degrees import read_degrees
from app.engines.registry import engine_of, router_for
from app.model.context import DeploymentContext
from app.render import labels, names, tenant
from app.render.errors import RenderError
from app.render.image import ImageChoice, role_image
from app.render.resources import pod_resources
from app.render.revision import effective_revision


@dataclass(frozen=True)
class Ports:
    """Where a role listens: the Service keeps `service`; the Pod answers on `container`.

    `engine` is where the engine itself listens: the same as `container`, except behind a
    decoder's routing proxy, which owns the external port and forwards to the engine.
    """

    service: int
    container: int
    # The --port the operator fills in (None when the user's own --port is in charge).
    filled: int | None
    engine: int
    proxied: bool = False


@dataclass
class RoleRender:
    role: Role
    image: str
    fingerprint: str
    ports: Ports
    template: KubeObject  # the Pod template (instance_pods stamps it per ordinal)
    # Why no new replica of this role may be created now (None: free to create).
    hold: str | None = None
    skipped_runtime_versions: tuple[str, ...] = ()
    runtime_version: str | None = None
    kv_events: bool = False
    extra_children: list[KubeObject] = field(default_factory=list)
    # The user's tenant-bearing keys dropped from this render (app.render.tenant): a warning Event each.
    tenant_keys_ignored: tuple[str, ...] = ()

    @property
    def unmanaged(self) -> bool:
        return not self.role.managed


def user_port(engine: str, role: Role) -> int | None:
    """The --port the engine will read from the role's own arguments, if any."""
    args = role.extra_args if role.managed else (takeover.engine_args_of_command(engine, role.command or []) or [])
    reading = engine_argv.read_port(engine, args)
    return reading.port


def role_ports(engine: str, role: Role, *, proxied: bool = False) -> Ports:
    """The external port (declared, else 8000) and where the engine listens (its own --port wins)."""
    own = user_port(engine, role)
    external = role.ports[0].port if role.ports else vocab.DEFAULT_SERVING_PORT
    if proxied:
        listen = own if own is not None else vocab.ROUTING_PROXY_ENGINE_PORT
        return Ports(service=external, container=external, filled=None if own is not None else listen,
                     engine=listen, proxied=True)
    if role.ports:
        return Ports(service=external, container=external, filled=external if role.managed and own is None else None,
                     engine=external)
    if own is not None:
        return Ports(service=external, container=own, filled=None, engine=own)
    return Ports(service=external, container=external, filled=external if role.managed else None, engine=external)


# What every unprivileged container of an engine Pod runs with (docs/engines.md#pod-security).
RESTRICTED_CONTAINER: dict[str, Any] = {"allowPrivilegeEscalation": False,
                                        "seccompProfile": {"type": "RuntimeDefault"}}


def engine_security_context(role: Role) -> dict[str, Any]:
    """The engine container's securityContext (docs/engines.md#pod-security): no privilege
    escalation and the runtime's default seccomp profile, unless the role asks to run privileged
    (the API server refuses allowPrivilegeEscalation: false beside privileged: true, and a
    privileged container runs without a seccomp profile anyway)."""
    if role.privileged:
        return {"privileged": True}
    context: dict[str, Any] = {} if role.privileged is None else {"privileged": False}
    return {**context, **copy.deepcopy(RESTRICTED_CONTAINER)}


def routing_proxy(ctx: DeploymentContext, role: Role, ports: Ports) -> dict[str, Any]:
    """The routing sidecar as a native sidecar (restartable init container) owning the external port."""
    degrees = read_degrees(ctx.md.spec.engine.name, role.extra_args,
                           {e.name: e.value or "" for e in role.env}).degrees
    # One proxy port per externally load-balanced data-parallel rank; internal DP is one server.
    data_parallel = (degrees.data_local or degrees.data) if degrees.data_external_lb else 1
    return {
        "name": vocab.CONTAINER_ROUTING_PROXY,
        "image": ctx.options.routing_sidecar_image,
        "restartPolicy": "Always",
        "args": [
            f"--port={ports.container}",
            f"--model-server-port={ports.engine}",
            "--kv-connector=mooncake",
            f"--mooncake-bootstrap-port={vocab.PREFILL_BOOTSTRAP_PORT}",
            "--secure-proxy=false",
            f"--data-parallel-size={data_parallel}",
        ],
        "ports": [{"name": vocab.PORT_NAME_HTTP, "containerPort": ports.container, "protocol": "TCP"}],
        "livenessProbe": {"httpGet": {"path": vocab.HEALTH_PATH, "port": ports.container}, "periodSeconds": 10},
        "resources": ctx.options.routing_sidecar_resources.as_kube(),
        "securityContext": copy.deepcopy(RESTRICTED_CONTAINER),
    }


def _engine_render(ctx: DeploymentContext, role: Role, ports: Ports) -> EngineRender:
    if not role.managed:
        return EngineRender(argv=list(role.command or []))
    return engine_of(ctx.md).render(ctx, role, listen_port=ports.filled)


def _env(role: Role, engine: EngineRender) -> list[dict[str, Any]]:
    """Owned variables, then defaulted ones the user did not set, then the user's own."""
    user = [{"name": e.name, "value": e.value or ""} for e in role.env]
    user_names = {e.name for e in role.env}
    defaulted = [{"name": k, "value": v} for k, v in engine.defaulted_env.items() if k not in user_names]
    env = list(engine.env) + defaulted + user
    if role.size > 1:
        env += [
            {"name": vocab.ENV_REPLICA_SIZE, "value": str(role.size)},
            {"name": vocab.ENV_MEMBER_INDEX,
             "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{vocab.LABEL_MEMBER_INDEX}']"}}},
        ]
    return env


def _volumes(role: Role, engine: EngineRender) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    for index, extra in enumerate(role.additional_volumes):
        name = f"extra-{index}"
        if extra.config_map is not None:
            volumes.append({"name": name, "configMap": {"name": extra.config_map.name}})
        elif extra.secret is not None:
            volumes.append({"name": name, "secret": {"secretName": extra.secret.name}})
        elif extra.host_path is not None:
            host: dict[str, Any] = {"path": extra.host_path.path}
            if extra.host_path.type:
                host["type"] = extra.host_path.type
            volumes.append({"name": name, "hostPath": host})
        else:
            continue
        mount: dict[str, Any] = {"name": name, "mountPath": extra.mount_path}
        if extra.read_only is not None:
            mount["readOnly"] = extra.read_only
        if extra.sub_path:
            mount["subPath"] = extra.sub_path
        mounts.append(mount)
    if not any(v.mount_path.rstrip("/") == vocab.SHM_PATH for v in role.additional_volumes):
        volumes.append({"name": vocab.SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": vocab.SHM_SIZE_LIMIT}})
        mounts.append({"name": vocab.SHM_VOLUME, "mountPath": vocab.SHM_PATH})
    return volumes + engine.volumes, mounts + engine.mounts


def _probes(ports: Ports) -> dict[str, Any]:
    """All three probes follow the external listener (docs/rendering.md#ports-and-probes); behind the routing proxy they go
    through it to the engine, so a decoder is Ready (and alive) only when the proxy reaches it."""
    external = {"httpGet": {"path": vocab.PROXIED_READINESS_PATH if ports.proxied else vocab.HEALTH_PATH,
                            "port": ports.container}}
    return {
        "startupProbe": {**external, "periodSeconds": vocab.STARTUP_PERIOD_SECONDS,
                         "failureThreshold": vocab.STARTUP_FAILURE_THRESHOLD},
        "readinessProbe": {**external, "periodSeconds": 5, "failureThreshold": 3},
        "livenessProbe": {**external, "periodSeconds": 10, "failureThreshold": 3},
    }


def _container_ports(role: Role, ports: Ports, engine: EngineRender) -> list[dict[str, Any]]:
    if ports.proxied:
        out = [{"name": "engine", "containerPort": ports.engine, "protocol": "TCP"}]
        seen = {(ports.engine, "TCP"), (ports.container, "TCP")}
    else:
        out = [{"name": vocab.PORT_NAME_HTTP, "containerPort": ports.container, "protocol": "TCP"}]
        seen = {(ports.container, "TCP")}
    for extra in role.ports:
        if (extra.port, extra.protocol) in seen:
            continue
        seen.add((extra.port, extra.protocol))
        out.append({"name": f"port-{extra.port}", "containerPort": extra.port, "protocol": extra.protocol})
    for name, port in engine.ports:
        if (port, "TCP") not in seen:
            seen.add((port, "TCP"))
            out.append({"name": name, "containerPort": port, "protocol": "TCP"})
    return out


def instance_type_of(ctx: DeploymentContext, role: Role) -> InstanceType:
    instance_type = ctx.world.instance_types.get(role.instance_type)
    if instance_type is None:
        absence = ctx.world.absence(vocab.KIND_INSTANCE_TYPE, role.instance_type)
        raise RenderError(
            f"roles[{role.name}].instanceType: InstanceType {role.instance_type!r} {absence}; create or repair it, "
            f"or name an existing type (resolves once it can be read)", retryable=True)
    return instance_type


def _image(ctx: DeploymentContext, role: Role, instance_type: InstanceType) -> ImageChoice:
    """The role's image (its own, else the runner image synthesized for its pool)."""
    return role_image(ctx.md, role, instance_type)


def _queue(role: Role, instance_type: InstanceType) -> str:
    """The Kueue LocalQueue the role's Pods enter: the InstanceType's published entrance."""
    queue = instance_type.status.entrance
    if not queue:
        raise RenderError(
            f"roles[{role.name}].instanceType: InstanceType {role.instance_type!r} has not published its Kueue "
            f"entrance (status.entrance) yet; Pods are created once it does", retryable=True)
    return queue


def _resources(ctx: DeploymentContext, role: Role, instance_type: InstanceType) -> dict[str, Any]:
    """Requests (equal to limits) of the engine container, fabric interfaces for the legs it renders."""
    protocols = engine_of(ctx.md).role_protocols(ctx, role)
    try:
        return pod_resources(role.resources, instance_type, protocols)
    except RenderError as exc:  # the message names the field within; the role and section prefix it
        raise RenderError(f"roles[{role.name}].resources: {exc}", retryable=exc.retryable) from exc


def _engine_container(role: Role, guarded: Role, image: str, ports: Ports, rendered: EngineRender,
                      resources: dict[str, Any], mounts: list[dict[str, Any]]) -> dict[str, Any]:
    """The engine container: the rendered command line, ports, resources, mounts, probes, env.
    `guarded` is the role as the tenant guard lets the Pod carry it."""
    container: dict[str, Any] = {
        "name": vocab.CONTAINER_ENGINE,
        "image": image,
        "command": rendered.argv,
        "ports": _container_ports(role, ports, rendered),
        "resources": {"requests": resources, "limits": dict(resources)},
        "volumeMounts": mounts,
        **_probes(ports),
        # The kubelet sends SIGTERM only after this pause, by which time the endpoint controllers and
        # kube-proxy have taken the terminating Pod out of its Services: a turnover refuses no
        # connection (docs/rendering.md#ports-and-probes).
        "lifecycle": {"preStop": {"sleep": {"seconds": vocab.ENGINE_PRE_STOP_SECONDS}}},
    }
    env = _env(guarded, rendered)
    if env:
        container["env"] = env
    if role.image_pull_policy:
        container["imagePullPolicy"] = role.image_pull_policy
    container["securityContext"] = engine_security_context(role)
    return container


def _pod_metadata(ctx: DeploymentContext, role: Role, queue: str, rendered: EngineRender) -> dict[str, Any]:
    """The template's labels (the role's, its kind, its queue, the router's) and annotations (the
    pod group's, the engine's, the router's, the topology)."""
    pod_labels = {
        **labels.common(ctx.name, role.name),
        vocab.LABEL_ROLE_KIND: role.kind_label,
        vocab.LABEL_KUEUE_QUEUE_NAME: queue,
    }
    annotations = {
        vocab.ANNOTATION_KUEUE_GROUP_TOTAL_COUNT: str(role.size),
        vocab.ANNOTATION_KUEUE_ROLE_HASH: role.name,
        vocab.ANNOTATION_KUEUE_GROUP_SERVING: "true",
        **rendered.annotations,
    }
    router = ctx.md.spec.router
    if router is not None:
        entry = router_for(router.name)
        if ctx.routed_pair and role.kind == vocab.ROLE_KIND_PREFILL:
            annotations.update(entry.prefill_annotations)
        pod_labels.update(entry.pod_labels(ctx.md.spec.engine.name))
    if role.topology and role.topology.required_level:
        annotations[vocab.ANNOTATION_KUEUE_REQUIRED_TOPOLOGY] = role.topology.required_level
    if ctx.options.render_rehearsal:
        annotations[vocab.ANNOTATION_RENDER_REHEARSAL] = str(ctx.options.render_rehearsal)
    return {"labels": pod_labels, "annotations": annotations}


def _pod_spec(ctx: DeploymentContext, role: Role, ports: Ports, container: dict[str, Any],
              volumes: list[dict[str, Any]]) -> dict[str, Any]:
    """The template's spec: the engine container, the routing proxy in front of it when proxied."""
    spec: dict[str, Any] = {
        "containers": [container],
        **({"initContainers": [routing_proxy(ctx, role, ports)]} if ports.proxied else {}),
        "volumes": volumes,
        "restartPolicy": "Always",
        "enableServiceLinks": False,
        # Engines never call the API server: no service-account token in their Pods.
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": role.termination_grace_period_seconds or vocab.DEFAULT_TERMINATION_GRACE_SECONDS,
    }
    if role.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": s.name} for s in role.image_pull_secrets]
    return spec


def render_role(ctx: DeploymentContext, role: Role) -> RoleRender:
    """The role's template and fingerprint, or a RenderError naming what to fix."""
    instance_type = instance_type_of(ctx, role)
    choice = _image(ctx, role, instance_type)
    queue = _queue(role, instance_type)
    engine = ctx.md.spec.engine.name
    entry = engine_of(ctx.md)
    ports = role_ports(engine, role, proxied=entry.routing_proxy_rendered(ctx, role))
    # The user's arguments, env and volumes as the Pod may carry them: never a tenant-bearing key of theirs.
    guarded = tenant.guard(engine, cache_rendered(ctx, role), role)
    rendered = _engine_render(ctx, guarded.role, ports)
    resources = _resources(ctx, role, instance_type)
    volumes, mounts = _volumes(guarded.role, rendered)
    container = _engine_container(role, guarded.role, choice.image, ports, rendered, resources, mounts)
    template = {"apiVersion": "v1", "kind": "Pod", "metadata": _pod_metadata(ctx, role, queue, rendered),
                "spec": _pod_spec(ctx, role, ports, container, volumes)}
    fingerprint = names.fingerprint(orjson.dumps(template, option=orjson.OPT_SORT_KEYS))
    return RoleRender(role=role, image=choice.image, fingerprint=fingerprint, ports=ports, template=template,
                      hold=ctx.hold(role), skipped_runtime_versions=choice.skipped_runtime_versions,
                      runtime_version=choice.runtime_version, kv_events=entry.kv_events_rendered(ctx, role),
                      tenant_keys_ignored=guarded.ignored)


def instance_pods(ctx: DeploymentContext, render: RoleRender, ordinal: int, incarnation: int = 0,
                  generation: int | None = None, slot: int | None = None) -> list[KubeObject]:
    """The Pods of replica `ordinal`: the template stamped with names, ordinal and member index
    and the ordinal's incarnation (a size-1 Pod is named after it: see names.single_pod), the
    render revision and the spec generation they are rendered from (`generation`, else the
    deployment's own: a kept replica is returned with the one it was created under), in the
    pod-group slot `slot` (else the incarnation's: a kept replica is returned in the slot it was
    created in, docs/kueue.md#incarnation-slots).

    Called for every replica on every sync: what is the same for all members is computed once,
    and each Pod still gets its own metadata, labels, annotations, spec, container and env.
    """
    role = render.role
    deployment, namespace, size = ctx.name, ctx.namespace, role.size
    group = names.pod_group(namespace, deployment, role.name, ordinal, names.slot_of(incarnation) if slot is None else slot)
    template = render.template
    template_spec = template["spec"]
    base_container = template_spec["containers"][0]
    sidecars = template_spec["containers"][1:]
    # Label order as always: the template's, then ordinal, member index, pod group.
    base_labels = {**template["metadata"]["labels"], vocab.LABEL_POD_ORDINAL: str(ordinal),
                   vocab.LABEL_MEMBER_INDEX: "", vocab.LABEL_KUEUE_POD_GROUP_NAME: group,
                   vocab.LABEL_RENDER_REVISION: str(effective_revision(ctx.options.render_rehearsal))}
    base_annotations = {**template["metadata"]["annotations"], vocab.ANNOTATION_FINGERPRINT: render.fingerprint}
    if incarnation > 0:
        base_annotations[vocab.ANNOTATION_INCARNATION] = str(incarnation)
    generation = ctx.md.metadata.generation if generation is None else generation
    if generation is not None:
        base_annotations[vocab.ANNOTATION_SPEC_GENERATION] = str(generation)
    if size > 1:
        subdomain = names.instance(deployment, role.name, ordinal)
        leader_address = names.leader_address(deployment, role.name, ordinal)
        base_env = base_container.get("env", [])
    pods = []
    for member in range(size):
        meta_labels = dict(base_labels)
        meta_labels[vocab.LABEL_MEMBER_INDEX] = str(member)
        container = dict(base_container)
        spec = dict(template_spec)
        if size > 1:
            name = names.member_pod_in_slot(deployment, role.name, ordinal, member, names.slot_of(incarnation) if slot is None else slot)
            spec["hostname"] = names.member_pod(deployment, role.name, ordinal, member)
            spec["subdomain"] = subdomain
            container["env"] = [{"name": vocab.ENV_LEADER_ADDRESS, "value": leader_address}, *base_env]
            if member > 0:
                # Only the leader serves the OpenAI API; workers have no HTTP listener to probe.
                for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                    container.pop(probe, None)
                spec.pop("initContainers", None)  # the routing proxy fronts the leader only
        else:
            name = names.single_pod(deployment, role.name, ordinal, render.fingerprint, incarnation)
        spec["containers"] = [container, *sidecars]
        pods.append({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": meta_labels,
                         "annotations": dict(base_annotations)},
            "spec": spec,
        })
    return pods
