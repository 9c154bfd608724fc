"""Admission webhook latency: world from files, and world read live from a real API server.

Each webhook is called the way the API server calls it: one AdmissionReview after the other
over a keep-alive connection to the service (bench.server under uvicorn, as `modeldeployment
serve` runs it). Reviews (CREATE, objects as the API server sends them, managedFields included):

- validate `pd-pair` (KV cache pool + router: reads the InstanceType, the Binding, its pool and
  the pool's backend),
- mutate `pd-pair` with the accelerator counts left out (same reads; answers a JSONPatch),
- validate `qwen-chat` (reads one InstanceType).

World from files: `MODELDEPLOYMENT_WORLD_DIR=examples/world` (app.world.DirectoryWorld).
World from the API server: etcd + kube-apiserver from the e2e component cache
(tests/e2e/cluster.py ControlPlane, only those two started), the CRDs (app.api.crd) and the
example world installed, the service started with that kubeconfig so the webhooks read through
app.kube.client `Kube.world_for`; in the same rounds, the API server's own latency for a GET
of one InstanceType over a keep-alive TLS connection (httpx) is measured. When the binaries are
not in the cache the section says so and is skipped (it never builds them: that takes an hour).
"""

from __future__ import annotations

import asyncio
import copy
import os
import statistics
import time
from pathlib import Path
from typing import Any, Callable

import orjson

from app import vocab
from bench import ROOT, fixtures, load

ROUNDS = 3
PER_ROUND = 200


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _stats(samples: list[float]) -> dict[str, Any]:
    return {"n": len(samples), "p50_ms": _percentile(samples, 0.5) * 1000, "p99_ms": _percentile(samples, 0.99) * 1000,
            "mean_ms": statistics.fmean(samples) * 1000, "max_ms": max(samples) * 1000}


def _as_submitted(obj: dict[str, Any]) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    meta = obj["metadata"]
    meta.update({"generation": 1, "creationTimestamp": fixtures.CREATED, "uid": fixtures._uid("md", meta["name"]),
                 "managedFields": [fixtures._managed("kubectl-client-side-apply", "Update", {"spec": obj["spec"]},
                                                     api_version=vocab.API_VERSION)]})
    return obj


def review(obj: dict[str, Any], uid: str) -> bytes:
    meta = obj["metadata"]
    return orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid, "operation": "CREATE",
        "kind": {"group": vocab.GROUP, "version": vocab.VERSION, "kind": vocab.KIND_MODEL_DEPLOYMENT},
        "resource": {"group": vocab.GROUP, "version": vocab.VERSION, "resource": vocab.PLURAL_MODEL_DEPLOYMENTS},
        "requestKind": {"group": vocab.GROUP, "version": vocab.VERSION, "kind": vocab.KIND_MODEL_DEPLOYMENT},
        "namespace": meta["namespace"], "name": meta["name"], "object": obj, "oldObject": None,
        "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]},
        "dryRun": False, "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
    }})


def cases() -> dict[str, tuple[str, bytes]]:
    pd = _as_submitted(fixtures.example("pd-pair"))
    bare = copy.deepcopy(pd)
    for role in bare["spec"]["roles"]:
        role["resources"].pop("accelerator", None)
    qwen = _as_submitted(fixtures.example("qwen-chat"))
    return {
        "validate pd-pair": ("/webhooks/validate", review(pd, "bench-validate-pd")),
        "mutate pd-pair": ("/webhooks/mutate", review(bare, "bench-mutate-pd")),
        "validate qwen-chat": ("/webhooks/validate", review(qwen, "bench-validate-qwen")),
    }


async def _sequential(port: int, raw: bytes, n: int) -> tuple[list[float], bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 22)
    samples = []
    try:
        for _ in range(n):
            started = time.perf_counter()
            status, _size = await load._one(reader, writer, raw)
            samples.append(time.perf_counter() - started)
            if status != 200:
                raise RuntimeError(f"webhook answered HTTP {status}")
    finally:
        writer.close()
    return samples, b""


def _check_answer(port: int, path: str, raw: bytes) -> dict[str, Any]:
    async def once() -> dict[str, Any]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 22)
        try:
            writer.write(load.http_request(path, raw))
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length")))
            return orjson.loads(await reader.readexactly(length))
        finally:
            writer.close()

    return asyncio.run(once())["response"]


def _run_rounds(port: int, log: Callable[[str], None], scale: float,
                extra: dict[str, Callable[[int], list[float]]] | None = None) -> dict[str, Any]:
    reviews = cases()
    samples: dict[str, list[float]] = {name: [] for name in [*reviews, *(extra or {})]}
    answers = {}
    for name, (path, raw) in reviews.items():
        answers[name] = _check_answer(port, path, raw)
        # Warm-up (imports, first world read).
        asyncio.run(_sequential(port, load.http_request(path, raw), 5))
    per_round = max(20, int(PER_ROUND * scale))
    for _ in range(ROUNDS):
        for name, fn in (extra or {}).items():
            samples[name] += fn(per_round)
        for name, (path, raw) in reviews.items():
            got, _ = asyncio.run(_sequential(port, load.http_request(path, raw), per_round))
            samples[name] += got
    out: dict[str, Any] = {}
    for name, values in samples.items():
        out[name] = _stats(values)
        if name in answers:
            response = answers[name]
            out[name]["allowed"] = response.get("allowed")
            out[name]["patch"] = bool(response.get("patch"))
            out[name]["message"] = (response.get("status") or {}).get("message", "")[:200]
        log(f"  {name:22s} p50 {out[name]['p50_ms']:7.2f} ms   p99 {out[name]['p99_ms']:7.2f} ms   (n={len(values)})")
    return out


def run_files(log: Callable[[str], None], work: Path, scale: float = 1.0) -> dict[str, Any]:
    with load.server(1024, work / "webhooks-files-server.log", world_dir=str(ROOT / "examples" / "world")) as port:
        return _run_rounds(port, log, scale)


# --- the real API server -----------------------------------------------------------------------

def _control_plane_class() -> Any:
    import sys

    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests.e2e.cluster import ControlPlane  # noqa: PLC0415

    class ApiServerOnly(ControlPlane):  # type: ignore[misc, valid-type]
        """etcd + kube-apiserver only: all a live world read needs (no nodes, no Kueue)."""

        def start(self) -> "ApiServerOnly":
            if self._started:
                return self
            self._started = True
            missing = [n for n in ("etcd", "kube-apiserver") if not os.access(self._bin(n), os.X_OK)]
            if missing:
                raise FileNotFoundError(f"missing {', '.join(missing)} in {self.bin_dir}")
            try:
                self._make_pki()
                self._start_etcd()
                self._start_apiserver()
                self._write_kubeconfig()
                self._wait_apiserver()
            except BaseException:
                self.stop()
                raise
            return self

    return ApiServerOnly


def _install_world(client: Any, log: Callable[[str], None]) -> dict[str, Any]:
    from app.api.crd import all_crds

    for crd in all_crds().values():
        client.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=crd).raise_for_status()
    deadline = time.monotonic() + 60
    for crd in all_crds().values():
        name = crd["metadata"]["name"]
        while True:
            got = client.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}").json()
            if any(c.get("type") == "Established" and c.get("status") == "True"
                   for c in (got.get("status") or {}).get("conditions") or []):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"CRD {name} not established")
            time.sleep(0.2)
    client.post("/api/v1/namespaces", json={"apiVersion": "v1", "kind": "Namespace",
                                           "metadata": {"name": fixtures.NAMESPACE}}).raise_for_status()
    plurals = {crd["spec"]["names"]["kind"]: (crd["spec"]["names"]["plural"], crd["spec"]["scope"])
               for crd in all_crds().values()}
    first_instance_type = ""
    # The API server may take a moment to serve a freshly established CRD's endpoints.
    time.sleep(1.0)
    for obj in fixtures.world_objects():
        plural, scope = plurals[obj["kind"]]
        ns = obj["metadata"].get("namespace")
        base = f"/apis/{obj['apiVersion']}" + (f"/namespaces/{ns}" if scope == "Namespaced" else "") + f"/{plural}"
        for attempt in range(50):
            created = client.post(base, json=obj)
            if created.status_code != 404:
                break
            time.sleep(0.2)
        created.raise_for_status()
        if "status" in obj:
            body = {**created.json(), "status": obj["status"]}
            client.put(f"{base}/{obj['metadata']['name']}/status", json=body).raise_for_status()
        if obj["kind"] == vocab.KIND_INSTANCE_TYPE and not first_instance_type:
            first_instance_type = f"{base}/{obj['metadata']['name']}"
    log(f"  installed {len(all_crds())} CRDs and {len(fixtures.world_objects())} world objects")
    return {"get_path": first_instance_type}


def run_apiserver(log: Callable[[str], None], work: Path, scale: float = 1.0) -> dict[str, Any]:
    try:
        cls = _control_plane_class()
    except Exception as exc:  # noqa: BLE001
        return {"available": False, "reason": f"tests/e2e/cluster.py could not be imported: {exc}"}
    cp = cls(work_dir=work / "controlplane", kueue=False, metacontroller=False)
    if not all(os.access(cp.bin_dir / n, os.X_OK) for n in ("etcd", "kube-apiserver")):
        return {"available": False,
                "reason": f"etcd and kube-apiserver are not in the e2e component cache ({cp.bin_dir}); "
                          "run tests/e2e/components/build.sh to build them"}
    started = time.monotonic()
    try:
        cp.start()
    except Exception as exc:  # noqa: BLE001
        return {"available": False, "reason": f"the API server did not start: {type(exc).__name__}: {exc}"[:600]}
    try:
        log(f"  etcd + kube-apiserver up in {time.monotonic() - started:.1f} s")
        with cp.http_client(timeout=30) as client:
            info = _install_world(client, log)
            version = client.get("/version").json().get("gitVersion")
        get_path = info["get_path"]
        get_client = cp.http_client(timeout=30)

        def api_get(n: int) -> list[float]:
            samples = []
            for _ in range(n):
                begun = time.perf_counter()
                response = get_client.get(get_path)
                samples.append(time.perf_counter() - begun)
                response.raise_for_status()
            return samples

        api_get(10)  # connection and warm-up
        env_kubeconfig = os.environ.get("KUBECONFIG")
        os.environ["KUBECONFIG"] = str(cp.kubeconfig)
        shim: str | None = None
        try:
            with load.server(1024, work / "webhooks-apiserver-server.log", kube="auto") as port:
                path, raw = cases()["validate qwen-chat"]
                probe = _check_answer(port, path, raw)
                if probe.get("allowed"):
                    out = _run_rounds(port, log, scale, extra={"API server GET": api_get})
                else:
                    shim = (probe.get("status") or {}).get("message", "")
            if shim is not None:
                log(f"  as shipped, every live read fails closed: {shim[:160]}")
                log("  measuring with the bench-only client shim (bench/server.py shim_kube_timeout)")
                with load.server(1024, work / "webhooks-apiserver-shim-server.log", kube="auto",
                                 extra_args=("--shim-kube-timeout",)) as port:
                    out = _run_rounds(port, log, scale, extra={"API server GET": api_get})
        finally:
            if env_kubeconfig is None:
                os.environ.pop("KUBECONFIG", None)
            else:
                os.environ["KUBECONFIG"] = env_kubeconfig
            get_client.close()
        return {"available": True, "kube_apiserver": version, "get": get_path, "latency": out,
                "as_shipped_failure": shim}
    finally:
        cp.stop()
