"""The runner image formula: gpustack/runner:<backend><runtime>[-<variant>]-<engine><version>.

A stated image always wins. Each synthesis failure says whether it will ever resolve.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.api.cluster import InstanceType
from app.api.v1 import ModelDeployment, Role
from app.render.errors import RenderError

RUNNER_REPOSITORY = "gpustack/runner"

BACKEND_BY_MANUFACTURER = {
    "nvidia": "cuda",
    "ascend": "cann",
    "amd": "rocm",
    "metax": "maca",
    "mthreads": "musa",
    "iluvatar": "corex",
    "hygon": "dtk",
    "thead": "hggc",
}
# Ascend only; 910 and 310B publish no runner tag.
ASCEND_VARIANT_BY_FAMILY = {"310P": "310p", "910B": "910b", "910C": "a3", "950": "950"}


@dataclass(frozen=True)
class ImageChoice:
    image: str
    # Runtime versions the pool reports beyond the one taken (RuntimeVersionSkew when non-empty).
    skipped_runtime_versions: tuple[str, ...] = ()
    runtime_version: str | None = None


def _version_key(version: str) -> tuple[int, ...]:
    """Numeric major.minor comparison ("12.10" > "12.9")."""
    parts = []
    for part in version.split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def lowest_runtime(instance_type: InstanceType) -> tuple[str | None, tuple[str, ...]]:
    """The lowest runtime version the pool reports, and the others it skipped."""
    detail = instance_type.status.detail
    versions = sorted(set(detail.runtime_versions) | ({detail.runtime_version} if detail.runtime_version else set()),
                      key=_version_key)
    if not versions:
        return None, ()
    return versions[0], tuple(versions[1:])


def role_image(md: ModelDeployment, role: Role, instance_type: InstanceType | None) -> ImageChoice:
    """The engine image of a role, or a RenderError naming the field to fix."""
    if role.image:
        return ImageChoice(image=role.image)
    where = f"roles[{role.name}]"
    version = md.spec.engine.version
    if not version:
        raise RenderError(
            f"{where}: spec.engine.version is empty and the role names no image; set spec.engine.version "
            f"or roles[].image (this never resolves on its own)",
            retryable=False,
        )
    if instance_type is None:
        raise RenderError(
            f"{where}: InstanceType {role.instance_type!r} does not exist yet, so its hardware is unknown; "
            f"the image resolves once it is created (or name an image in roles[].image)",
            retryable=True,
        )
    detail = instance_type.status.detail
    if not instance_type.observed:
        raise RenderError(
            f"{where}: InstanceType {role.instance_type!r} has not observed its hardware yet; the image "
            f"resolves on a later reconcile once status.detail is published",
            retryable=True,
        )
    manufacturer = (detail.manufacturer or "").lower()
    backend = BACKEND_BY_MANUFACTURER.get(manufacturer)
    if backend is None:
        raise RenderError(
            f"{where}: manufacturer {detail.manufacturer!r} of InstanceType {role.instance_type!r} has no runner "
            f"backend, so no image can be synthesized; this will never resolve: name an image in roles[].image",
            retryable=False,
        )
    variant = ""
    if backend == "cann":
        family = detail.family or ""
        if family not in ASCEND_VARIANT_BY_FAMILY:
            raise RenderError(
                f"{where}: Ascend family {family!r} of InstanceType {role.instance_type!r} publishes no runner "
                f"variant (only {', '.join(ASCEND_VARIANT_BY_FAMILY)}); this will never resolve: name an image "
                f"in roles[].image",
                retryable=False,
            )
        variant = f"-{ASCEND_VARIANT_BY_FAMILY[family]}"
    runtime, skipped = lowest_runtime(instance_type)
    if runtime is None:
        raise RenderError(
            f"{where}: InstanceType {role.instance_type!r} reports no runtime version yet; the image resolves "
            f"on a later reconcile",
            retryable=True,
        )
    engine = md.spec.engine.name.lower()
    tag = f"{backend}{runtime}{variant}-{engine}{version}".lower()
    return ImageChoice(image=f"{RUNNER_REPOSITORY}:{tag}", skipped_runtime_versions=skipped, runtime_version=runtime)
