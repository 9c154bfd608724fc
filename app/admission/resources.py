"""The rules of a deployment's resources and accelerators (docs/admission.md#the-rules 4-7): whole
cards, slices and partitions against the InstanceType, a shared type's explicit 0, a sliced P/D
pair, the fabric interfaces a role's transfer legs need.

Rules that read an InstanceType decline for a deployment being deleted: such a rule refuses when
the type is absent, and a deleted type must not block the update that clears the finalizer. The
validator passes `world=None` then, and every rule below that needs the world returns nothing.
"""

from __future__ import annotations

from typing import Any

from app import quantity, vocab
from app.admission.kvcache import cache_chain, new_binding
from app.admission.model import Refusal, Subject, role_path
from app.api.cluster import InstanceType
from app.api.v1 import Role
from app.engines.common import transfer_leg_rendered
from app.engines.registry import engine_for
from app.model.context import RenderOptions, backend_protocols, build_context
from app.world import World


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
    suffix = quantity.multiplier(value)
    if suffix is not None:
        return None, (f"{value!r} is {cards:,} cards: accelerator counts cards, and the suffix {suffix!r} multiplies "
                      "the number (it suits bytes, not cards)")
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


def fabric_interface(subject: Subject) -> list[Refusal]:
    """Rule 5: a whole, non-negative count; a positive one needs one RDMA or EFA leg the role renders."""
    out: list[Refusal] = []
    md = subject.md
    ctx = build_context(md, subject.world or World(), RenderOptions(kv_cache_dtype_owned=subject.kv_cache_dtype_owned))
    _binding, _pool, backend = cache_chain(subject)
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
