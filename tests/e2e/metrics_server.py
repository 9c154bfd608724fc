"""A test server for the ``external.metrics.k8s.io/v1beta1`` API, served through
the control plane's aggregator so that the real HorizontalPodAutoscaler
controller (in kube-controller-manager) reads metric values a test sets.

What runs::

    HPA controller --(admin kubeconfig)--> kube-apiserver /apis/external.metrics.k8s.io/...
        --(aggregator: front-proxy client cert + X-Remote-User)--> this server (HTTPS, 127.0.0.1)

How the aggregator reaches a loopback server: the APIService names a Service of
type ``ExternalName`` (``externalName: localhost``).  The API server's default
("cluster") service resolver turns such a Service into ``https://localhost:<port>``
and its availability check skips the EndpointSlice checks it makes for ClusterIP
Services.  The ClusterIP route is closed here: EndpointSlice validation refuses
loopback addresses, and no kube-proxy gives a ClusterIP meaning.  The aggregator
sets the TLS server name to ``<service>.<namespace>.svc``, so the serving
certificate (from the cluster CA) carries that name.

The server serves what the aggregator and the HPA ask for:

- ``/apis`` (APIGroupList; the aggregator then falls back from aggregated to
  per-version discovery), ``/apis/external.metrics.k8s.io`` (APIGroup),
  ``/apis/external.metrics.k8s.io/v1beta1`` (APIResourceList; the availability
  check's probe),
- ``/apis/external.metrics.k8s.io/v1beta1/namespaces/<ns>/<metric>?labelSelector=…``
  (ExternalMetricValueList; 404 with a Status naming the metric when no value
  was set),
- ``/openapi/v2`` and ``/openapi/v3`` (empty documents, for the OpenAPI
  aggregation controller), ``/healthz``, ``/livez``, ``/readyz``.

Every request must present a client certificate signed by the cluster CA (the
API server's ``--requestheader-client-ca-file``); the aggregator presents its
front-proxy client certificate and names the caller in ``X-Remote-User``.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import json
import re
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Mapping
from urllib.parse import parse_qs, urlsplit

from cluster import ControlPlane, wait_until  # tests/e2e is on sys.path (conftest.py)

GROUP = "external.metrics.k8s.io"
VERSION = "v1beta1"
GROUP_VERSION = f"{GROUP}/{VERSION}"
APISERVICE_NAME = f"{VERSION}.{GROUP}"
#: Namespace and name of the ExternalName Service the APIService points at.
SERVICE_NAMESPACE = "e2e-external-metrics"
SERVICE_NAME = "external-metrics"
#: The front-proxy identity the API server's aggregator presents
#: (``--requestheader-allowed-names`` in cluster.py).
FRONT_PROXY_NAME = "front-proxy-client"
#: ClusterRole/binding a cluster with per-controller credentials needs for the
#: HPA controller (ServiceAccount kube-system/horizontal-pod-autoscaler).
READER_ROLE = "e2e-external-metrics-reader"

# A Kubernetes quantity: a decimal number with an optional suffix (binary SI,
# decimal SI or a decimal exponent), as apimachinery's resource.Quantity parses it.
_QUANTITY = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$")
_SELECTOR_SET = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


class SelectorError(ValueError):
    """A labelSelector this server cannot parse."""


def quantity(value: str | int | float) -> str:
    """``value`` as a Kubernetes quantity string ("3", "2500m", "1.5k").

    Integers and floats are written exactly (floats in milli-units, the HPA's
    resolution); a string must already be a quantity.
    """
    if isinstance(value, bool):
        raise TypeError(f"metric value {value!r}: a bool is not a quantity; pass a number or a quantity string")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        milli = round(value * 1000)
        if abs(milli - value * 1000) > 1e-6:
            raise ValueError(f"metric value {value!r} has more precision than a milli-unit; round it or pass a string")
        return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"
    if isinstance(value, str) and _QUANTITY.match(value.strip()):
        return value.strip()
    raise ValueError(
        f"metric value {value!r} is not a Kubernetes quantity; use e.g. 3, 2.5, '500m' or '2k'")


def _split_selector(selector: str) -> list[str]:
    """Split on the commas that are not inside ``in (…)`` parentheses."""
    parts, depth, current = [], 0, ""
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    return [p.strip() for p in parts if p.strip()]


def selector_matches(selector: str, labels: Mapping[str, str]) -> bool:
    """Whether ``labels`` satisfy a label selector string (``k=v``, ``k==v``,
    ``k!=v``, ``k in (a,b)``, ``k notin (a,b)``, ``k``, ``!k``; terms ANDed).
    The empty selector matches everything."""
    for term in _split_selector(selector):
        m = _SELECTOR_SET.match(term)
        if m:
            key, op, values = m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",") if v.strip()}
            present = key in labels and labels[key] in values
            if present != (op == "in"):
                return False
        elif "!=" in term:
            key, value = (s.strip() for s in term.split("!=", 1))
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = (s.strip() for s in term.replace("==", "=", 1).split("=", 1))
            if labels.get(key) != value:
                return False
        elif term.startswith("!"):
            if term[1:].strip() in labels:
                return False
        elif re.fullmatch(r"[A-Za-z0-9._/-]+", term):
            if term not in labels:
                return False
        else:
            raise SelectorError(f"labelSelector term {term!r} is not understood")
    return True


@dataclasses.dataclass(frozen=True)
class MetricRequest:
    """One metric read the server answered (for assertions and describe())."""

    at: float  # time.time()
    namespace: str
    metric: str
    label_selector: str
    user: str  # X-Remote-User from the aggregator, else the client certificate's CN
    user_agent: str
    status: int
    values: tuple[str, ...]  # the values returned


def _json_status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


class ExternalMetricsServer:
    """The external metrics API server (one thread, HTTPS on 127.0.0.1).

    ``start()`` listens on ``port`` (0: a free one); ``register(cp)`` makes the
    aggregator serve it; ``set()`` changes what it answers.
    """

    #: How many answered metric reads are kept for requests()/describe().
    KEEP_REQUESTS = 500

    def __init__(self, cert: str, key: str, client_ca: str, port: int = 0) -> None:
        self._lock = threading.Lock()
        # (namespace, metric) -> {frozenset(labels.items()): quantity}
        self._values: dict[tuple[str, str], dict[frozenset[tuple[str, str]], str]] = {}
        self._requests: list[MetricRequest] = []
        #: Connections that failed before an answer (TLS handshake, bad client cert…), last 20.
        self.errors: list[str] = []
        self._cert, self._key, self._client_ca = str(cert), str(key), str(client_ca)
        self._requested_port = port
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    # ---- values ------------------------------------------------------------------

    def set(self, namespace: str, metric: str, value: str | int | float,
            labels: Mapping[str, str] | None = None) -> str:
        """Serve ``value`` for ``metric`` in ``namespace`` (the HPA's namespace),
        as the series with ``labels`` (the HPA's ``metric.selector`` picks
        series by these).  Replaces that series' previous value; returns the
        quantity string served."""
        if not namespace or not metric:
            raise ValueError("set(namespace, metric, value): namespace and metric must be non-empty")
        served = quantity(value)
        series = frozenset((str(k), str(v)) for k, v in (labels or {}).items())
        with self._lock:
            self._values.setdefault((namespace, metric), {})[series] = served
        return served

    def delete(self, namespace: str, metric: str) -> None:
        """Stop serving ``metric`` in ``namespace`` (reads answer 404 again)."""
        with self._lock:
            self._values.pop((namespace, metric), None)

    def requests(self, namespace: str | None = None, metric: str | None = None) -> list[MetricRequest]:
        """Metric reads answered so far (oldest first), optionally filtered."""
        with self._lock:
            return [r for r in self._requests
                    if (namespace is None or r.namespace == namespace) and (metric is None or r.metric == metric)]

    def _lookup(self, namespace: str, metric: str, selector: str) -> list[dict[str, Any]] | None:
        with self._lock:
            series = dict(self._values.get((namespace, metric), {}))
        if not series:
            return None
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        return [
            {"metricName": metric, "metricLabels": dict(labels), "timestamp": now, "value": value}
            for labels, value in sorted(series.items(), key=lambda kv: sorted(kv[0]))
            if selector_matches(selector, dict(labels))
        ]

    def _record(self, req: MetricRequest) -> None:
        with self._lock:
            self._requests.append(req)
            del self._requests[:-self.KEEP_REQUESTS]

    # ---- lifecycle -----------------------------------------------------------------

    def start(self) -> "ExternalMetricsServer":
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self._cert, self._key)
        ctx.load_verify_locations(self._client_ca)
        ctx.verify_mode = ssl.CERT_REQUIRED
        server = self

        class Handler(_Handler):
            metrics = server

        httpd = _Server(("127.0.0.1", self._requested_port), Handler)
        httpd.metrics = self
        httpd.daemon_threads = True
        # The handshake runs in each request's thread (on first read), not in the accept loop.
        httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True, do_handshake_on_connect=False)
        self._httpd = httpd
        self.port = httpd.server_address[1]
        self._thread = threading.Thread(target=httpd.serve_forever, name="external-metrics", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def describe_values(self) -> str:
        with self._lock:
            rows = [f"  {ns}/{metric}{{{','.join(f'{k}={v}' for k, v in sorted(labels))}}} = {value}"
                    for (ns, metric), series in sorted(self._values.items())
                    for labels, value in series.items()]
            last = self._requests[-5:]
            errors = self.errors[-3:]
        reads = [f"  {time.strftime('%H:%M:%S', time.localtime(r.at))} {r.namespace}/{r.metric}"
                 f"?labelSelector={r.label_selector!r} by {r.user} ({r.user_agent}) -> {r.status} {list(r.values)}"
                 for r in last]
        return "\n".join([f"external metrics server https://127.0.0.1:{self.port}",
                          "values:", *(rows or ["  (none)"]),
                          f"last reads ({len(last)} shown):", *(reads or ["  (none)"]),
                          "last connection errors:", *([f"  {e}" for e in errors] or ["  (none)"])])


class _Server(ThreadingHTTPServer):
    metrics: ExternalMetricsServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        with self.metrics._lock:
            self.metrics.errors.append(f"{time.strftime('%H:%M:%S')} {client_address}: {exc!r}")
            del self.metrics.errors[:-20]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 15
    metrics: ExternalMetricsServer  # set by ExternalMetricsServer.start()

    def setup(self) -> None:
        super().setup()  # sets the socket timeout
        self.connection.do_handshake()  # in this request's thread

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        return  # requests are kept in ExternalMetricsServer.requests()

    def _send(self, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _caller(self) -> str:
        cert = self.connection.getpeercert() or {}
        cn = next((v for rdn in cert.get("subject", ()) for k, v in rdn if k == "commonName"), "")
        if cn == FRONT_PROXY_NAME:
            return self.headers.get("X-Remote-User", "") or cn
        return cn

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        url = urlsplit(self.path)
        path = url.path.rstrip("/") or "/"
        if path in ("/healthz", "/livez", "/readyz"):
            body = b"ok"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if path == "/openapi/v2":
            self._send(200, {"swagger": "2.0", "info": {"title": "e2e external metrics", "version": VERSION},
                             "paths": {}})
            return
        if path == "/openapi/v3":
            self._send(200, {"paths": {}})
            return
        if path == "/apis":
            self._send(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": [_api_group()]})
            return
        if path == f"/apis/{GROUP}":
            self._send(200, {"kind": "APIGroup", "apiVersion": "v1", **_api_group()})
            return
        if path == f"/apis/{GROUP_VERSION}":
            self._send(200, {
                "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": GROUP_VERSION,
                "resources": [{"name": "externalmetrics", "singularName": "", "namespaced": True,
                               "kind": "ExternalMetricValueList", "verbs": ["get"]}],
            })
            return
        m = re.fullmatch(rf"/apis/{re.escape(GROUP_VERSION)}/namespaces/([^/]+)/([^/]+)", path)
        if m:
            self._metric(m.group(1), m.group(2), parse_qs(url.query).get("labelSelector", [""])[0])
            return
        self._send(404, _json_status(404, "NotFound", f"the external metrics test server does not serve {path}"))

    def _metric(self, namespace: str, metric: str, selector: str) -> None:
        try:
            items = self.metrics._lookup(namespace, metric, selector)
        except SelectorError as exc:
            code, body = 400, _json_status(400, "BadRequest", str(exc))
            items = []
        else:
            if items is None:
                code, body = 404, _json_status(
                    404, "NotFound",
                    f"external metric {metric!r} has no value in namespace {namespace!r}; "
                    f"the test sets it with external_metrics.set({namespace!r}, {metric!r}, <quantity>)")
                items = []
            else:
                code, body = 200, {"kind": "ExternalMetricValueList", "apiVersion": GROUP_VERSION,
                                   "metadata": {}, "items": items}
        self.metrics._record(MetricRequest(
            at=time.time(), namespace=namespace, metric=metric, label_selector=selector,
            user=self._caller(), user_agent=self.headers.get("User-Agent", ""), status=code,
            values=tuple(i["value"] for i in items)))
        self._send(code, body)


def _api_group() -> dict[str, Any]:
    gv = {"groupVersion": GROUP_VERSION, "version": VERSION}
    return {"name": GROUP, "versions": [gv], "preferredVersion": gv}


# --------------------------------------------------------------------------
# Registration through the aggregator
# --------------------------------------------------------------------------


def registration_manifests(port: int, ca_bundle: bytes) -> list[dict[str, Any]]:
    """Namespace, ExternalName Service, APIService and the HPA controller's RBAC."""
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SERVICE_NAMESPACE}},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": SERVICE_NAME, "namespace": SERVICE_NAMESPACE},
         "spec": {"type": "ExternalName", "externalName": "localhost",
                  "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}},
        {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
         "metadata": {"name": APISERVICE_NAME},
         "spec": {"group": GROUP, "version": VERSION,
                  "service": {"namespace": SERVICE_NAMESPACE, "name": SERVICE_NAME, "port": port},
                  "caBundle": base64.b64encode(ca_bundle).decode(),
                  "groupPriorityMinimum": 100, "versionPriority": 100}},
        # kube-controller-manager here runs with the admin kubeconfig
        # (--use-service-account-credentials=false), which may read every API;
        # with per-controller credentials the HPA controller reads external
        # metrics as this ServiceAccount, which needs this role.
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": READER_ROLE},
         "rules": [{"apiGroups": [GROUP], "resources": ["*"], "verbs": ["get", "list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": READER_ROLE},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": READER_ROLE},
         "subjects": [{"kind": "ServiceAccount", "name": "horizontal-pod-autoscaler",
                       "namespace": "kube-system"}]},
    ]


def apiservice_available(cp: ControlPlane) -> dict[str, Any] | None:
    """The APIService's ``Available`` condition (one read), or None."""
    obj = cp.kubectl_json("get", "apiservice", APISERVICE_NAME)
    return next((c for c in obj.get("status", {}).get("conditions", []) if c.get("type") == "Available"), None)


# --------------------------------------------------------------------------
# HPAs for tests
# --------------------------------------------------------------------------


def fast_behavior() -> dict[str, Any]:
    """An HPA ``behavior`` that acts at once in both directions: no
    stabilization window (the default for scale-down is 300 s) and no rate
    limit (the default scale-up policy adds at most max(100 %, 4 Pods) per 15 s)."""
    policy = [{"type": "Pods", "value": 1000, "periodSeconds": 1}]
    return {"scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max", "policies": policy},
            "scaleDown": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max", "policies": policy}}


def external_metric_hpa(
    name: str,
    namespace: str,
    target: Mapping[str, str],
    metric: str,
    *,
    average_value: str | int | float | None = None,
    value: str | int | float | None = None,
    metric_labels: Mapping[str, str] | None = None,
    min_replicas: int = 1,
    max_replicas: int = 10,
    behavior: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """An ``autoscaling/v2`` HPA scaling ``target`` (``{"apiVersion", "kind",
    "name"}``, any kind with a scale subresource) on one External metric.

    Give exactly one of ``average_value`` (desired = ceil(total / average_value),
    whatever Pods exist) or ``value`` (desired = ceil(total / value × Ready Pods
    matching the target's scale selector); it needs such Pods).  ``behavior``
    defaults to :func:`fast_behavior`.
    """
    if (average_value is None) == (value is None):
        raise ValueError("external_metric_hpa: give exactly one of average_value= or value=")
    metric_target: dict[str, Any] = (
        {"type": "AverageValue", "averageValue": quantity(average_value)} if average_value is not None
        else {"type": "Value", "value": quantity(value)}  # type: ignore[arg-type]
    )
    metric_id: dict[str, Any] = {"name": metric}
    if metric_labels:
        metric_id["selector"] = {"matchLabels": dict(metric_labels)}
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "scaleTargetRef": {k: target[k] for k in ("apiVersion", "kind", "name")},
            "minReplicas": min_replicas,
            "maxReplicas": max_replicas,
            "metrics": [{"type": "External", "external": {"metric": metric_id, "target": metric_target}}],
            "behavior": dict(behavior) if behavior is not None else fast_behavior(),
        },
    }


def hpa_condition(hpa: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """One condition of an HPA object (``{}`` when absent)."""
    return next((c for c in hpa.get("status", {}).get("conditions", []) if c.get("type") == kind), {})


def hpa_external_current(hpa: Mapping[str, Any], metric: str) -> str | None:
    """The HPA's last reading of External ``metric`` (its ``averageValue`` or
    ``value``), from ``status.currentMetrics``; None before the first reading."""
    for m in hpa.get("status", {}).get("currentMetrics", []) or []:
        ext = m.get("external") or {}
        if m.get("type") == "External" and ext.get("metric", {}).get("name") == metric:
            current = ext.get("current", {})
            reading = current.get("averageValue") or current.get("value")
            return str(reading) if reading is not None else None
    return None


class ExternalMetrics:
    """What the ``external_metrics`` fixture yields: the server, registered
    through ``cp``'s aggregator."""

    def __init__(self, cp: ControlPlane) -> None:
        self.cp = cp
        cert, key = cp.issue_serving_cert(
            hosts=(f"{SERVICE_NAME}.{SERVICE_NAMESPACE}.svc", "localhost", "127.0.0.1"))
        self.server = ExternalMetricsServer(str(cert), str(key), client_ca=str(cp.ca_cert_path))
        #: Seconds the start took (server, registration, Available=True).
        self.timings: dict[str, float] = {}

    def start(self, timeout: float = 60.0) -> "ExternalMetrics":
        t0 = time.monotonic()
        self.server.start()
        self.cp.apply(registration_manifests(self.server.port, self.cp.ca_bundle))
        self.timings["registered"] = round(time.monotonic() - t0, 2)
        last: dict[str, Any] = {}

        def available() -> bool:
            nonlocal last
            last = apiservice_available(self.cp) or {}
            return last.get("status") == "True"

        try:
            wait_until(available, timeout=timeout, interval=0.5,
                       message=f"APIService {APISERVICE_NAME} Available=True")
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}; last Available condition: {last}") from exc
        self.timings["available"] = round(time.monotonic() - t0, 2)
        return self

    def stop(self) -> None:
        """Unregister first (an unavailable APIService breaks discovery, and so
        namespace deletion and garbage collection), then stop the server."""
        self.cp.kubectl("delete", "apiservice", APISERVICE_NAME, "--ignore-not-found", check=False)
        self.cp.kubectl("delete", "namespace", SERVICE_NAMESPACE, "--wait=false", "--ignore-not-found",
                        check=False)
        self.server.stop()

    def set(self, namespace: str, metric: str, value: str | int | float,
            labels: Mapping[str, str] | None = None) -> str:
        """See :meth:`ExternalMetricsServer.set`."""
        return self.server.set(namespace, metric, value, labels)

    def delete(self, namespace: str, metric: str) -> None:
        self.server.delete(namespace, metric)

    def requests(self, namespace: str | None = None, metric: str | None = None) -> list[MetricRequest]:
        return self.server.requests(namespace, metric)

    def describe(self) -> str:
        """The server's values and last reads, and the APIService's condition
        (one read) — for assertion messages."""
        try:
            cond = apiservice_available(self.cp)
        except Exception as exc:  # noqa: BLE001 - diagnostics only
            cond = {"error": repr(exc)}
        return f"{self.server.describe_values()}\nAPIService {APISERVICE_NAME} Available: {cond}"
