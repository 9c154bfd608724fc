"""Naming: every derived name is a function of deployment, role, ordinal and member."""

import pytest

from app.render import names


def test_member_pods_follow_the_documented_pattern():
    assert names.member_pod("qwen", "server", 3, 1) == "qwen-server-r3-m1"
    assert names.instance("qwen", "server", 3) == "qwen-server-r3"
    assert names.leader_address("qwen", "server", 3) == "qwen-server-r3-m0.qwen-server-r3"


def test_single_pod_name_carries_the_render_fingerprint():
    assert names.single_pod("qwen", "server", 0, "abcdef0123456789") == "qwen-server-r0-abcdef0123"


def test_pod_group_is_stable_and_a_dns_label():
    group = names.pod_group("team-a", "qwen", "server", 0)
    assert group == names.pod_group("team-a", "qwen", "server", 0)
    assert group.startswith("gpustack-fnv64-") and len(group) == len("gpustack-fnv64-") + 16
    assert names.DNS1123_LABEL.match(group)
    assert group != names.pod_group("team-b", "qwen", "server", 0)
    assert group != names.pod_group("team-a", "qwen", "server", 1)


def test_pod_group_names_never_change_between_versions():
    # Running Workloads carry these names: an operator upgrade must derive the same ones.
    assert names.pod_group("team-a", "qwen", "server", 0) == "gpustack-fnv64-bdf8eb21739dcea9"
    assert names.pod_group("team-a", "qwen", "server", 17, 1) == "gpustack-fnv64-6bc297d77522ebf3-s1"
    assert names.pod_group("ns", "d", "r", 3) == f"gpustack-fnv64-{names.fnv64a('ns/d/r/3'):016x}"


def test_a_roles_pod_groups_are_every_slot_of_every_ordinal_asked():
    groups = names.role_pod_groups("team-a", "qwen", "server", range(12))
    assert groups == {g: o for o in range(12) for g in names.pod_groups("team-a", "qwen", "server", o)}
    assert len(groups) == 12 * names.SLOTS


def test_fnv64a_goes_on_from_a_prefix_state():
    assert names.fnv64a("bar", names.fnv64a("foo")) == names.fnv64a("foobar")


@pytest.mark.parametrize(
    "text,value",
    [("", 0xCBF29CE484222325), ("a", 0xAF63DC4C8601EC8C), ("foobar", 0x85944171F73967E8)],
)
def test_fnv64a_matches_the_reference_vectors(text, value):
    assert names.fnv64a(text) == value


def test_longest_generated_name_uses_the_last_ordinal_and_member():
    assert names.longest_generated_name("d", "r", 12, 3) == "d-r-r11-m2"
    assert names.longest_generated_name("d", "r", 12, 1) == "d-r-r11-" + "0" * names.FINGERPRINT_LENGTH


def test_event_names_are_deterministic_per_occurrence():
    a = names.event("qwen", "ReplicaLeaving", "server/3/uid-1")
    assert a == names.event("qwen", "ReplicaLeaving", "server/3/uid-1")
    assert a != names.event("qwen", "ReplicaLeaving", "server/3/uid-2")
