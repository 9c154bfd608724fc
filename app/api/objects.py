"""The names of the untyped JSON that crosses layers: Kubernetes objects as the API server and
Metacontroller send them, and the children and status the hooks answer with.

They are plain JSON on purpose (the hooks return exactly what they read, unknown fields included;
pydantic models are for the parts a decision reads: app.api.v1, app.api.cluster), so their values
are `Any`; these aliases say what a `dict[str, Any]` is wherever one crosses a layer.
"""

from __future__ import annotations

from typing import Any, TypeAlias

KubeObject: TypeAlias = dict[str, Any]
"""One Kubernetes object as JSON (apiVersion, kind, metadata, spec, status...), or a part of one."""

ObjectsByName: TypeAlias = dict[str, KubeObject]
"""One group of Metacontroller's `children`/`related`: {"namespace/name" or "name": object}."""

ObservedGroups: TypeAlias = dict[str, ObjectsByName | None]
"""Metacontroller's `children` or `related`: {"Kind.group/version": ObjectsByName or null}."""
