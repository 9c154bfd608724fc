"""The validating half: every rule (docs/admission.md#the-rules) over one object (and its stored version), at once.

Pure: the cluster objects arrive as a `World` already read (live, by the caller). The same function
serves the webhook and `modeldeployment validate`.
"""

from __future__ import annotations

import copy
from typing import Any, Callable

from pydantic import ValidationError

from app import vocab
from app.admission import cmdline, frozen, kvcache, pods, resources, roles, routing
from app.admission.model import Notice, Refusal, Subject, Verdict
from app.api.objects import KubeObject
from app.api.strict import field_path
from app.api.v1 import ModelDeployment
from app.world import World

Rule = Callable[[Subject], list[Refusal]]

# Rule order is report order. Each entry is one rule of docs/admission.md#the-rules (or the part of
# one the object answers alone).
RULES: tuple[Rule, ...] = (
    roles.duplicate_names,
    roles.generated_names,  # 2
    frozen.frozen_fields,  # 3
    resources.accelerator_shape,  # 4 (object alone)
    resources.instance_types,  # 4 (InstanceType)
    resources.fabric_interface,  # 5
    resources.explicit_zero_on_shared_type,  # 6
    resources.sliced_pair,  # 7
    roles.service_labels,  # 8
    roles.service_collisions,  # 9
    roles.topology_level,  # 10
    roles.role_kinds,  # 11
    cmdline.owned_arguments,  # 12 (extraArgs)
    cmdline.owned_env,  # 12 (env)
    cmdline.kv_cache_dtype,  # 13
    cmdline.ports,  # 14
    cmdline.parallel_degrees,  # 15
    kvcache.cache_binding,  # 16
    roles.engine_version,  # 17
    routing.router_rules,  # 18
    routing.routed_ports,  # 19
    kvcache.ascend_transfer_protocol,  # the transport of an Ascend pool (docs/rendering.md#kv-cache-attachment)
    roles.volumes,  # subPath and volume sources
    roles.operator_owned_mounts,  # 20
    roles.total_pods,  # 21
    roles.pair_parks_together,  # 22
    cmdline.contract_arguments,  # 23
    cmdline.model_name_flag,  # 24
    pods.env_names,  # 25
    pods.exec_strings,  # 26
    pods.object_size,  # 27
)

NOTICES: tuple[Callable[[Subject], list[Notice]], ...] = (
    cmdline.api_key_notices,
    cmdline.inert_extra_args_notices,
    cmdline.idle_cards_notices,
    kvcache.cache_notices,
    kvcache.artifact_notices,
    roles.engine_version_notices,
)

SCHEMA_REMEDY = "send a value the schema accepts (kubectl explain modeldeployment.spec describes every field)"


def schema_refusals(exc: ValidationError) -> list[Refusal]:
    """Pydantic's errors as refusals, one per path (the API server's schema check normally comes first)."""
    by_path: dict[str, list[str]] = {}
    for error in exc.errors(include_url=False):
        path = field_path(tuple(error.get("loc", ())))
        message = str(error.get("msg", "invalid"))
        by_path.setdefault(path, [])
        if message not in by_path[path]:
            by_path[path].append(message)
    return [Refusal(path, "; ".join(messages), SCHEMA_REMEDY) for path, messages in by_path.items()]


def parse(raw: Any) -> tuple[ModelDeployment | None, list[Refusal]]:
    if not isinstance(raw, dict):
        return None, [Refusal("object", "is not a ModelDeployment object", "send a ModelDeployment")]
    try:
        return ModelDeployment.model_validate(raw), []
    except ValidationError as exc:
        return None, schema_refusals(exc)
    except (TypeError, ValueError) as exc:  # pragma: no cover - pydantic wraps these
        return None, [Refusal("object", f"cannot be read: {exc}", SCHEMA_REMEDY)]


def _target(document: Any, loc: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """The concrete path of the deepest key of `loc` present in `document` (union tags skipped);
    None when it is a list item or nothing (taking an item out would move every later index)."""
    node: Any = document
    path: list[Any] = []
    for part in loc:
        if isinstance(node, dict) and part in node:
            path.append(part)
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            path.append(part)
            node = node[part]
        else:
            break
    if not path or isinstance(path[-1], int):
        return None
    return tuple(path)


def _delete(document: Any, path: tuple[Any, ...]) -> None:
    node = document
    for part in path[:-1]:
        node = node[part]
    node.pop(path[-1], None)


def repair(raw: Any) -> tuple[KubeObject, ModelDeployment] | None:
    """The object without the values the schema refuses (their defaults apply), parsed; None when a
    required field is missing or a refused value cannot be taken out."""
    if not isinstance(raw, dict):
        return None
    fixed = copy.deepcopy(raw)
    for _attempt in range(3):
        try:
            return fixed, ModelDeployment.model_validate(fixed)
        except ValidationError as exc:
            errors = exc.errors(include_url=False)
            if any(e.get("type") == "missing" for e in errors):
                return None
            targets = {_target(fixed, tuple(e.get("loc", ()))) for e in errors}
            if None in targets:
                return None
            # None is ruled out just above; mypy does not narrow a set's element type.
            for path in sorted(targets, key=len, reverse=True):  # type: ignore[arg-type]
                _delete(fixed, path)  # type: ignore[arg-type]
        except (TypeError, ValueError):  # pragma: no cover - pydantic wraps these
            return None
    return None


def validate(raw: KubeObject, old_raw: KubeObject | None, world: World | None, *,
             kv_cache_dtype_owned: bool = True, max_pods: int = vocab.DEFAULT_MAX_PODS_PER_DEPLOYMENT) -> Verdict:
    """Every refusal and warning for `raw` (an update when `old_raw` is given).

    `world` is what was read from the cluster for this object; pass None for an object being
    deleted (the rules that read an InstanceType decline then — see app.admission.resources)."""
    verdict = Verdict()
    verdict.refusals += roles.too_many_roles(raw)
    md, errors = parse(raw)
    if md is None:
        if verdict.refusals:  # rule 1 already said it better than "List should have at most 10 items"
            errors = [e for e in errors if e.path != "spec.roles"]
        verdict.refusals += errors
        # A schema error must not hide the rule refusals: run the rules on what the schema accepts.
        repaired = repair(raw)
        if repaired is None:
            return verdict
        raw, md = repaired
    old: ModelDeployment | None = None
    if old_raw is not None:
        old, old_errors = parse(old_raw)
        if old is None:
            verdict.warnings.append(Notice("oldObject", "the stored object does not read as a ModelDeployment of "
                                           "this version, so frozen fields were not compared"))
    if md.metadata.deletion_timestamp and old is not None and isinstance(old_raw, dict) \
            and raw.get("spec") == old_raw.get("spec"):
        # The update of an object being deleted that leaves its spec as stored (the one that clears
        # the finalizer, or a label edit): nothing new is admitted, and a rule added since the
        # object was stored must not wedge its teardown.
        return verdict
    subject = Subject(md=md, raw=raw, old=old, old_raw=old_raw if old is not None else None,
                      world=None if md.metadata.deletion_timestamp else world,
                      kv_cache_dtype_owned=kv_cache_dtype_owned, max_pods=max_pods)
    for rule in RULES:
        verdict.refusals += rule(subject)
    for notice in NOTICES:
        verdict.warnings += notice(subject)
    return verdict
