"""The validating rules (docs/admission.md#the-rules) that read the deployment's shape and the cluster objects.

Each rule is one small function of a `Subject` returning its refusals (every one it finds, each
with an indexed field path, what is wrong and the way out). The command-line rules (owned keys,
dtype, ports, degrees) live in `app.admission.cmdline`; the frozen-field rule in
`app.admission.frozen`.

Rules that read an InstanceType decline for a deployment being deleted: such a rule refuses when
the type is absent, and a deleted type must not block the update that clears the finalizer. The
validator passes `world=None` then, and every rule below that needs the world returns nothing.
"""

from __future__ import annotations

import re
from typing import Any

from app import quantity, vocab
from app.admission import fields
from app.admission.model import Notice, Refusal, Subject, role_path
from app.api.cluster import InstanceType, KVCacheBackend, KVCachePool, KVCachePoolBinding
from app.api.objects import KubeObject
from app.api.v1 import Role
from app.control import bounds
from app.engines.common import on_ascend, transfer_leg_rendered
from app.engines.registry import ENGINES, ROUTERS, engine_for, router_for, routers_fronting
from app.model.context import RenderOptions, backend_protocols, build_context
from app.render import names, tenant
from app.render.pod import role_ports
from app.world import World

_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
ROLE_SET_FROZEN = "the role set is frozen, so this takes another deployment"
AGENT = {vocab.ROLE_KIND_PREFILL: "prefiller", vocab.ROLE_KIND_DECODE: "decoder"}


# --- shape: rules 1, 2, 8, 9, 10, 11, 17 ------------------------------------------------------


def too_many_roles(raw: KubeObject) -> list[Refusal]:
    """Rule 1, read from the object as sent (a model with 11 roles does not parse)."""
    roles = (raw.get("spec") or {}).get("roles") if isinstance(raw.get("spec"), dict) else None
    if isinstance(roles, list) and len(roles) > vocab.MAX_ROLES:
        return [Refusal("spec.roles", f"{len(roles)} roles are declared; a deployment has at most {vocab.MAX_ROLES}",
                        f"split the roles across several deployments of at most {vocab.MAX_ROLES} roles each")]
    return []


def duplicate_names(subject: Subject) -> list[Refusal]:
    """Role names, env names and ports are list-map keys (the API server enforces it; offline runs do not)."""
    out: list[Refusal] = []
    seen: dict[str, int] = {}
    for index, role in enumerate(subject.md.spec.roles):
        if role.name in seen:
            out.append(Refusal(role_path(index, "name"), f"role name {role.name!r} is already used by "
                               f"spec.roles[{seen[role.name]}]", "give every role its own name"))
        seen.setdefault(role.name, index)
        env_seen: set[str] = set()
        for j, entry in enumerate(role.env):
            if entry.name in env_seen:
                out.append(Refusal(role_path(index, f"env[{j}].name"), f"variable {entry.name!r} is set twice",
                                   "keep one entry per name"))
            env_seen.add(entry.name)
        port_seen: set[tuple[int, str]] = set()
        for j, port in enumerate(role.ports):
            if (port.port, port.protocol) in port_seen:
                out.append(Refusal(role_path(index, f"ports[{j}]"), f"port {port.port}/{port.protocol} is declared "
                                   "twice", "keep one entry per port and protocol"))
            port_seen.add((port.port, port.protocol))
    return out


def _max_replicas_fitting(deployment: str, role: Role) -> int:
    """The largest replica count whose generated names still fit in a DNS label (0: none fits)."""
    low, high = 0, 1024
    while low < high:
        middle = (low + high + 1) // 2
        if len(names.longest_generated_name(deployment, role.name, middle, role.size)) <= names.LABEL_MAX:
            low = middle
        else:
            high = middle - 1
    return low


def generated_names(subject: Subject) -> list[Refusal]:
    """Rule 2: every Pod/Service name a role generates must be a hostname and a DNS label (≤ 63)."""
    out: list[Refusal] = []
    deployment = subject.md.metadata.name
    for index, role in enumerate(subject.md.spec.roles):
        if _names_unchanged(subject, role):
            continue
        longest = names.longest_generated_name(deployment, role.name, role.replicas, role.size)
        excess = len(longest) - names.LABEL_MAX
        if excess <= 0:
            continue
        ways = [f"a role name shorter by {excess} character{'s' if excess > 1 else ''}",
                f"a deployment name shorter by {excess} character{'s' if excess > 1 else ''} (names are frozen: "
                "create the deployment under the shorter name)"]
        fitting = _max_replicas_fitting(deployment, role)
        if 0 < fitting < role.replicas:
            ways.append(f"at most {fitting} replicas")
        out.append(Refusal(
            role_path(index),
            f"the longest name role {role.name!r} generates for {role.replicas} replica(s) of size {role.size} is "
            f"{longest!r}, {len(longest)} characters; a hostname and DNS label hold at most {names.LABEL_MAX}",
            "declare " + ", or ".join(ways),
        ))
    return out


def _names_unchanged(subject: Subject, role: Role) -> bool:
    """Rule 2's exemption: the stored object had this role with the same replicas and size, so it
    generates no name it did not generate before (an image edit is never refused for its names)."""
    stored = subject.old_role(role.name)
    return stored is not None and stored.replicas == role.replicas and stored.size == role.size


def service_labels(subject: Subject) -> list[Refusal]:
    """Rule 8: `<deployment>-<role>` names a Service, so it must be a DNS-1035 label.

    Exempt for roles the stored object already had: they were admitted under the rule of their day
    and the role set is frozen, so refusing them would refuse every later update."""
    out: list[Refusal] = []
    deployment = subject.md.metadata.name
    new_roles = any(subject.old_role(role.name) is None for role in subject.md.spec.roles)
    new_router = subject.md.spec.router is not None and (subject.old is None or subject.old.spec.router is None)
    if (new_roles or new_router) and not names.DNS1035_LABEL.match(deployment):
        # The deployment's own name is at fault (a capital, '_', a dot, a digit first): no role name fixes it.
        return [Refusal("metadata.name", f"{deployment!r} begins the name of each of the deployment's Services "
                        f"('{deployment}-<role>', '{deployment}-router'), which must be a DNS-1035 label (a lowercase "
                        "letter first, then lowercase letters, digits and '-', no dot)",
                        f"create the deployment under a name such as {fields.suggested_name(deployment)!r} (a "
                        "deployment's name cannot change)")]
    for index, role in enumerate(subject.md.spec.roles):
        if subject.old_role(role.name) is not None:
            continue
        service = names.role_service(deployment, role.name)
        problem = _dns1035_problem(service)
        if problem:
            out.append(Refusal(
                role_path(index, "name"),
                f"the role's Service would be named {service!r}, which {problem}",
                "use a shorter role name, or a deployment name that starts with a letter, has no dot and leaves room "
                "for '-<role>' (the deployment name is frozen: create it under the new name)",
            ))
    router = subject.md.spec.router
    if router is not None and (subject.old is None or subject.old.spec.router is None):
        service = names.router(deployment)
        problem = _dns1035_problem(service)
        if problem:
            out.append(Refusal("spec.router", f"the router's Service would be named {service!r}, which {problem}",
                               "use a deployment name that starts with a letter, has no dot and leaves room for "
                               "'-router'"))
    return out


def _dns1035_problem(name: str) -> str | None:
    if len(name) > names.LABEL_MAX:
        return f"is {len(name)} characters, over the {names.LABEL_MAX} of a DNS-1035 label"
    if "." in name:
        return "contains a dot, which a DNS-1035 label cannot"
    if not names.DNS1035_LABEL.match(name):
        return "is not a DNS-1035 label (a lowercase letter first, then letters, digits and '-')"
    return None


def service_collisions(subject: Subject) -> list[Refusal]:
    """Rule 9: no two Services of one deployment may share a name (role, per-instance, router)."""
    deployment = subject.md.metadata.name
    owners: dict[str, tuple[int | None, str]] = {}
    if subject.md.spec.router is not None:
        owners[names.router(deployment)] = (None, "the router's Service")
    out: list[Refusal] = []
    generated: list[tuple[str, int, str]] = []
    # Instance Services first: a collision is then reported at the role whose own Service repeats a name.
    for index, role in enumerate(subject.md.spec.roles):
        if role.size > 1:
            for ordinal in range(role.replicas):
                generated.append((names.instance(deployment, role.name, ordinal), index,
                                  f"the headless Service of replica {ordinal} of role {role.name!r} (size {role.size})"))
    for index, role in enumerate(subject.md.spec.roles):
        generated.append((names.role_service(deployment, role.name), index, f"the Service of role {role.name!r}"))
    for name, index, what in generated:
        if name not in owners:
            owners[name] = (index, what)
            continue
        other_index, other = owners[name]
        if other_index == index:
            continue
        where = f" (spec.roles[{other_index}])" if other_index is not None else " (spec.router)"
        ways = [f"rename a role ({ROLE_SET_FROZEN})"]
        if "replica" in what or "replica" in other:
            ways.append("declare fewer replicas of the role whose replica Service collides")
        if other_index is None:
            ways.append("remove spec.router")
        out.append(Refusal(role_path(index, "name"), f"{what} would be {name!r}, the same name as {other}{where}",
                           "; or ".join(ways)))
    return out


def topology_level(subject: Subject) -> list[Refusal]:
    """Rule 10: requiredLevel is a label key naming a topology level; the hostname level is implicit."""
    out: list[Refusal] = []
    for index, role in enumerate(subject.md.spec.roles):
        level = role.topology.required_level if role.topology else None
        if not level:
            continue
        path = role_path(index, "topology", "requiredLevel")
        if level == vocab.LABEL_HOSTNAME:
            out.append(Refusal(path, f"{vocab.LABEL_HOSTNAME} is implicit and cannot be required explicitly",
                               "name a wider level (a rack, block or zone label key), or leave requiredLevel empty "
                               "for unconstrained topology-aware placement"))
            continue
        problem = label_key_problem(level)
        if problem:
            out.append(Refusal(path, f"{level!r} is not a Kubernetes label key: {problem}",
                               "name a node label key such as topology.kubernetes.io/zone (the level, not a domain "
                               "value), or leave requiredLevel empty"))
    return out


def label_key_problem(key: str) -> str | None:
    prefix, _, name = key.rpartition("/")
    if "/" in key and not prefix:
        return "the prefix before '/' is empty"
    if prefix:
        if len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix):
            return f"the prefix {prefix!r} is not a DNS subdomain of at most 253 characters"
    if not name:
        return "the name part is empty"
    if len(name) > 63:
        return f"the name part is {len(name)} characters, over 63"
    if not _QUALIFIED_NAME.match(name):
        return "the name part must start and end with a letter or digit and hold only letters, digits, '-', '_' and '.'"
    return None


def role_kinds(subject: Subject) -> list[Refusal]:
    """Rule 11: Server roles stand alone; Prefill and Decode appear at most once each."""
    out: list[Refusal] = []
    roles = subject.md.spec.roles
    others = [r for r in roles if r.kind != vocab.ROLE_KIND_SERVER]
    if others and len(others) < len(roles):
        shown = ", ".join(f"{r.name}={r.kind}" for r in roles)
        for index, role in enumerate(roles):
            if role.kind == vocab.ROLE_KIND_SERVER:
                out.append(Refusal(role_path(index, "kind"),
                                   f"a Server role cannot sit beside Prefill or Decode roles ({shown})",
                                   "put the Server roles and the prefill/decode pair in separate deployments "
                                   f"({ROLE_SET_FROZEN})"))
    first: dict[str, int] = {}
    for index, role in enumerate(roles):
        if role.kind == vocab.ROLE_KIND_SERVER:
            continue
        if role.kind in first:
            out.append(Refusal(role_path(index, "kind"),
                               f"role {role.name!r} is a second {role.kind} role (spec.roles[{first[role.kind]}] is "
                               f"one already); nothing downstream can reach a second {AGENT[role.kind]}",
                               f"declare one {role.kind} role and scale it with replicas ({ROLE_SET_FROZEN})"))
        first.setdefault(role.kind, index)
    return out


def engine_version(subject: Subject) -> list[Refusal]:
    """Rule 17: a role with no image has one synthesized from engine.version, so it must be set."""
    if subject.md.spec.engine.version:
        return []
    imageless = [r.name for r in subject.md.spec.roles if not r.image]
    if not imageless:
        return []
    return [Refusal(
        "spec.engine.version",
        f"is empty, and role(s) {', '.join(repr(n) for n in imageless)} name no image, so theirs is synthesized "
        f"from it (gpustack/runner:<backend><runtime>[-<variant>]-{subject.engine.lower()}<version>)",
        "set spec.engine.version, or name an image in roles[].image for each of those roles",
    )]


def engine_version_notices(subject: Subject) -> list[Notice]:
    """Accepted, but said: engine.version is not the release whose option table admission reads
    command lines with (app/engines/data/), so a flag added or renamed since may be misread."""
    version = subject.md.spec.engine.version
    engine = ENGINES.get(subject.engine)
    if not version or engine is None or version.removeprefix("v") == engine.version:
        return []
    return [Notice("spec.engine.version", f"{version!r} is not the {engine.name} release admission reads command "
                   f"lines as ({engine.version}): an option added, renamed or removed since may be misread in "
                   "extraArgs or command")]


# --- volumes ----------------------------------------------------------------------------------


def volumes(subject: Subject) -> list[Refusal]:
    """additionalVolumes: subPath relative without '..', exactly one source, distinct mount paths."""
    out: list[Refusal] = []
    for index, role in enumerate(subject.md.spec.roles):
        mounts: dict[str, int] = {}
        for j, volume in enumerate(role.additional_volumes):
            base = role_path(index, f"additionalVolumes[{j}]")
            if volume.sub_path is not None:
                segments = volume.sub_path.replace("\\", "/").split("/")
                if volume.sub_path.startswith("/"):
                    out.append(Refusal(f"{base}.subPath", f"{volume.sub_path!r} is absolute",
                                       "give a path relative to the volume's root"))
                elif ".." in segments:
                    out.append(Refusal(f"{base}.subPath", f"{volume.sub_path!r} contains '..'",
                                       "give a path inside the volume, without '..'"))
            sources = [n for n, v in (("configMap", volume.config_map), ("secret", volume.secret),
                                      ("hostPath", volume.host_path)) if v is not None]
            if len(sources) != 1:
                out.append(Refusal(base, "names no source" if not sources else
                                   f"names {len(sources)} sources ({', '.join(sources)})",
                                   "set exactly one of configMap, secret or hostPath"))
            if volume.host_path is not None and not volume.host_path.path.startswith("/"):
                out.append(Refusal(f"{base}.hostPath.path", f"{volume.host_path.path!r} is not absolute",
                                   "give an absolute path on the node"))
            key = volume.mount_path.rstrip("/") or "/"
            if key in mounts:
                out.append(Refusal(f"{base}.mountPath", f"{volume.mount_path!r} is already mounted by "
                                   f"additionalVolumes[{mounts[key]}]", "mount each volume at its own path"))
            mounts.setdefault(key, j)
    return out


def operator_owned_mounts(subject: Subject) -> list[Refusal]:
    """Rule 20: on a managed role, no additionalVolumes mount at, over or under a path the operator
    mounts (the KV cache client configuration and its file, /dev/shm): it would silently replace
    what the operator put there, the tenant's client configuration included."""
    out: list[Refusal] = []
    for index, role in enumerate(subject.md.spec.roles):
        if not role.managed:
            continue
        for j, volume in enumerate(role.additional_volumes):
            conflict = tenant.owned_path_conflict(volume.mount_path, vocab.OPERATOR_OWNED_MOUNT_PATHS)
            if conflict is None:
                continue
            relation, owned = conflict
            out.append(Refusal(role_path(index, f"additionalVolumes[{j}].mountPath"),
                               f"{volume.mount_path!r} is {relation} {owned}, which the operator mounts on a managed "
                               "role", "mount the volume elsewhere, or own the whole command line with "
                               "roles[].command"))
    return out


def total_pods(subject: Subject) -> list[Refusal]:
    """Rule 21: Σ replicas × size within MODELDEPLOYMENT_MAX_PODS_PER_DEPLOYMENT (one sync's memory)."""
    problem = bounds.too_many_pods(subject.md, subject.max_pods)
    if problem is None:
        return []
    return [Refusal("spec.roles", problem, bounds.REMEDY)]


# --- cluster objects: rules 4, 5, 6, 7, 16 ----------------------------------------------------


def _cards(value: Any) -> tuple[int | None, str | None]:
    """(whole cards, problem) for resources.accelerator as sent."""
    if value is None:
        return None, None
    try:
        cards = quantity.whole(value)
    except quantity.QuantityError:
        return None, f"{value!r} is not a quantity"
    if cards is None:
        return None, f"{value!r} is not a whole number of cards"
    if cards < 0:
        return None, f"{value!r} is negative"
    return cards, None


def accelerator_shape(subject: Subject) -> list[Refusal]:
    """Rule 4, the part the object alone answers: whole cards; a partition excludes a slice; both need 1 card."""
    out: list[Refusal] = []
    for index, role in enumerate(subject.md.spec.roles):
        res = role.resources
        path = role_path(index, "resources")
        cards, problem = _cards(res.accelerator)
        if problem:
            out.append(Refusal(f"{path}.accelerator", problem, "request a whole number of cards per Pod (0, 1, 2…); "
                               "a share of one card is a slice (acceleratorSliced*Percentage) or a partition "
                               "(acceleratorPartitionedProfile)"))
        sliced = bool(res.accelerator_sliced_memory_percentage or res.accelerator_sliced_cores_percentage)
        partitioned = bool(res.accelerator_partitioned_profile)
        if sliced and partitioned:
            out.append(Refusal(f"{path}.acceleratorPartitionedProfile",
                               "a partition profile cannot be combined with a slice percentage",
                               "request either a logical slice (acceleratorSliced*Percentage) or a physical "
                               "partition (acceleratorPartitionedProfile), not both"))
        if (sliced or partitioned) and cards is not None and cards != 1:
            out.append(Refusal(f"{path}.accelerator",
                               f"a {'partition' if partitioned else 'slice'} is a share of one card, but "
                               f"{cards} cards are requested", "set accelerator to 1 (or leave it unset)"))
    return out


def _offered(it: InstanceType) -> str:
    modes = [f"whole cards (capacity {it.status.accelerator.capacity})"]
    if it.offers_slices:
        modes.append(f"logical slices ({it.status.detail.sliced_detail.logical.count})")
    if it.offers_partitions:
        modes.append(f"partitions {', '.join(it.partition_profiles) or '(no profile listed)'}")
    return "; ".join(modes)


def instance_types(subject: Subject) -> list[Refusal]:
    """Rule 4 against the live InstanceType: it exists, offers the mode, has the capacity."""
    world = subject.world
    if world is None:
        return []
    out: list[Refusal] = []
    for index, role in enumerate(subject.md.spec.roles):
        it = world.instance_types.get(role.instance_type)
        if it is None:
            absence = world.absence(vocab.KIND_INSTANCE_TYPE, role.instance_type)
            out.append(Refusal(role_path(index, "instanceType"), f"InstanceType {role.instance_type!r} {absence}",
                               "name an existing InstanceType (kubectl get instancetypes), or have an administrator "
                               "create or repair it first"))
            continue
        out += _resource_mode(index, role, it)
    return out


def _resource_mode(index: int, role: Role, it: InstanceType) -> list[Refusal]:
    res = role.resources
    path = role_path(index, "resources")
    cards, problem = _cards(res.accelerator)
    if problem:
        return []  # accelerator_shape reports it
    sliced = bool(res.accelerator_sliced_memory_percentage or res.accelerator_sliced_cores_percentage)
    profile = res.accelerator_partitioned_profile
    name = it.metadata.name or role.instance_type
    if not it.spec.acceleratable:
        if not ((cards or 0) > 0 or sliced or profile):
            return []
        field = ("acceleratorPartitionedProfile" if profile else
                 "acceleratorSlicedMemoryPercentage" if sliced else "accelerator")
        return [Refusal(f"{path}.{field}",
                        f"InstanceType {name!r} is not acceleratable (CPU only) and offers no accelerator",
                        "remove the accelerator request, or name an acceleratable InstanceType")]
    if (sliced or profile) and not it.observed:
        return [_unobserved(index, role, it, "a partition" if profile else "a logical slice")]
    out: list[Refusal] = []
    if sliced and not it.offers_slices:
        field = ("acceleratorSlicedMemoryPercentage" if res.accelerator_sliced_memory_percentage
                 else "acceleratorSlicedCoresPercentage")
        out.append(Refusal(f"{path}.{field}", f"InstanceType {name!r} offers no logical slices (it offers: "
                           f"{_offered(it)})", "request a mode the type offers, or name a type that slices"))
    if profile:
        if not it.offers_partitions:
            out.append(Refusal(f"{path}.acceleratorPartitionedProfile", f"InstanceType {name!r} offers no "
                               f"partitions (it offers: {_offered(it)})",
                               "request a mode the type offers, or name a type that partitions"))
        elif profile not in it.partition_profiles:
            out.append(Refusal(f"{path}.acceleratorPartitionedProfile", f"profile {profile!r} is not in the inventory "
                               f"of InstanceType {name!r} (offered: {', '.join(it.partition_profiles) or 'none'})",
                               "name one of the offered profiles"))
    if not sliced and not profile:
        per_pod = 1 if cards is None else cards
        capacity = it.status.accelerator.capacity
        # An unpublished capacity (0 on an acceleratable type) is not a capacity of zero: the type's
        # status may simply not have converged yet, and a race must not refuse a legal deployment.
        if capacity > 0 and per_pod * role.size > capacity:
            what = (f"one Pod asks for {per_pod} cards" if role.size == 1 else
                    f"one instance asks for {per_pod} cards × size {role.size} = {per_pod * role.size} cards, "
                    "admitted together")
            out.append(Refusal(f"{path}.accelerator", f"{what}, above the total capacity of InstanceType {name!r} "
                               f"({capacity} cards)", f"request at most {capacity // role.size} cards per Pod, or "
                               "name a larger InstanceType"))
    return out


def _unobserved(index: int, role: Role, it: InstanceType, mode: str) -> Refusal:
    """Rule 4 before the type's hardware is observed: which modes it offers is not known yet."""
    res = role.resources
    field = ("acceleratorPartitionedProfile" if res.accelerator_partitioned_profile else
             "acceleratorSlicedMemoryPercentage" if res.accelerator_sliced_memory_percentage
             else "acceleratorSlicedCoresPercentage")
    name = it.metadata.name or role.instance_type
    return Refusal(role_path(index, "resources", field),
                   f"InstanceType {name!r} has not observed its hardware yet (status.detail is empty), so whether it "
                   f"offers {mode} is not known",
                   "retry once the type's status converges (kubectl get instancetype "
                   f"{name} shows status.detail), or request whole cards")


def explicit_zero_on_shared_type(subject: Subject) -> list[Refusal]:
    """Rule 6: `accelerator: 0` on an acceleratable type another role of the deployment also names."""
    world = subject.world
    if world is None:
        return []
    out: list[Refusal] = []
    roles = subject.md.spec.roles
    for index, role in enumerate(roles):
        cards, _ = _cards(role.resources.accelerator)
        if role.resources.accelerator is None or cards != 0:
            continue
        it = world.instance_types.get(role.instance_type)
        if it is None or not it.spec.acceleratable:
            continue
        sharers = [r.name for r in roles if r is not role and r.instance_type == role.instance_type]
        if sharers:
            out.append(Refusal(
                role_path(index, "resources", "accelerator"),
                f"an explicit 0 on acceleratable InstanceType {role.instance_type!r}, which role(s) "
                f"{', '.join(repr(n) for n in sharers)} also name: their Pods and this card-less one would share "
                "one queue and its accelerator quota",
                "request at least one card, or run the card-less role on a non-acceleratable InstanceType",
            ))
    return out


def sliced_pair(subject: Subject) -> list[Refusal]:
    """Rule 7: a Prefill and a Decode role may not both take logical slices of one accelerator group."""
    world = subject.world
    if world is None:
        return []
    slicers: dict[str, list[tuple[int, Role]]] = {}
    for index, role in enumerate(subject.md.spec.roles):
        res = role.resources
        if role.kind == vocab.ROLE_KIND_SERVER:
            continue
        if not (res.accelerator_sliced_memory_percentage or res.accelerator_sliced_cores_percentage):
            continue
        it = world.instance_types.get(role.instance_type)
        if it is None or not it.spec.acceleratable:
            continue
        group = it.spec.accelerator_group or f"type:{role.instance_type}"
        slicers.setdefault(group, []).append((index, role))
    out: list[Refusal] = []
    for group, members in slicers.items():
        kinds = {r.kind for _, r in members}
        if {vocab.ROLE_KIND_PREFILL, vocab.ROLE_KIND_DECODE} <= kinds:
            index, role = members[-1]
            others = ", ".join(f"{r.name} (spec.roles[{i}])" for i, r in members[:-1])
            shown = group.removeprefix("type:")
            out.append(Refusal(
                role_path(index, "resources"),
                f"role {role.name!r} ({role.kind}) and {others} both request a logical slice of accelerator group "
                f"{shown!r}: a prefiller and a decoder could share one physical card",
                "give one of the two roles whole cards or a partition, or an InstanceType on another accelerator group",
            ))
    return out


# --- the KV cache binding: rules 5, 16 ---------------------------------------------------------


def _cache_chain(subject: Subject) -> tuple[KVCachePoolBinding | None, KVCachePool | None, KVCacheBackend | None]:
    spec = subject.md.spec.kv_cache
    world = subject.world
    if spec is None or world is None:
        return None, None, None
    binding = world.binding(subject.md.metadata.namespace, spec.pool_ref.name)
    pool = world.pools.get(binding.spec.pool_ref.name) if binding else None
    backend = world.backends.get(pool.backend_name or "") if pool else None
    return binding, pool, backend


def new_binding(subject: Subject) -> bool:
    """The binding is new on create, or when the stored object named another one (rule 3 refuses that)."""
    new = subject.md.spec.kv_cache
    if new is None:
        return False
    old = subject.old.spec.kv_cache if subject.old is not None else None
    return old is None or old.pool_ref.name != new.pool_ref.name


def cache_binding(subject: Subject) -> list[Refusal]:
    """Rule 16: a non-empty poolRef; a NEW binding whose pool's member groups disagree on protocol.

    An unchanged binding stays editable if its backend later becomes mixed (a warning says so)."""
    spec = subject.md.spec.kv_cache
    if spec is None:
        return []
    if not spec.pool_ref.name.strip():
        return [Refusal("spec.kvCache.poolRef.name", "is empty",
                        "name a KVCachePoolBinding in this namespace (an administrator creates it to grant the pool), "
                        "or remove spec.kvCache")]
    binding, pool, backend = _cache_chain(subject)
    if binding is None or not new_binding(subject):
        return []
    out = _binding_dtype(subject, binding)
    if backend is None:
        return out
    protocols = backend_protocols(backend)
    if len(protocols) > 1:
        out.append(Refusal(
            "spec.kvCache.poolRef.name",
            f"KVCachePoolBinding {spec.pool_ref.name!r} grants pool {pool.metadata.name if pool else '?'!r}, whose "
            f"backend {backend.metadata.name!r} has member groups on different protocols ({', '.join(sorted(protocols))});"
            " a new binding would render only one of them and reads of blocks on the others would fail",
            "have an administrator give every member group of the backend one protocol, or bind a pool whose groups "
            "agree",
        ))
    return out


# The --kv-cache-dtype spellings (docs/cluster-objects.md#kvcachepoolbinding), from the engine registry. Only a value one engine lists
# and the other does not is refused (bf16 on vLLM; fp8 and float16 on SGLang): other values may come
# with newer versions.
KV_CACHE_DTYPES = {name: engine.kv_cache_dtypes for name, engine in ENGINES.items()}


def _binding_dtype(subject: Subject, binding: KVCachePoolBinding) -> list[Refusal]:
    """A new binding whose dtype the operator would render as a --kv-cache-dtype the engine refuses."""
    dtype = binding.spec.domain.dtype
    engine = subject.engine
    if not dtype or not subject.kv_cache_dtype_owned or not any(r.managed for r in subject.md.spec.roles):
        return []
    known = frozenset().union(*KV_CACHE_DTYPES.values())
    accepted = KV_CACHE_DTYPES.get(engine, known)
    if dtype in known and dtype not in accepted:
        return [Refusal(
            "spec.kvCache.poolRef.name",
            f"KVCachePoolBinding {binding.metadata.name!r} has dtype {dtype!r}, which the operator renders as --kv-cache-dtype and {engine} does not accept "
            f"({', '.join(sorted(accepted))})",
            "bind a KVCachePoolBinding whose domain has a dtype this engine reads, or take over the command line of "
            "every role with roles[].command",
        )]
    return []


def cache_notices(subject: Subject) -> list[Notice]:
    """Accepted, but worth knowing: a missing binding holds replicas; an old binding on a mixed backend."""
    spec = subject.md.spec.kv_cache
    if spec is None or subject.world is None or not spec.pool_ref.name.strip():
        return []
    binding, pool, backend = _cache_chain(subject)
    ns = subject.md.metadata.namespace
    world = subject.world
    if binding is None:
        absence = world.absence(vocab.KIND_KV_CACHE_POOL_BINDING, spec.pool_ref.name, ns)
        return [Notice("spec.kvCache.poolRef.name", f"KVCachePoolBinding {spec.pool_ref.name!r} {absence} in "
                       f"namespace {ns!r}: no replica starts until an administrator creates or repairs it "
                       "(status reports DomainRegistered=False/BindingNotFound)")]
    if pool is None:
        absence = world.absence(vocab.KIND_KV_CACHE_POOL, binding.spec.pool_ref.name)
        return [Notice("spec.kvCache.poolRef.name", f"KVCachePool {binding.spec.pool_ref.name!r} of binding "
                       f"{spec.pool_ref.name!r} {absence}: replicas wait for it")]
    if backend is None:
        absence = world.absence(vocab.KIND_KV_CACHE_BACKEND, pool.backend_name or "")
        return [Notice("spec.kvCache.poolRef.name", f"KVCacheBackend {pool.backend_name!r} of pool "
                       f"{pool.metadata.name!r} {absence}: replicas wait until an administrator repairs it")]
    protocols = backend_protocols(backend)
    if len(protocols) > 1 and not new_binding(subject):
        first = sorted(protocols)[0]
        return [Notice("spec.kvCache.poolRef.name", f"backend {backend.metadata.name!r} now mixes protocols "
                       f"({', '.join(sorted(protocols))}); this binding keeps rendering {first!r}, and reads of blocks "
                       "on another transport fail: repair the pool")]
    return []


def artifact_notices(subject: Subject) -> list[Notice]:
    ref = subject.md.spec.model.artifact_ref
    if ref is None or subject.world is None:
        return []
    if subject.world.artifact(subject.md.metadata.namespace, ref.name) is None:
        return [Notice("spec.model.artifactRef.name", f"ModelArtifact {ref.name!r} does not exist in namespace "
                       f"{subject.md.metadata.namespace!r}: no Pod is created until it exists and resolves "
                       "(status reports WeightsReady=False/ArtifactNotFound)")]
    return []


def fabric_interface(subject: Subject) -> list[Refusal]:
    """Rule 5: a whole, non-negative count; a positive one needs one RDMA or EFA leg the role renders."""
    out: list[Refusal] = []
    md = subject.md
    ctx = build_context(md, subject.world or World(), RenderOptions(kv_cache_dtype_owned=subject.kv_cache_dtype_owned))
    _binding, _pool, backend = _cache_chain(subject)
    for index, role in enumerate(md.spec.roles):
        value = role.resources.interface
        if value is None:
            continue
        path = role_path(index, "resources", "interface")
        problem: str | None
        try:
            count = quantity.whole(value)
        except quantity.QuantityError:
            count, problem = None, f"{value!r} is not a quantity"
        else:
            problem = f"{value!r} is not a whole number of interfaces" if count is None else None
        if problem is None and count is not None and count < 0:
            problem = f"{value!r} is negative"
        if problem:
            out.append(Refusal(path, problem, "request a whole number of fabric interfaces (0 or more)"))
            continue
        if not count or subject.world is None:
            continue
        protocols: set[str] = set()
        cache_known = True
        if role.managed and md.spec.kv_cache is not None:
            if backend is None:
                cache_known = False
            else:
                offered = backend_protocols(backend)
                if new_binding(subject):
                    if len(offered) > 1:
                        out.append(Refusal(path, f"a positive count follows the cache backend's protocol, and backend "
                                           f"{backend.metadata.name!r} mixes {', '.join(sorted(offered))}",
                                           "bind a pool whose member groups share one protocol, or set interface to 0"))
                        continue
                    protocols |= offered
                else:
                    protocols.add(sorted(offered)[0])
        if transfer_leg_rendered(ctx, role):
            protocols.add(engine_for(subject.engine).leg_protocol(ctx, role))
        if {"rdma", "efa"} <= protocols:
            out.append(Refusal(path, f"the role renders both an RDMA and an EFA leg ({', '.join(sorted(protocols))}); "
                               "one interface key cannot serve both",
                               "align spec.kvTransfer.protocol with the cache backend's protocol, or set interface to 0"))
        elif not protocols & {"rdma", "efa"} and cache_known:
            legs = ", ".join(sorted(protocols)) or "none"
            out.append(Refusal(path, f"{count} fabric interface(s) requested, but role {role.name!r} renders no managed "
                               f"RDMA or EFA transfer leg (its legs: {legs})",
                               "set spec.kvTransfer.protocol to RDMA or EFA on a routed prefill/decode pair, bind a "
                               "pool on an RDMA or EFA backend, or set interface to 0"))
    return out


# --- transports and routed ports: rule 19, the Ascend transport (docs/rendering.md#kv-cache-attachment) --

def ascend_transfer_protocol(subject: Subject) -> list[Refusal]:
    """vLLM on an Ascend pool transfers over `ascend` (docs/rendering.md#kv-cache-attachment); another
    kvTransfer.protocol is refused."""
    transfer = subject.md.spec.kv_transfer
    if subject.world is None or transfer is None or transfer.protocol in vocab.ASCEND_TRANSFER_PROTOCOLS \
            or not engine_for(subject.engine).ascend_leg:
        return []
    ctx = build_context(subject.md, subject.world, RenderOptions(kv_cache_dtype_owned=subject.kv_cache_dtype_owned))
    ascend = [f"{r.name} ({r.instance_type})" for r in subject.md.spec.roles if on_ascend(ctx, r)]
    if not ascend:
        return []
    return [Refusal("spec.kvTransfer.protocol",
                    f"{transfer.protocol} is not a transport of an Ascend pool, and role(s) {', '.join(ascend)} run "
                    f"{subject.engine} on one, whose direct leg transfers over ascend",
                    "set spec.kvTransfer.protocol to CANN or Auto (or remove spec.kvTransfer)")]


def _serving_port_source(index: int, role: Role, engine: str) -> str:
    """The field a role's serving port comes from, for the refusal's path."""
    if role.ports:
        return role_path(index, "ports[0].port")
    if role_ports(engine, role).container != vocab.DEFAULT_SERVING_PORT:
        return role_path(index, "command" if not role.managed else "extraArgs")
    return role_path(index, "ports")


def routed_ports(subject: Subject) -> list[Refusal]:
    """Rule 19: the router dials one target port on every role it routes, so they must share it."""
    md = subject.md
    if md.spec.router is None or len(md.spec.roles) < 2:
        return []
    ctx = build_context(md, subject.world or World(), RenderOptions(kv_cache_dtype_owned=subject.kv_cache_dtype_owned))
    engine = subject.engine
    served = [(index, role, role_ports(engine, role, proxied=engine_for(engine).routing_proxy_rendered(ctx, role)).container)
              for index, role in enumerate(md.spec.roles)]
    if len({port for _, _, port in served}) < 2:
        return []
    shown = ", ".join(f"{role.name} {port} (spec.roles[{index}])" for index, role, port in served)
    first = served[0][2]
    return [Refusal(_serving_port_source(index, role, engine),
                    f"the routed roles serve on different ports ({shown}), and {md.spec.router.name} dials one target "
                    f"port on every role it routes, so traffic for role {role.name!r} would go to {first}, where "
                    "nothing answers",
                    "serve every routed role on one port (the same first ports[] entry, or no ports and no --port for "
                    "8000)")
            for index, role, port in served if port != first]


# --- the router: rule 18 ----------------------------------------------------------------------

def router_rules(subject: Subject) -> list[Refusal]:
    """Rule 18: the router fits the engine; the threshold is read by the router; no router-owned flag
    in extraArgs (each read as the router's entrypoint reads it)."""
    router = subject.md.spec.router
    if router is None:
        return []
    out: list[Refusal] = []
    engine = subject.engine
    entry = router_for(router.name)
    if not entry.fronts(engine):
        every, own = routers_fronting(engine)
        out.append(Refusal("spec.router.name", f"{router.name} routes {', '.join(sorted(entry.engines or ()))} "
                           f"engines only, and this deployment runs {engine}",
                           f"use {' or '.join(every)} (either engine) or the router of {engine} ({', '.join(own)})"))
    if router.disaggregation_threshold_tokens is not None and not entry.reads_threshold:
        readers = [name for name, r in ROUTERS.items() if r.reads_threshold]
        out.append(Refusal("spec.router.disaggregationThresholdTokens",
                           f"is read by {' and '.join(readers)} only, and this router is {router.name}",
                           f"remove disaggregationThresholdTokens, or use {' or '.join(readers)}"))
    for j, token in enumerate(router.extra_args):
        if token == "--":
            break
        flag = entry.read_flag(token)
        if flag is not None and flag in entry.owned_flags:
            spelled = token.split("=", 1)[0]
            shown = f"{spelled} is --{flag}, which" if spelled != f"--{flag}" else f"--{flag} is an option"
            out.append(Refusal(f"spec.router.extraArgs[{j}]",
                               f"{shown} the operator renders and owns on {router.name}",
                               "remove it: the operator wires the router's listener, discovery, metrics and policy "
                               "from the deployment (requestTimeoutSeconds, disaggregationThresholdTokens, replicas)"))
    return out
