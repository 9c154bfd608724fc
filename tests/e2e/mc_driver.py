"""A test driver of Metacontroller's CompositeController contract, for the end-to-end suite.

The Go module proxy reachable here refuses every version of github.com/metacontroller/metacontroller
(403 "This module version is not available"; see tests/e2e/README.md), so the real binary cannot
be built. This driver plays its documented part (SPEC §12, NOTES "Metacontroller") against the
real API server, so that everything else in the loop — our hooks over HTTP, the API server, the
webhooks, Kueue, the scheduler, kwok — is real:

- it reads the CompositeController object we ship (manifests/metacontroller, applied through the
  e2e overlay) for the hook URLs and the child resources with their update strategies;
- per parent: customize (cached per uid+generation), related objects selected by the rules'
  `names` / `labelSelector.matchLabels` / `namespace`, children selected by `controller-uid`;
- hook protocol v2: children and related keyed `Kind.apiVersion` then `namespace/name` (cluster
  objects: `name`), `finalizing` on finalize;
- a non-200 answer changes nothing (children and status stay; retried on the next pass);
- status replaced wholesale through the status subresource, with `observedGeneration`;
- children: created with `controller-uid` and a controller ownerReference; `OnDelete` children are
  never updated; `InPlace` children are applied (server-side apply with the driver's own field
  manager, which, like Metacontroller's last-applied 3-way merge, removes what we stop sending);
  observed children missing from the answer are deleted;
- the finalizer `metacontroller.io/compositecontroller-<name>` is added while the parent lives and
  removed when finalize answers `finalized: true`.

It is level-triggered (a pass every `interval` seconds over every parent) rather than watch-based:
slower to react than Metacontroller, equal in what it converges to.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import httpx

log = logging.getLogger("mc-driver")

COMPOSITE_CONTROLLER_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    # *.k8s.io groups need this annotation; "unapproved, ..." is the accepted value for a stand-in.
    "metadata": {"name": "compositecontrollers.metacontroller.k8s.io",
                 "annotations": {"api-approved.kubernetes.io": "unapproved, test-only stand-in for Metacontroller"}},
    "spec": {
        "group": "metacontroller.k8s.io",
        "names": {"kind": "CompositeController", "plural": "compositecontrollers", "singular": "compositecontroller",
                  "shortNames": ["cc", "cctl"]},
        "scope": "Cluster",
        "versions": [{"name": "v1alpha1", "served": True, "storage": True, "subresources": {"status": {}},
                      "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}],
    },
}
FIELD_MANAGER = "metacontroller-test-driver"


class _Throttled(Exception):
    """429 from the API server (priority and fairness): Metacontroller would back off too."""


def _path(api_version: str, resource: str, namespace: str | None = None, name: str | None = None,
          sub: str | None = None) -> str:
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    parts = [base]
    if namespace:
        parts.append(f"namespaces/{namespace}")
    parts.append(resource)
    if name:
        parts.append(name)
    if sub:
        parts.append(sub)
    return "/".join(parts)


class CompositeDriver:
    def __init__(self, client: httpx.Client, controller_name: str, *, interval: float = 1.0,
                 log_file: Path | None = None) -> None:
        self.client = client
        self.name = controller_name
        self.interval = interval
        self.finalizer = f"metacontroller.io/compositecontroller-{controller_name}"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._customize_cache: dict[tuple[str, int], list[dict[str, Any]]] = {}
        self.passes = 0
        self.errors = 0
        if log_file is not None:
            handler = logging.FileHandler(log_file)
            handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
            log.addHandler(handler)
            log.setLevel(logging.INFO)

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="mc-driver", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.reconcile_all()
            except _Throttled as exc:
                log.info("API server throttled %s; next pass", exc)
            except Exception:  # noqa: BLE001 - keep driving; the log says what broke
                self.errors += 1
                log.exception("pass failed")
            self.passes += 1
            self._stop.wait(self.interval)

    # --- API helpers -------------------------------------------------------------------------

    def _get(self, path: str, **params: Any) -> dict[str, Any] | None:
        response = self.client.get(path, params=params or None)
        if response.status_code == 404:
            return None
        if response.status_code == 429:
            raise _Throttled(path)
        response.raise_for_status()
        return response.json()

    def _list(self, api_version: str, resource: str, namespace: str | None, selector: str | None = None
              ) -> tuple[str, list[dict[str, Any]]]:
        body = self._get(_path(api_version, resource, namespace), **({"labelSelector": selector} if selector else {}))
        if body is None:
            return "", []
        kind = body.get("kind", "").removesuffix("List")
        items = body.get("items") or []
        for item in items:
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
        return kind, items

    def controller(self) -> dict[str, Any] | None:
        return self._get(_path("metacontroller.k8s.io/v1alpha1", "compositecontrollers", None, self.name))

    # --- one pass ----------------------------------------------------------------------------

    def reconcile_all(self) -> None:
        cc = self.controller()
        if cc is None:
            return
        spec = cc["spec"]
        parent_res = spec["parentResource"]
        _, parents = self._list(parent_res["apiVersion"], parent_res["resource"], None)
        for parent in parents:
            self.reconcile(cc, parent)

    def _hook(self, spec: dict[str, Any], hook: str, body: dict[str, Any]) -> dict[str, Any] | None:
        webhook = (spec.get("hooks") or {}).get(hook, {}).get("webhook") or {}
        url = webhook.get("url")
        if not url:
            return None
        response = self.client.post(url, json=body, timeout=10.0)
        if response.status_code != 200:
            log.warning("%s hook answered %s: %s", hook, response.status_code, response.text[:300])
            return None
        return response.json()

    def _related(self, spec: dict[str, Any], parent: dict[str, Any]) -> dict[str, dict[str, Any]]:
        meta = parent["metadata"]
        key = (meta["uid"], meta.get("generation", 0))
        if key not in self._customize_cache:
            answer = self._hook(spec, "customize", {"controller": {"metadata": {"name": self.name}}, "parent": parent})
            self._customize_cache[key] = (answer or {}).get("relatedResources") or []
        related: dict[str, dict[str, Any]] = {}
        for rule in self._customize_cache[key]:
            namespace = rule.get("namespace")
            match = ((rule.get("labelSelector") or {}).get("matchLabels")) or {}
            selector = ",".join(f"{k}={v}" for k, v in match.items()) or None
            kind, items = self._list(rule["apiVersion"], rule["resource"], namespace, selector)
            wanted = set(rule.get("names") or [])
            bucket = related.setdefault(f"{kind}.{rule['apiVersion']}", {})
            for item in items:
                name = item["metadata"]["name"]
                if wanted and name not in wanted:
                    continue
                ns = item["metadata"].get("namespace")
                bucket[f"{ns}/{name}" if ns else name] = item
        return related

    def _children(self, spec: dict[str, Any], parent: dict[str, Any]) -> dict[str, dict[str, Any]]:
        meta = parent["metadata"]
        children: dict[str, dict[str, Any]] = {}
        for child in spec.get("childResources") or []:
            kind, items = self._list(child["apiVersion"], child["resource"], meta["namespace"],
                                     f"controller-uid={meta['uid']}")
            bucket = children.setdefault(f"{kind or _kind_guess(child['resource'])}.{child['apiVersion']}", {})
            for item in items:
                bucket[f"{item['metadata']['namespace']}/{item['metadata']['name']}"] = item
        return children

    def reconcile(self, cc: dict[str, Any], parent: dict[str, Any]) -> None:
        spec = cc["spec"]
        meta = parent["metadata"]
        parent_api = spec["parentResource"]["apiVersion"]
        parent_resource = spec["parentResource"]["resource"]
        deleting = bool(meta.get("deletionTimestamp"))
        if not deleting and self.finalizer not in (meta.get("finalizers") or []):
            self._patch_finalizers(parent_api, parent_resource, parent, [*(meta.get("finalizers") or []), self.finalizer])
            return
        if deleting and self.finalizer not in (meta.get("finalizers") or []):
            return
        children = self._children(spec, parent)
        request = {"controller": cc, "parent": parent, "children": children,
                   "related": self._related(spec, parent), "finalizing": deleting}
        answer = self._hook(spec, "finalize" if deleting else "sync", request)
        if answer is None:
            return
        if "status" in answer and answer["status"] is not None:
            self._write_status(parent_api, parent_resource, parent, answer["status"])
        self._apply_children(spec, parent, children, answer.get("children") or [])
        if deleting and answer.get("finalized"):
            self._patch_finalizers(parent_api, parent_resource, parent,
                                   [f for f in meta.get("finalizers") or [] if f != self.finalizer])

    def _patch_finalizers(self, api: str, resource: str, parent: dict[str, Any], finalizers: list[str]) -> None:
        meta = parent["metadata"]
        body = {"metadata": {"finalizers": finalizers, "resourceVersion": meta["resourceVersion"]}}
        response = self.client.patch(_path(api, resource, meta["namespace"], meta["name"]), json=body,
                                     headers={"Content-Type": "application/merge-patch+json"})
        if response.status_code not in (200, 404, 409):
            log.warning("finalizer patch answered %s: %s", response.status_code, response.text[:300])

    def _write_status(self, api: str, resource: str, parent: dict[str, Any], status: dict[str, Any]) -> None:
        meta = parent["metadata"]
        status = {**status, "observedGeneration": meta.get("generation")}
        if parent.get("status") == status:
            return
        body = {**parent, "status": status}
        response = self.client.put(_path(api, resource, meta["namespace"], meta["name"], "status"), json=body)
        if response.status_code not in (200, 404, 409):
            log.warning("status write answered %s: %s", response.status_code, response.text[:300])

    def _apply_children(self, spec: dict[str, Any], parent: dict[str, Any], observed: dict[str, dict[str, Any]],
                        desired: list[dict[str, Any]]) -> None:
        meta = parent["metadata"]
        strategies = {(c["apiVersion"], c["resource"]): (c.get("updateStrategy") or {}).get("method", "OnDelete")
                      for c in spec.get("childResources") or []}
        by_kind_resource = {(c["apiVersion"], _kind_guess(c["resource"])): c["resource"]
                            for c in spec.get("childResources") or []}
        wanted: set[str] = set()
        owner = {"apiVersion": spec["parentResource"]["apiVersion"], "kind": parent["kind"], "name": meta["name"],
                 "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}
        for child in desired:
            api = child["apiVersion"]
            resource = by_kind_resource[(api, child["kind"])]
            key = f"{child['kind']}.{api}"
            name = child["metadata"]["name"]
            wanted.add(f"{key}/{meta['namespace']}/{name}")
            body = {**child, "metadata": {**child["metadata"], "namespace": meta["namespace"],
                                          "labels": {**(child["metadata"].get("labels") or {}),
                                                     "controller-uid": meta["uid"]},
                                          "ownerReferences": [owner]}}
            existing = (observed.get(key) or {}).get(f"{meta['namespace']}/{name}")
            if existing is None:
                response = self.client.post(_path(api, resource, meta["namespace"]), json=body)
                if response.status_code not in (201, 409):
                    log.warning("create %s %s answered %s: %s", child["kind"], name, response.status_code,
                                response.text[:500])
                continue
            if existing["metadata"].get("deletionTimestamp"):
                continue
            if strategies.get((api, resource)) == "InPlace":
                response = self.client.patch(
                    _path(api, resource, meta["namespace"], name), json=body,
                    params={"fieldManager": FIELD_MANAGER, "force": "true"},
                    headers={"Content-Type": "application/apply-patch+yaml"})
                if response.status_code != 200:
                    log.warning("apply %s %s answered %s: %s", child["kind"], name, response.status_code,
                                response.text[:500])
        for key, objects in observed.items():
            kind, api = key.split(".", 1)
            resource = by_kind_resource[(api, kind)]
            for ns_name, obj in objects.items():
                if f"{key}/{ns_name}" in wanted or obj["metadata"].get("deletionTimestamp"):
                    continue
                namespace, name = ns_name.split("/", 1)
                response = self.client.delete(_path(api, resource, namespace, name))
                if response.status_code not in (200, 202, 404):
                    log.warning("delete %s %s answered %s", kind, name, response.status_code)


def _kind_guess(resource: str) -> str:
    """Kind of a plural resource name, for the child resources this project uses."""
    return {"pods": "Pod", "services": "Service", "configmaps": "ConfigMap", "serviceaccounts": "ServiceAccount",
            "roles": "Role", "rolebindings": "RoleBinding", "deployments": "Deployment"}.get(resource, resource)
