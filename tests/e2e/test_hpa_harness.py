"""The HPA scaffolding itself: the real HPA controller (kube-controller-manager)
scales a custom resource's ``scale`` subresource from an External metric served
by tests/e2e/metrics_server.py through the aggregator.

The target is a throw-away CRD of this file; no controller runs for it, so the
test plays that part: it copies ``spec.replicas`` into ``status.replicas``
after each observation, as a workload controller would once its replicas exist.
"""

from __future__ import annotations

import json
import time
from typing import Any, Iterator

import pytest

import metrics_server
from cluster import ControlPlane, wait_until
from metrics_server import ExternalMetrics, external_metric_hpa, hpa_condition, hpa_external_current

pytestmark = pytest.mark.e2e

GROUP = "hpaharness.e2e.gpustack.ai"
KIND = "HarnessTarget"
PLURAL = "harnesstargets"
RESOURCE = f"{PLURAL}.{GROUP}"
METRIC = "harness_queue_depth"
#: The HPA's target average per replica; desired replicas = ceil(total / TARGET).
TARGET = 10


def _crd() -> dict[str, Any]:
    integer = {"type": "integer", "minimum": 0}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": RESOURCE},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"kind": KIND, "plural": PLURAL, "singular": KIND.lower(), "listKind": f"{KIND}List"},
            "versions": [{
                "name": "v1", "served": True, "storage": True,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"replicas": integer}},
                    "status": {"type": "object", "properties": {"replicas": integer,
                                                                  "selector": {"type": "string"}}},
                }}},
                "subresources": {
                    "status": {},
                    "scale": {"specReplicasPath": ".spec.replicas",
                              "statusReplicasPath": ".status.replicas",
                              "labelSelectorPath": ".status.selector"},
                },
            }],
        },
    }


@pytest.fixture
def harness_crd(control_plane: ControlPlane) -> Iterator[str]:
    control_plane.apply(_crd())
    control_plane.wait_established(RESOURCE)
    yield RESOURCE
    control_plane.kubectl("delete", "crd", RESOURCE, "--wait=false", "--ignore-not-found", check=False)


def test_a_real_hpa_scales_a_scale_subresource_up_and_down_from_an_external_metric(
    control_plane: ControlPlane, external_metrics: ExternalMetrics, e2e_namespace: str, harness_crd: str,
) -> None:
    cp, ns, name = control_plane, e2e_namespace, "target"
    selector = f"e2e.gpustack.ai/harness={name}"
    t0 = time.monotonic()
    timings: dict[str, float] = {}

    cp.apply({"apiVersion": f"{GROUP}/v1", "kind": KIND, "metadata": {"name": name, "namespace": ns},
              "spec": {"replicas": 1}})
    # The HPA refuses a target whose scale has no selector ("selector is required").
    cp.kubectl("patch", harness_crd, name, "-n", ns, "--subresource=status", "--type=merge",
               "-p", json.dumps({"status": {"replicas": 1, "selector": selector}}))
    # The HPA's series, and another one its metric selector must leave out
    # (were it summed in, the HPA would go straight to maxReplicas).
    external_metrics.set(ns, METRIC, TARGET, labels={"target": name})
    external_metrics.set(ns, METRIC, 1000, labels={"target": "someone-else"})
    cp.apply(external_metric_hpa("harness", ns, {"apiVersion": f"{GROUP}/v1", "kind": KIND, "name": name},
                                 METRIC, average_value=TARGET, metric_labels={"target": name},
                                 min_replicas=1, max_replicas=8))

    def hpa() -> dict[str, Any]:
        obj: dict[str, Any] = cp.kubectl_json("get", "hpa", "harness", "-n", ns)
        return obj

    def hpa_reads(total: int, replicas: int) -> dict[str, Any] | None:
        """One read of the HPA: it can scale, its metric is valid, it read the
        series' total spread over ``replicas`` and wants ``replicas``."""
        h = hpa()
        ok = (hpa_condition(h, "AbleToScale").get("status") == "True"
              and hpa_condition(h, "ScalingActive").get("status") == "True"
              and hpa_external_current(h, METRIC) == str(total // replicas)
              and h["status"].get("desiredReplicas") == replicas)
        return h if ok else None

    # kube-controller-manager's RESTMapper learns a new CRD within 30 s (its
    # discovery refresh); until then the HPA reports FailedGetScale.
    wait_until(lambda: hpa_reads(TARGET, 1), timeout=60, interval=0.5,
               message=f"the HPA reading {METRIC}={TARGET} at 1 replica\n{external_metrics.describe()}")
    timings["hpa reads the metric"] = round(time.monotonic() - t0, 1)

    def follow(expected: int, timeout: float = 30.0) -> list[int]:
        """Play the target's controller until spec and status both show
        ``expected``; return every spec.replicas observed (one read each)."""
        seen: list[int] = []

        def step() -> bool:
            obj = cp.kubectl_json("get", harness_crd, name, "-n", ns)
            spec, status = obj["spec"]["replicas"], obj.get("status", {}).get("replicas")
            seen.append(spec)
            if spec != status:
                cp.kubectl("patch", harness_crd, name, "-n", ns, "--subresource=status", "--type=merge",
                           "-p", json.dumps({"status": {"replicas": spec, "selector": selector}}))
            return bool(spec == expected and status == expected)

        wait_until(step, timeout=timeout, interval=0.2,
                   message=f"{KIND} {ns}/{name} at {expected} replicas (seen {seen})\n"
                           f"HPA: {json.dumps(hpa().get('status'))}\n{external_metrics.describe()}")
        return seen

    # Up: 40 over a target of 10 per replica is 4 replicas, in one step.
    ts = time.monotonic()
    external_metrics.set(ns, METRIC, 40, labels={"target": name})
    seen_up = follow(4)
    timings["scale 1 -> 4"] = round(time.monotonic() - ts, 1)
    assert set(seen_up) <= {1, 4}, f"spec.replicas went through {seen_up}; the HPA should jump from 1 to 4"
    wait_until(lambda: hpa_reads(40, 4), timeout=15, interval=0.5,
               message=f"the HPA reading 40 over 4 replicas\n{external_metrics.describe()}")

    # Down: 20 is 2 replicas; with stabilizationWindowSeconds 0 it acts at once.
    ts = time.monotonic()
    external_metrics.set(ns, METRIC, 20, labels={"target": name})
    seen_down = follow(2)
    timings["scale 4 -> 2"] = round(time.monotonic() - ts, 1)
    assert set(seen_down) <= {4, 2}, f"spec.replicas went through {seen_down}; the HPA should go from 4 to 2"
    final = wait_until(lambda: hpa_reads(20, 2), timeout=15, interval=0.5,
                       message=f"the HPA reading 20 over 2 replicas\n{external_metrics.describe()}")
    assert final["status"]["currentReplicas"] == 2, final["status"]

    # The reads came from the HPA controller, through the aggregator, with its metric selector.
    reads = external_metrics.requests(ns, METRIC)
    hpa_reads_seen = [r for r in reads if "horizontal-pod-autoscaler" in r.user_agent]
    assert hpa_reads_seen, f"no read from the HPA controller: {reads[-3:]}"
    assert {r.label_selector for r in hpa_reads_seen} == {"target=target"}, hpa_reads_seen[-3:]
    assert {r.user for r in hpa_reads_seen} == {"kubernetes-admin"}, hpa_reads_seen[-3:]
    assert hpa_reads_seen[-1].values == ("20",), hpa_reads_seen[-1]
    timings["total"] = round(time.monotonic() - t0, 1)
    print(f"\n[hpa harness] {timings}; fixture {external_metrics.timings}; "
          f"{len(hpa_reads_seen)} HPA reads; APIService {metrics_server.APISERVICE_NAME}")
