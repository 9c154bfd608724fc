"""Pod resources from the role's accelerator request and its InstanceType (docs/rendering.md#resources).

CPU, memory and ephemeral storage are not user fields: they are the type's per-unit resources
scaled by what one Pod takes of a card. Requests equal limits.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from app import quantity, vocab
from app.api.cluster import InstanceType
from app.api.v1 import RoleResources
from app.render.errors import RenderError


@dataclass(frozen=True)
class AcceleratorMode:
    """Which of the three request shapes one Pod uses."""

    kind: str  # "none" | "whole" | "slice" | "partition"
    cards: int = 0


def _whole(value: int | str, field: str, what: str) -> int:
    """A whole, non-negative count from a quantity of the role, or RenderError naming the field
    (the webhook and the hooks' request check refuse such values first; this keeps the render total)."""
    try:
        count = quantity.whole(value)
    except quantity.QuantityError as exc:
        raise RenderError(f"{field}: {exc} — request a whole number of {what} (0, 1, 2…)") from exc
    if count is None or count < 0:
        raise RenderError(f"{field}: {value!r} is not a whole number of {what} — request 0, 1, 2…")
    return count


def _type_quantity(instance_type: InstanceType, field: str, value: int | str) -> Decimal:
    """A quantity the InstanceType publishes, or RenderError naming the type and the field."""
    try:
        return quantity.parse(value)
    except quantity.QuantityError as exc:
        raise RenderError(f"InstanceType {instance_type.metadata.name!r} {field}: {exc}, so the Pod's resources "
                            "cannot be computed — an administrator must correct the InstanceType") from exc


def accelerator_count(resources: RoleResources, instance_type: InstanceType) -> int:
    """Cards per Pod; an unset count is 1 on an acceleratable type (the webhook's default)."""
    if resources.accelerator is None:
        return 1 if instance_type.spec.acceleratable else 0
    return _whole(resources.accelerator, "accelerator", "cards")


def mode_of(resources: RoleResources, instance_type: InstanceType) -> AcceleratorMode:
    if not instance_type.spec.acceleratable:
        return AcceleratorMode("none")
    cards = accelerator_count(resources, instance_type)
    if resources.accelerator_partitioned_profile:
        return AcceleratorMode("partition", cards)
    if resources.accelerator_sliced_memory_percentage or resources.accelerator_sliced_cores_percentage:
        return AcceleratorMode("slice", cards)
    return AcceleratorMode("whole", cards)


def _share_of_card(resources: RoleResources, instance_type: InstanceType, mode: AcceleratorMode) -> Decimal:
    """How many cards' worth of host resources one Pod gets."""
    if mode.kind == "none":
        return Decimal(1)
    if mode.kind == "whole":
        return Decimal(max(mode.cards, 1))
    if mode.kind == "slice":
        percent = resources.accelerator_sliced_memory_percentage or resources.accelerator_sliced_cores_percentage or 0
        return Decimal(percent) / 100
    return _partition_share(resources.accelerator_partitioned_profile or "", instance_type)


def _partition_share(name: str, instance_type: InstanceType) -> Decimal:
    """Profile memory ÷ card memory, clamped to 1–100 %. Unknown memory is not a whole card: the
    type's status has not converged, so the render waits (a retryable failure) rather than guess."""
    detail = instance_type.status.detail
    profile = next((p for p in detail.sliced_detail.physical.profiles if p.name == name), None)
    card_mib = (_type_quantity(instance_type, "status.detail.memory", detail.memory) / 2**20
                if detail.memory is not None else Decimal(0))
    missing = []
    if profile is None or profile.memory_mib is None or profile.memory_mib <= 0:
        missing.append(f"the memory of partition profile {name!r} (status.detail.slicedDetail.physical.profiles"
                       + (f", {profile.memory_mib} MiB" if profile is not None and profile.memory_mib else "") + ")")
    if card_mib <= 0:
        missing.append("the memory of one card (status.detail.memory"
                       + (f", {detail.memory!r}" if detail.memory is not None else "") + ")")
    if missing:
        raise RenderError(
            f"InstanceType {instance_type.metadata.name!r} has not published {' and '.join(missing)}, which sizes "
            "the Pod's CPU and memory; the render is retried once the type's status converges",
            retryable=True)
    assert profile is not None and profile.memory_mib
    percent = min(max((Decimal(profile.memory_mib) / card_mib * 100), Decimal(1)), Decimal(100))
    return percent / 100


def accelerator_requests(resources: RoleResources, instance_type: InstanceType) -> dict[str, str]:
    mode = mode_of(resources, instance_type)
    base = instance_type.spec.accelerator_resource
    if mode.kind == "none" or not base:
        return {}
    if mode.kind == "whole":
        return {base: str(mode.cards)} if mode.cards > 0 else {}
    if mode.kind == "slice":
        memory = resources.accelerator_sliced_memory_percentage or resources.accelerator_sliced_cores_percentage
        cores = resources.accelerator_sliced_cores_percentage or resources.accelerator_sliced_memory_percentage
        return {f"{base}.sliced": "1", f"{base}.sliced.memory-percentage": str(memory),
                f"{base}.sliced.cores-percentage": str(cores)}
    return {f"{base}.partitioned": "1", f"{base}.partitioned.mig-{resources.accelerator_partitioned_profile}": "1"}


def interface_requests(resources: RoleResources, protocols: frozenset[str]) -> dict[str, str]:
    """Fabric devices for `resources.interface`, following the transports the role renders."""
    if resources.interface is None:
        return {}
    count = _whole(resources.interface, "interface", "fabric interfaces")
    if count == 0:
        return {}
    if "efa" in protocols:
        return {vocab.RESOURCE_EFA: str(count)}
    if "rdma" in protocols:
        return {vocab.RESOURCE_RDMA_SHARED: "1"} if count == 1 else {vocab.RESOURCE_RDMA_DEDICATED: str(count)}
    return {}


def pod_resources(resources: RoleResources, instance_type: InstanceType, protocols: frozenset[str]) -> dict[str, str]:
    """The requests (= limits) of one engine Pod."""
    mode = mode_of(resources, instance_type)
    share = _share_of_card(resources, instance_type, mode)
    units = instance_type.spec.unit_resources
    out: dict[str, str] = {}
    if units.cpu is not None:
        out["cpu"] = quantity.cpu(_type_quantity(instance_type, "spec.unitResources.cpu", units.cpu) * share)
    if units.ram is not None:
        out["memory"] = quantity.memory(_type_quantity(instance_type, "spec.unitResources.ram", units.ram) * share)
    storage = Decimal(vocab.EPHEMERAL_STORAGE_BYTES)
    if instance_type.spec.local_storage is not None:
        storage = min(storage, _type_quantity(instance_type, "spec.localStorage", instance_type.spec.local_storage))
    out["ephemeral-storage"] = quantity.memory(storage)
    out.update(accelerator_requests(resources, instance_type))
    out.update(interface_requests(resources, protocols))
    return out
