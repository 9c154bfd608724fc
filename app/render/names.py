"""Every name the operator derives: Pods, Services, Kueue pod groups, the router objects.

Names are functions of the deployment, role, ordinal and member, so that each Pod can address
the others before any of them exists.
"""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
LABEL_MAX = 63
FINGERPRINT_LENGTH = 10


FNV64_OFFSET = 0xCBF29CE484222325


def fnv64a(text: str, state: int = FNV64_OFFSET) -> int:
    """FNV-1a 64-bit: stable across processes and Python versions (unlike hash()). It hashes byte
    by byte, so `fnv64a(b, fnv64a(a)) == fnv64a(a + b)`: a shared prefix is hashed once."""
    for byte in text.encode():
        state ^= byte
        state = (state * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return state


def role_service(deployment: str, role: str) -> str:
    """The ClusterIP Service in front of a role's leaders."""
    return f"{deployment}-{role}"


def instance(deployment: str, role: str, ordinal: int) -> str:
    """An instance's name: its headless Service and the subdomain of its Pods."""
    return f"{deployment}-{role}-r{ordinal}"


def member_pod(deployment: str, role: str, ordinal: int, member: int) -> str:
    """A member's hostname in an instance above size 1 (and its Pod's name in slot 0): fixed, so
    peers can address it before it exists."""
    return f"{instance(deployment, role, ordinal)}-m{member}"


def member_pod_in_slot(deployment: str, role: str, ordinal: int, member: int, slot: int) -> str:
    """A member Pod's name: the hostname in slot 0, `<instance>-s<slot>-m<member>` in another, so a
    replacement's Pods can exist beside the departing incarnation's (docs/kueue.md#incarnation-slots)."""
    if slot == 0:
        return member_pod(deployment, role, ordinal, member)
    return f"{instance(deployment, role, ordinal)}-s{slot}-m{member}"


def single_pod(deployment: str, role: str, ordinal: int, fingerprint: str, incarnation: int = 0) -> str:
    """A size-1 Pod: the name changes with the render and with every new incarnation of the
    ordinal (a replacement never carries the departed Pod's name), so users select replicas by
    label. The first incarnation keeps the plain `<instance>-<fingerprint>`; later ones hash the
    incarnation in, at the same length."""
    suffix = fingerprint[:FINGERPRINT_LENGTH] if incarnation == 0 else \
        f"{fnv64a(f'{fingerprint}/{incarnation}'):016x}"[:FINGERPRINT_LENGTH]
    return f"{instance(deployment, role, ordinal)}-{suffix}"


def leader_address(deployment: str, role: str, ordinal: int) -> str:
    """`<m0 hostname>.<instance subdomain>`: resolvable from inside the Pod's namespace."""
    return f"{member_pod(deployment, role, ordinal, 0)}.{instance(deployment, role, ordinal)}"


# Each ordinal has this many pod-group names, used by its incarnations in turn, so that a
# replacement's group never shares a name with the one it replaces (docs/kueue.md#incarnation-slots).
SLOTS = 2


def slot_of(incarnation: int) -> int:
    """The pod-group slot an incarnation is created in."""
    return incarnation % SLOTS


@lru_cache(maxsize=65536)
def pod_group(namespace: str, deployment: str, role: str, ordinal: int, slot: int = 0) -> str:
    """Kueue pod-group (and Workload) name of one replica's slot: a function of the ordinal and
    the slot, a DNS-1123 label; slot 0 is `gpustack-fnv64-<hash>`, slot s `…-s<s>`, the hash that of
    `<namespace>/<deployment>/<role>/<ordinal>`.

    Memoized: a sync asks it 3-4 times per replica (rollout, gang, the Pods)."""
    return _slot_name(fnv64a(str(ordinal), _role_state(namespace, deployment, role)), slot)


def pod_groups(namespace: str, deployment: str, role: str, ordinal: int) -> list[str]:
    """Every pod-group name an ordinal may have, one per slot."""
    return [pod_group(namespace, deployment, role, ordinal, slot) for slot in range(SLOTS)]


def role_pod_groups(namespace: str, deployment: str, role: str, ordinals: range) -> dict[str, int]:
    """Every pod-group name of the role's `ordinals` (each slot), to its ordinal: one hash of the
    shared prefix and a few bytes per ordinal, and without filling pod_group's memo (the executor
    asks it for every ordinal the schema allows)."""
    state = _role_state(namespace, deployment, role)
    out: dict[str, int] = {}
    for ordinal in ordinals:
        digest = fnv64a(str(ordinal), state)
        for slot in range(SLOTS):
            out[_slot_name(digest, slot)] = ordinal
    return out


@lru_cache(maxsize=4096)
def _role_state(namespace: str, deployment: str, role: str) -> int:
    """The FNV-1a state after `<namespace>/<deployment>/<role>/`, the prefix a role's groups share."""
    return fnv64a(f"{namespace}/{deployment}/{role}/")


def _slot_name(digest: int, slot: int) -> str:
    return f"gpustack-fnv64-{digest:016x}" if slot == 0 else f"gpustack-fnv64-{digest:016x}-s{slot}"


def fingerprint(canonical_json: bytes) -> str:
    """Short content hash of a rendered object."""
    return hashlib.sha256(canonical_json).hexdigest()[:16]


def router(deployment: str) -> str:
    """Every router object (Deployment, Service, ConfigMap, ServiceAccount, Role, RoleBinding)."""
    return f"{deployment}-router"


def event(deployment: str, reason: str, key: str) -> str:
    """Deterministic Event name: the same occurrence is recorded once, not on every sync."""
    return f"{deployment}.{reason.lower()}.{fnv64a(key):016x}"


def longest_generated_name(deployment: str, role: str, replicas: int, size: int) -> str:
    """The longest hostname/label a role will generate for the declared replicas and size."""
    last = replicas - 1
    if size > 1:
        return member_pod(deployment, role, last, size - 1)
    return single_pod(deployment, role, last, "0" * FINGERPRINT_LENGTH)
