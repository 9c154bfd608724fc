"""The rules of a deployment's names and roles (docs/admission.md#the-rules 1, 2, 8-11, 17, 20, 21):
role count and kinds, generated and Service names, topology level, the engine version, volumes
and the mounts the operator owns, the Pod bound.

Each rule is one small function of a `Subject` returning its refusals (every one it finds, each
with an indexed field path, what is wrong and the way out). The other subjects' rules:
`app.admission.resources` (resources and accelerators), `app.admission.kvcache` (the KV cache),
`app.admission.routing` (the router and ports), `app.admission.cmdline` (the command line),
`app.admission.frozen` (frozen fields).
"""

from __future__ import annotations

import re

from app import vocab
from app.admission import fields
from app.admission.model import Notice, Refusal, Subject, role_path
from app.api.objects import KubeObject
from app.api.v1 import Role
from app.control import bounds
from app.engines.registry import ENGINES
from app.render import names, tenant

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
    services = [names.role_service(deployment, role.name) for role in subject.md.spec.roles]
    if subject.md.spec.router is not None:
        services.append(names.router(deployment))
    shown = ", ".join(repr(s) for s in services)
    if (new_roles or new_router) and not names.DNS1035_LABEL.match(deployment):
        # The deployment's own name is at fault (a capital, '_', a dot, a digit first): no role name fixes it.
        return [Refusal("metadata.name", f"{deployment!r} begins the name of each of the deployment's Services "
                        f"({shown}), which must be a DNS-1035 label (a lowercase "
                        "letter first, then lowercase letters, digits and '-', no dot)",
                        f"create the deployment under a name such as {fields.suggested_name(deployment)!r} (a "
                        "deployment's name cannot change)")]
    if (new_roles or new_router) and len(deployment) + 2 > names.LABEL_MAX:
        # Too long for any role name: the deployment's name is the field to change.
        return [Refusal("metadata.name", f"{deployment!r} is {len(deployment)} characters and begins the name of each "
                        f"of the deployment's Services ({shown}), which hold at most {names.LABEL_MAX}",
                        f"create the deployment under a name of at most {names.LABEL_MAX - 1 - max(len(s) - len(deployment) - 1 for s in services)} "
                        "characters (a deployment's name cannot change)")]
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


def pair_parks_together(subject: Subject) -> list[Refusal]:
    """Rule 22: a prefill/decode pair parks and wakes as a pair (docs/scale-to-zero.md#zero-replicas):
    exactly one of the pair at 0 replicas would leave prefillers with no decoder, or the reverse."""
    pair = [(i, r) for i, r in enumerate(subject.md.spec.roles)
            if r.kind in (vocab.ROLE_KIND_PREFILL, vocab.ROLE_KIND_DECODE)]
    parked = [(i, r) for i, r in pair if r.replicas == 0]
    if len(pair) != 2 or len(parked) != 1:
        return []
    index, role = parked[0]
    other = next(r for _, r in pair if r is not role)
    return [Refusal(role_path(index, "replicas"),
                    f"role {role.name!r} ({role.kind}) declares 0 replicas while its pair {other.name!r} "
                    f"({other.kind}) declares {other.replicas}; a prefill/decode pair parks and wakes as a pair",
                    f"set both roles' replicas to 0 to park the deployment, or both above 0 to serve (a "
                    "ModelDeploymentScaler listing both roles moves them together)")]


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


# --- volumes, the operator's mounts, the Pod bound: rule 20, 21 ------------------------------


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
