"""Offline `modeldeployment validate` answers what the cluster answers (docs/admission.md#offline).

The API server checks apiVersion, kind and (kubectl's strict field validation) unknown fields
before any webhook; the offline command does the same, names near misses, and reports schema
errors together with the rule refusals. tests/e2e/test_validate_parity.py runs the cluster half
of the comparison; this file is the offline half.
"""

from __future__ import annotations

import copy
import io
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.admission import fields
from app.admission.offline import offline_verdict, validate_offline
from app.admission.validate import validate
from tests.unit.test_admission_rules import ACCEPTED, CASES, WORLD, run, server

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def verdict(obj: dict[str, Any], old: dict[str, Any] | None = None):
    return offline_verdict(copy.deepcopy(obj), copy.deepcopy(old) if old else None, WORLD, kv_cache_dtype_owned=True)


# --- strict fields: one row per kind of near miss -------------------------------------------------

STRICT: list[tuple[str, Any, str, str | None]] = [
    # (id, edit of server(), refused path, the near miss named)
    ("plural", lambda o: o["spec"]["roles"][0].update(replica=4), "spec.roles[0].replica", "replicas"),
    ("case", lambda o: o["spec"]["roles"][0].update(instancetype=o["spec"]["roles"][0].pop("instanceType")),
     "spec.roles[0].instancetype", "instanceType"),
    ("nested", lambda o: o["spec"]["roles"][0]["resources"].update(acclerator=1),
     "spec.roles[0].resources.acclerator", "accelerator"),
    ("spec-level", lambda o: o["spec"].update(kvcache={"poolRef": {"name": "x"}}), "spec.kvcache", "kvCache"),
    ("metadata", lambda o: o["metadata"].update(lables={"a": "b"}), "metadata.lables", "labels"),
    ("no-near-miss", lambda o: o["spec"]["roles"][0].update(gpuMemoryUtilization=0.9),
     "spec.roles[0].gpuMemoryUtilization", None),
    ("list-item", lambda o: o["spec"]["roles"][0].update(env=[{"name": "A", "valu": "1"}]),
     "spec.roles[0].env[0].valu", "value"),
]


@pytest.mark.parametrize("edit,path,guess", [(e, p, g) for _, e, p, g in STRICT], ids=[i for i, *_ in STRICT])
def test_unknown_fields_are_refused_with_the_near_miss(edit, path, guess) -> None:
    obj = server()
    edit(obj)
    refusals = fields.unknown_fields(obj)
    assert [r.path for r in refusals] == [path]
    if guess:
        assert f"did you mean {guess!r}" in refusals[0].problem and guess in refusals[0].remedy
    else:
        assert "did you mean" not in refusals[0].problem
    result = verdict(obj)
    assert not result.allowed and result.message.startswith(f"{path}: unknown field")


def test_a_near_miss_of_a_required_field_still_runs_the_rules() -> None:
    # Before: only "instanceType: Field required". Now: the typo, and the rule refusals of what was meant.
    obj = server(extraArgs=["--kv_transfer_config", "{}"])
    obj["spec"]["roles"][0]["instancetype"] = obj["spec"]["roles"][0].pop("instanceType")
    result = verdict(obj)
    assert "spec.roles[0].instancetype: unknown field 'instancetype' (did you mean 'instanceType'?)" in result.message
    assert "spec.roles[0].extraArgs[0]: --kv_transfer_config" in result.message
    assert "Field required" not in result.message


@pytest.mark.parametrize("api_version,kind,path", [
    ("gpustack.ai/v1", "ModelDeployment", "apiVersion"),
    ("worker.gpustack.ai/v1beta1", "ModelDeployment", "apiVersion"),
    ("worker.gpustack.ai/v1", "ModelDeploymnet", "kind"),
    ("worker.gpustack.ai/v1", "modeldeployment", "kind"),
])
def test_api_version_and_kind_are_checked(api_version: str, kind: str, path: str, tmp_path: Path) -> None:
    obj = server()
    obj.update(apiVersion=api_version, kind=kind)
    file = tmp_path / "md.yaml"
    file.write_text(yaml.safe_dump(obj))
    out = io.StringIO()
    code = validate_offline(file, EXAMPLES / "world", None, kv_cache_dtype_owned=True, out=out, err=io.StringIO())
    assert code == 1, out.getvalue()
    assert f"\n{path}: " in out.getvalue()
    assert f"set {path}: " in out.getvalue()


def test_schema_errors_and_rule_refusals_are_reported_together() -> None:
    obj = server(replicas=-1, imagePullPolicy="Sometimes", extraArgs=["--kv-events-config", "{}"])
    paths = {r.path for r in validate(obj, None, WORLD).refusals}
    assert {"spec.roles[0].replicas", "spec.roles[0].imagePullPolicy", "spec.roles[0].extraArgs[0]"} <= paths


def test_a_missing_required_field_reports_the_schema_alone() -> None:
    obj = server()
    del obj["spec"]["roles"][0]["instanceType"]
    refusals = validate(obj, None, WORLD).refusals
    assert [r.path for r in refusals] == ["spec.roles[0].instanceType"]


# --- parity, offline half: every example and every table case ------------------------------------


@pytest.mark.parametrize("path", sorted((EXAMPLES / "deployments").glob("*.yaml"))
                         + sorted((EXAMPLES / "scale-to-zero").glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_validates_clean(path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    assert validate_offline(path, EXAMPLES / "world", None, kv_cache_dtype_owned=True, out=out, err=err) == 0, \
        out.getvalue()
    assert "idle" not in err.getvalue(), err.getvalue()  # every example's engine width fills its cards


OWNED_CASES = [c for c in CASES if c.owned]


@pytest.mark.parametrize("case", OWNED_CASES, ids=[c.id for c in OWNED_CASES])
def test_offline_refuses_every_refusal_case_at_its_path(case) -> None:
    result = verdict(case.obj, case.old)
    assert not result.allowed
    assert f"{case.path}: " in result.message


@pytest.mark.parametrize("obj,old", [(o, old) for _, o, old in ACCEPTED], ids=[i for i, _, _ in ACCEPTED])
def test_offline_allows_every_accepted_case(obj, old) -> None:
    assert run(obj, old).allowed
    result = verdict(obj, old)
    assert result.allowed, result.message
