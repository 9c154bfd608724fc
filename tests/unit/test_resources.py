"""Pod resources from the InstanceType (docs/rendering.md#resources)."""

import copy

import pytest

from app.api.cluster import InstanceType
from app.api.v1 import RoleResources
from app.render.errors import RenderError
from app.render.resources import pod_resources
from tests.conftest import world_objects


def _type(name):
    return InstanceType.model_validate(copy.deepcopy(next(o for o in world_objects() if o["metadata"]["name"] == name)))


A10G = "gpustack-nvidia-a10g-linux-amd64"
H20 = "gpustack-nvidia-h20-linux-amd64"
CPU = "gpustack-cpu-linux-amd64"


def test_whole_cards_scale_the_unit():
    got = pod_resources(RoleResources(accelerator=2), _type(A10G), frozenset())
    assert got == {"cpu": "16", "memory": "64Gi", "ephemeral-storage": "15Gi", "nvidia.com/gpu": "2"}


def test_zero_cards_counts_as_one_unit_and_requests_no_card():
    got = pod_resources(RoleResources(accelerator=0), _type(A10G), frozenset())
    assert got == {"cpu": "8", "memory": "32Gi", "ephemeral-storage": "15Gi"}


def test_cpu_only_type_is_one_unit():
    got = pod_resources(RoleResources(), _type(CPU), frozenset())
    assert got == {"cpu": "4", "memory": "16Gi", "ephemeral-storage": "15Gi"}


def test_logical_slice_copies_one_percentage_to_the_other():
    got = pod_resources(RoleResources(accelerator=1, accelerator_sliced_memory_percentage=50), _type(A10G), frozenset())
    assert got["nvidia.com/gpu.sliced"] == "1"
    assert got["nvidia.com/gpu.sliced.memory-percentage"] == "50"
    assert got["nvidia.com/gpu.sliced.cores-percentage"] == "50"
    assert got["cpu"] == "4" and got["memory"] == "16Gi"


def test_partition_scales_by_profile_memory_over_card_memory():
    got = pod_resources(RoleResources(accelerator=1, accelerator_partitioned_profile="3g.48gb"), _type(H20), frozenset())
    assert got["nvidia.com/gpu.partitioned"] == "1"
    assert got["nvidia.com/gpu.partitioned.mig-3g.48gb"] == "1"
    assert got["cpu"] == "8" and got["memory"] == "64Gi"  # 48 of 96 GiB


def _unknown_profile_memory(t: InstanceType) -> None:
    t.status.detail.sliced_detail.physical.profiles[1].memory_mib = None


def _unknown_card_memory(t: InstanceType) -> None:
    t.status.detail.memory = None


def _profile_not_listed(t: InstanceType) -> None:
    t.status.detail.sliced_detail.physical.profiles = t.status.detail.sliced_detail.physical.profiles[:1]


@pytest.mark.parametrize("unknown,says", [
    (_unknown_profile_memory, "memory of partition profile '3g.48gb'"),
    (_unknown_card_memory, "memory of one card (status.detail.memory)"),
    (_profile_not_listed, "memory of partition profile '3g.48gb'"),
])
def test_partition_of_unknown_memory_is_a_retryable_failure_not_a_whole_card(unknown, says):
    h20 = _type(H20)
    unknown(h20)
    with pytest.raises(RenderError) as raised:
        pod_resources(RoleResources(accelerator=1, accelerator_partitioned_profile="3g.48gb"), h20, frozenset())
    assert raised.value.retryable
    assert says in str(raised.value) and "retried once the type's status converges" in str(raised.value)


def test_partition_of_unknown_memory_fails_the_sync_with_a_render_failed_event():
    from app import vocab
    from app.control.sync import Refusal
    from tests.helpers import attempt, parent

    world = copy.deepcopy(world_objects())
    h20 = next(o for o in world if o["metadata"]["name"] == H20)
    for profile in h20["status"]["detail"]["slicedDetail"]["physical"]["profiles"]:
        profile.pop("memoryMib", None)
    md = parent("qwen-chat")
    md["spec"]["roles"][0].update(instanceType=H20, resources={"accelerator": 1, "acceleratorPartitionedProfile": "3g.48gb"})
    refusal = attempt(md, world=world)
    assert isinstance(refusal, Refusal) and refusal.retryable
    assert any(getattr(i, "reason", None) == vocab.EVENT_RENDER_FAILED for i in refusal.events)


def test_ephemeral_storage_is_capped_by_local_storage():
    it = _type(CPU)
    it.spec.local_storage = "10Gi"
    assert pod_resources(RoleResources(), it, frozenset())["ephemeral-storage"] == "10Gi"


@pytest.mark.parametrize(
    "count,protocols,expected",
    [
        (1, {"rdma"}, {"device.gpustack.ai/rdma.shared": "1"}),
        (4, {"rdma"}, {"device.gpustack.ai/rdma": "4"}),
        (2, {"efa"}, {"vpc.amazonaws.com/efa": "2"}),
        (0, {"rdma"}, {}),
        (2, {"tcp"}, {}),
    ],
)
def test_interface_devices_follow_the_rendered_transport(count, protocols, expected):
    got = pod_resources(RoleResources(accelerator=1, interface=count), _type(A10G), frozenset(protocols))
    devices = {k: v for k, v in got.items() if "rdma" in k or "efa" in k}
    assert devices == expected
