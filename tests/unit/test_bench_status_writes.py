"""bench/status_writes.py names the status fields a write moved (list entries by position)."""

from __future__ import annotations

from bench.status_writes import changed_paths


def test_changed_paths_names_each_moved_leaf_with_list_positions_folded():
    old = {"phase": "Progressing", "roles": [{"ready": 1, "notReady": [{"stage": "Queued"}]}], "endpoint": "x"}
    new = {"phase": "Ready", "roles": [{"ready": 2, "notReady": []}], "endpoint": "x", "extra": 1}
    assert changed_paths(old, new) == {".phase", ".roles[].ready", ".roles[].notReady", ".extra"}


def test_changed_paths_of_equal_statuses_is_empty_and_conditions_are_named_by_type():
    same = {"conditions": [{"type": "Ready", "status": "True"}]}
    assert changed_paths(same, same) == set()
    longer = {"conditions": [{"type": "Available", "status": "True"}, {"type": "Ready", "status": "False"}]}
    assert changed_paths(same, longer) == {".conditions[Available]", ".conditions[Ready].status"}
