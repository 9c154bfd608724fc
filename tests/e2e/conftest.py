"""Fixtures for the end-to-end tests (see tests/e2e/README.md).

Every test under tests/e2e/ is marked ``e2e``.  They run by default; set
``MODELDEPLOYMENT_E2E=0`` to skip them all.

Fixtures:
  control_plane   (session)  a started :class:`cluster.ControlPlane`, with its real node
  real_node       (session)  that node (:class:`realnode.RealNode`: kubelet + containerd)
  real_pool       (session)  Kueue flavor + ClusterQueue sending Pods to it (:class:`realnode.RealPool`)
  e2e_namespace   (function) a fresh namespace, deleted afterwards
  external_metrics (session) an external.metrics.k8s.io server behind the aggregator
"""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path
from typing import Iterator

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import cluster as e2e_cluster  # noqa: E402  (tests/e2e/cluster.py)
import metrics_server as e2e_metrics  # noqa: E402  (tests/e2e/metrics_server.py)
import realnode as e2e_realnode  # noqa: E402  (tests/e2e/realnode.py)


def e2e_enabled() -> bool:
    return os.environ.get("MODELDEPLOYMENT_E2E", "1").strip().lower() not in ("0", "false", "no", "off")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason="MODELDEPLOYMENT_E2E=0")
    for item in items:
        try:
            Path(str(item.path)).resolve().relative_to(HERE)
        except ValueError:
            continue
        item.add_marker(pytest.mark.e2e)
        if not e2e_enabled():
            item.add_marker(skip)


@pytest.fixture(scope="session")
def control_plane(request: pytest.FixtureRequest) -> Iterator[e2e_cluster.ControlPlane]:
    """The loopback control plane, shared by the whole session.

    Runs tests/e2e/components/build.sh first (seconds when the component cache
    is warm).  The work dir, logs included, is kept when a test failed (or with
    MODELDEPLOYMENT_E2E_KEEP=1) and its path printed.
    """
    if not e2e_enabled():
        pytest.skip("MODELDEPLOYMENT_E2E=0")
    # Every component is real: one that cannot be built or started fails the suite, with the reason.
    try:
        bin_dir = e2e_cluster.ensure_built()
    except e2e_cluster.ControlPlaneError as exc:
        pytest.fail(f"the control plane could not be built: {exc}", pytrace=False)
    # One control plane for the session, with the real node beside the kwok pools (its taint
    # keeps every Pod that does not tolerate it off it).
    cp = e2e_cluster.ControlPlane(bin_dir=bin_dir, real_node=True)
    try:
        cp.start()
    except e2e_realnode.RealNodeUnavailable as exc:
        pytest.fail(f"the e2e real node cannot run on this machine: {exc}", pytrace=False)
    except e2e_cluster.ControlPlaneError as exc:
        pytest.fail(f"control plane failed to start: {exc}", pytrace=False)
    try:
        yield cp
    finally:
        cp.stop(keep_work_dir=request.session.testsfailed > 0)


@pytest.fixture(scope="session")
def real_node(control_plane: e2e_cluster.ControlPlane) -> e2e_realnode.RealNode:
    """The session control plane's real node (kubelet + containerd + kube-proxy + CoreDNS).

    ``.name``, ``.node_ip``, ``.dns_ip``; ``.exec(argv)`` runs a command in its network
    namespace (ClusterIPs and Pod IPs reachable), ``.http_get(url)`` and ``.dns_lookup(name)``
    do the common cases; ``.images`` lists the images imported into its containerd.
    """
    if control_plane.real_node is None:
        pytest.fail("the session control plane has no real node (ControlPlane(real_node=True))", pytrace=False)
    return control_plane.real_node


@pytest.fixture(scope="session")
def real_pool(control_plane: e2e_cluster.ControlPlane, real_node: e2e_realnode.RealNode) -> e2e_realnode.RealPool:
    """Kueue's ResourceFlavor (the real node's instance-type label, plus the toleration of its
    taint) and a ClusterQueue open to every namespace. ``.local_queue(ns)`` creates the
    LocalQueue a Pod names in ``kueue.x-k8s.io/queue-name``; ``.pod(...)`` builds such a Pod;
    ``.instance_type_object()`` is the matching InstanceType (apply it once the operator's
    CRDs exist). For the operator's joint admission, build ``RealPool(cp, node,
    admission_checks=[...])`` instead."""
    return e2e_realnode.RealPool(control_plane, real_node).apply()


@pytest.fixture
def e2e_namespace(control_plane: e2e_cluster.ControlPlane) -> Iterator[str]:
    """A new namespace (with its default ServiceAccount), deleted afterwards
    without waiting."""
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    control_plane.create_namespace(name)
    yield name
    control_plane.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="session")
def external_metrics(control_plane: e2e_cluster.ControlPlane) -> Iterator[e2e_metrics.ExternalMetrics]:
    """A test server for ``external.metrics.k8s.io/v1beta1``, registered through
    the aggregator (APIService Available=True before the test runs), so that the
    real HPA controller reads the values a test sets.

    ``.set(namespace, metric, value, labels=None)`` serves a quantity for the
    HPA's namespace; ``.describe()`` is the state for assertion messages;
    ``.requests(...)`` lists the reads answered.  Build HPAs with
    ``metrics_server.external_metric_hpa(...)``: its default behavior sets
    ``scaleDown.stabilizationWindowSeconds: 0`` (and scaleUp's) and lifts the rate
    limits, so an HPA acts within ~1 s (kube-controller-manager syncs HPAs every
    1 s); a hand-written HPA must set ``behavior.scaleDown.stabilizationWindowSeconds: 0``
    or it waits 300 s before any scale-down.  See tests/e2e/README.md
    ("External metrics for HPA tests").
    """
    em = e2e_metrics.ExternalMetrics(control_plane)
    try:
        em.start()
    except (TimeoutError, e2e_cluster.ControlPlaneError, e2e_cluster.KubectlError) as exc:
        em.stop()
        pytest.fail(f"the external metrics API could not be registered: {exc}\n{em.describe()}", pytrace=False)
    try:
        yield em
    finally:
        em.stop()
