"""The baseline hook service of bench/e2e_scale.py: Metacontroller's hooks answered from children
precomputed with our own render, so that Metacontroller, the API server, Kueue and kwok do the same
work as with the operator while the hook itself does next to nothing.

    python -m bench.e2e_scale_baseline --port P --renders FILE --kubeconfig K

`FILE` (JSON, re-read when a spec is not in it yet) maps a deployment name and the sha256 of its
stored spec to what `app.control.sync.reconcile` answered for it as a new deployment: its Pods by
role and ordinal, its other children (Services, the router's objects), its customize answer.

Per sync the service parses the request (orjson: the JSON floor) and applies the same cadence as
the operator, with none of its checks:

- a replica with no Pod gets its precomputed Pods (after its old Workload is gone);
- a replica on another render is replaced one per role at a time (its Pods omitted, its Workload
  deleted), a Ready one only while every other replica of the role is Ready — the operator's
  availability gate, so an image edit rolls in the same number of steps;
- the joint AdmissionCheck is set Ready on the deployment's Workloads once every replica's holds
  quota (the same server-side apply as the operator's executor);
- status: phase Ready once every replica runs the current render and is Ready.

Finalize answers no children, deletes the Workloads and reports finalized once nothing is left.
`GET /stats` returns the hook calls and their latencies (seconds) for the driver.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import time
from pathlib import Path
from typing import Any

import orjson
import uvicorn

from app import vocab
from app.control.intents import SetAdmissionCheck
from app.kube.client import Kube, load_config
from app.kube.executor import utc_now, workload_check_body
from app.render import names

WORKLOADS = f"{vocab.KIND_WORKLOAD}.{vocab.KUEUE_API_VERSION}"


def spec_key(spec: Any) -> str:
    return hashlib.sha256(orjson.dumps(spec, option=orjson.OPT_SORT_KEYS)).hexdigest()


def _labels(obj: dict[str, Any]) -> dict[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def _ready(pod: dict[str, Any]) -> bool:
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def _condition(obj: dict[str, Any], type_: str) -> bool:
    return any(c.get("type") == type_ and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def _kept(pod: dict[str, Any]) -> dict[str, Any]:
    meta = pod["metadata"]
    return {"apiVersion": "v1", "kind": "Pod", "spec": pod.get("spec") or {},
            "metadata": {k: meta[k] for k in ("name", "namespace", "labels", "annotations") if k in meta}}


class Baseline:
    def __init__(self, renders_file: Path, kube: Kube | None) -> None:
        self.file = renders_file
        self.renders: dict[str, dict[str, Any]] = {}
        self.kube = kube
        self.calls: dict[str, list[float]] = {"customize": [], "sync": [], "finalize": []}
        self.misses = 0
        self.api_errors = 0
        self.pending: set[asyncio.Task[Any]] = set()

    def render(self, parent: dict[str, Any]) -> dict[str, Any] | None:
        name = parent["metadata"]["name"]
        key = spec_key(parent.get("spec"))
        found = self.renders.get(name, {}).get(key)
        if found is None:
            self.renders = orjson.loads(self.file.read_bytes())
            found = self.renders.get(name, {}).get(key)
        return found

    def _spawn(self, coro: Any) -> None:
        """API writes run beside the answer, as the operator's executor's do before it answers;
        here they do not hold the answer up."""
        task = asyncio.get_running_loop().create_task(coro)
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)

    async def _safe(self, coro: Any) -> None:
        try:
            await coro
        except Exception:  # noqa: BLE001 - the next sync decides again
            self.api_errors += 1

    def _delete_workload(self, workload: dict[str, Any] | None) -> None:
        if self.kube is None or workload is None or (workload.get("metadata") or {}).get("deletionTimestamp"):
            return
        meta = workload["metadata"]
        self._spawn(self._safe(self.kube.delete_workload(meta["namespace"], meta["name"], meta["uid"])))

    def _admit(self, workload: dict[str, Any]) -> None:
        if self.kube is None:
            return
        for check in (workload.get("status") or {}).get("admissionChecks") or []:
            if check.get("name") == vocab.ADMISSION_CHECK_NAME and check.get("state") == "Ready":
                return
        meta = workload["metadata"]
        intent = SetAdmissionCheck(meta["namespace"], meta["name"], "", "Ready", "every replica holds quota",
                                   utc_now())
        self._spawn(self._safe(self.kube.apply_workload_check(meta["namespace"], meta["name"],
                                                              workload_check_body(intent))))

    def sync(self, request: dict[str, Any], finalizing: bool) -> tuple[int, dict[str, Any]]:
        parent = request["parent"]
        meta = parent["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        observed_pods = list(((request.get("children") or {}).get("Pod.v1") or {}).values())
        workloads = {w["metadata"]["name"]: w for w in ((request.get("related") or {}).get(WORKLOADS) or {}).values()}
        if finalizing:
            for workload in workloads.values():
                self._delete_workload(workload)
            return 200, {"children": [], "status": {"phase": vocab.PHASE_DELETING},
                         "finalized": not observed_pods and not workloads}
        render = self.render(parent)
        if render is None:
            self.misses += 1
            return 503, {"error": f"no precomputed render of {name} for this spec"}
        by_replica: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for pod in observed_pods:
            labels = _labels(pod)
            by_replica.setdefault((labels.get(vocab.LABEL_COMPONENT, ""), labels.get(vocab.LABEL_POD_ORDINAL, "")),
                                  []).append(pod)
        children: list[dict[str, Any]] = list(render["others"])
        all_ready = True
        groups: list[str] = []
        for role, ordinals in render["pods"].items():
            fingerprint = render["fingerprints"][role]
            size = render["sizes"][role]
            ready = {o: len(by_replica.get((role, o), [])) == size and all(_ready(p) for p in by_replica[(role, o)])
                     for o in ordinals}
            turnover_taken = False
            for ordinal, desired in ordinals.items():
                group = names.pod_group(namespace, name, role, int(ordinal))
                groups.append(group)
                pods = by_replica.get((role, ordinal), [])
                current = all(((p["metadata"].get("annotations") or {}).get(vocab.ANNOTATION_FINGERPRINT)
                               == fingerprint) for p in pods)
                if not pods:
                    all_ready = False
                    workload = workloads.get(group)
                    if workload is not None:
                        # A Workload with no Pods (the replaced replica's): it goes first, as in the operator.
                        self._delete_workload(workload)
                        continue
                    children += desired
                    continue
                if current:
                    children += desired
                    all_ready = all_ready and ready[ordinal]
                    continue
                all_ready = False
                others_ready = all(r for o, r in ready.items() if o != ordinal)
                turn_over = not ready[ordinal] or (others_ready and not turnover_taken)
                if turn_over:
                    turnover_taken = turnover_taken or ready[ordinal]
                    self._delete_workload(workloads.get(group))
                    continue  # its Pods are omitted: Metacontroller deletes them
                children += [_kept(p) for p in pods]
        reserved = [workloads.get(g) for g in groups]
        if all(w is not None and not w["metadata"].get("deletionTimestamp")
               and (_condition(w, "QuotaReserved") or _condition(w, "Admitted")) for w in reserved):
            for workload in reserved:
                self._admit(workload)  # type: ignore[arg-type]
        router_ready = all((d.get("status") or {}).get("readyReplicas", 0) >= (d.get("spec") or {}).get("replicas", 1)
                           for d in ((request.get("children") or {}).get("Deployment.apps/v1") or {}).values())
        phase = vocab.PHASE_READY if all_ready and router_ready else vocab.PHASE_STARTING
        return 200, {"children": children,
                     "status": {"phase": phase, "observedGeneration": meta.get("generation")}}


def asgi_app(baseline: Baseline) -> Any:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        started = time.perf_counter()
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        path = scope["path"]
        status, answer = 404, {"error": "not found"}
        hook = path.rsplit("/", 1)[-1]
        if path == "/healthz":
            status, answer = 200, {"ok": True}
        elif path == "/stats":
            status, answer = 200, {"calls": baseline.calls, "misses": baseline.misses,
                                   "api_errors": baseline.api_errors}
        elif path == "/hooks/customize":
            request = orjson.loads(body)
            render = baseline.render(request["parent"])
            status, answer = (200, render["customize"]) if render else (503, {"error": "no precomputed render"})
        elif path in ("/hooks/sync", "/hooks/finalize"):
            status, answer = baseline.sync(orjson.loads(body), finalizing=hook == "finalize")
        out = orjson.dumps(answer)
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(out)).encode())]})
        await send({"type": "http.response.body", "body": out})
        if hook in baseline.calls:
            baseline.calls[hook].append(time.perf_counter() - started)

    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--renders", type=Path, required=True)
    parser.add_argument("--kubeconfig", default=None)
    args = parser.parse_args()
    config = load_config(args.kubeconfig)
    baseline = Baseline(args.renders, Kube(config, timeout=10) if config is not None else None)
    uvicorn.run(asgi_app(baseline), host="127.0.0.1", port=args.port, log_level="warning", lifespan="on")


if __name__ == "__main__":
    main()
