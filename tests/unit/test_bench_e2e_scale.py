"""bench/e2e-scale's Kueue feature gates: read from the command line as Kueue takes them, and said
in the report's header so a run with them is never read as one without."""

from __future__ import annotations

import argparse

import pytest

from bench import e2e_scale, e2e_scale_report


def test_a_kueue_gate_is_name_equals_true_or_false() -> None:
    assert e2e_scale.kueue_gate("DisableWaitForPodsReady=true") == ("DisableWaitForPodsReady", True)
    assert e2e_scale.kueue_gate("TopologyAwareScheduling=False") == ("TopologyAwareScheduling", False)
    for text in ("DisableWaitForPodsReady", "=true", "X=yes"):
        with pytest.raises(argparse.ArgumentTypeError, match="NAME=true or NAME=false"):
            e2e_scale.kueue_gate(text)


def test_the_report_names_the_gates_a_run_set_and_says_nothing_without_them() -> None:
    with_gates = e2e_scale_report.section({"sizes": {}, "kueue_feature_gates": {"DisableWaitForPodsReady": True}})
    assert "Kueue feature gates set for this run** (--kueue-gate): `DisableWaitForPodsReady=true`." in with_gates
    assert "feature gates" not in e2e_scale_report.section({"sizes": {}})
    assert "feature gates" not in e2e_scale_report.section({"sizes": {}, "kueue_feature_gates": {}})


def test_a_kueue_concurrency_is_kind_equals_a_positive_number() -> None:
    assert e2e_scale.kueue_concurrency("Pod=20") == ("Pod", 20)
    assert e2e_scale.kueue_concurrency("Workload.kueue.x-k8s.io=10") == ("Workload.kueue.x-k8s.io", 10)
    for text in ("Pod", "=5", "Pod=0", "Pod=many"):
        with pytest.raises(argparse.ArgumentTypeError, match="KIND=N, N >= 1"):
            e2e_scale.kueue_concurrency(text)


def test_the_report_names_the_kueue_workers_a_run_set_and_says_nothing_without_them() -> None:
    with_workers = e2e_scale_report.section({"sizes": {}, "kueue_concurrency": {"Pod": 20}})
    assert "Kueue controller workers set for this run** (--kueue-concurrency): `Pod=20`." in with_workers
    assert "controller workers set" not in e2e_scale_report.section({"sizes": {}})
