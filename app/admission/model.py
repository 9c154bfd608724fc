"""What an admission decision is made of: refusals, warnings, and the subject under review.

A refusal is data (a field path, what is wrong, the way out), never a bare string, and every
refusal of one request is returned together (docs/admission.md#the-admissionreview-contract).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app import vocab
from app.api.objects import KubeObject
from app.api.v1 import ModelDeployment, Role
from app.world import World


@dataclass(frozen=True)
class Refusal:
    """`<path>: <problem> — <remedy>`; the path is indexed (`spec.roles[0].resources.accelerator`)."""

    path: str
    problem: str
    remedy: str

    def __str__(self) -> str:
        return f"{self.path}: {self.problem} — {self.remedy}"


@dataclass(frozen=True)
class Notice:
    """Accepted, but worth telling the user (AdmissionReview `warnings`)."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


@dataclass
class Verdict:
    refusals: list[Refusal] = field(default_factory=list)
    warnings: list[Notice] = field(default_factory=list)

    @property
    def allowed(self) -> bool:
        return not self.refusals


@dataclass(frozen=True)
class Subject:
    """One ModelDeployment under review, with its stored version and the cluster objects read for it.

    `world` is None when the rules that read cluster objects are not to run (the object is being
    deleted). `raw`/`old_raw` are the objects as sent, for what the models cannot show (a field the
    update did not send at all).
    """

    md: ModelDeployment
    raw: KubeObject
    old: ModelDeployment | None = None
    old_raw: KubeObject | None = None
    world: World | None = None
    kv_cache_dtype_owned: bool = True
    # Rule 21: MODELDEPLOYMENT_MAX_PODS_PER_DEPLOYMENT.
    max_pods: int = vocab.DEFAULT_MAX_PODS_PER_DEPLOYMENT

    @property
    def deleting(self) -> bool:
        return bool(self.md.metadata.deletion_timestamp)

    @property
    def engine(self) -> str:
        return self.md.spec.engine.name

    def old_role(self, name: str) -> Role | None:
        return self.old.role(name) if self.old is not None else None


def role_path(index: int, *rest: str) -> str:
    return ".".join([f"spec.roles[{index}]", *rest])


def items(path: str, index: int) -> str:
    return f"{path}[{index}]"
