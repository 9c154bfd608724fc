"""Offline `modeldeployment validate` answers what the API server plus our webhooks answer.

For every example and every case of the admission tables (tests/unit/test_admission_rules.py:
refused and accepted, creates and updates) and the strict-field cases of
tests/unit/test_validate_offline.py, the same object is judged twice:

- offline, by `app.admission.offline.offline_verdict` against the same world;
- on the cluster, by `kubectl create --dry-run=server` (a create) or, for an update, by creating
  the stored object and `kubectl replace --dry-run=server` of the new one (kubectl's default
  strict field validation, the CRD schema with its CEL rules, the mutating and validating webhooks).

Both must allow or both refuse. When the webhook refused, its message is the offline message,
line for line; when the API server refused first (schema, CEL, strict decoding), it names the
refused field (or its parent) the offline verdict names too.

Cases that cannot reach the API server as written are left out, with the reason: an object that
carries its own deletionTimestamp (the API server sets that field, never a client), an update
whose stored object today's rules refuse (such an object can only predate the rule: the exemptions
of rules 2 and 8), and cases run with the dtype setting off (the operator runs with its default).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

import cluster as e2e_cluster
from md_operator import NAMESPACE, REPO, Operator, start_operator

from app import vocab
from app.admission.offline import offline_verdict
from app.world import World, load_yaml_objects
from tests.unit.test_admission_rules import ACCEPTED, CASES, WORLD, _extra_world, server
from tests.unit.test_cli import BROKEN, BROKEN_FILES
from tests.unit.test_validate_offline import STRICT

EXAMPLES = REPO / "examples" / "deployments"


# The world both sides judge against: the examples' and what the cluster accepted of the table's.
CLUSTER_WORLD: list[World] = []


@pytest.fixture(scope="module")
def op(control_plane: e2e_cluster.ControlPlane) -> Iterator[Operator]:
    operator = start_operator(control_plane)
    accepted = _apply_extra_world(operator)
    CLUSTER_WORLD[:] = [World.of([*load_yaml_objects(REPO / "examples" / "world"), *accepted])]
    yield operator
    operator.stop()


def _apply_extra_world(op: Operator) -> list[dict[str, Any]]:
    """The table's world beyond the examples (a second A10G type, an unobserved one, cache backends).

    Objects the CRD schema refuses (the table's malformed type and backend) cannot exist on a
    cluster; they are left out of the offline world too, so both sides judge the same world."""
    accepted = []
    for original in _extra_world():
        obj = copy.deepcopy(original)
        status = obj.pop("status", None)
        created = op.kubectl("apply", "-f", "-", input=json.dumps(obj), check=False)
        if created.returncode != 0:
            continue
        accepted.append(original)
        if not status:
            continue
        kind = obj["kind"].lower() + "s"
        ns = ["-n", obj["metadata"]["namespace"]] if obj["metadata"].get("namespace") else []
        op.kubectl("patch", f"{kind}.worker.gpustack.ai", obj["metadata"]["name"], *ns, "--subresource=status",
                   "--type=merge", "-p", json.dumps({"status": status}))
    return accepted


def _world() -> World:
    return CLUSTER_WORLD[0] if CLUSTER_WORLD else WORLD


def _deleting(obj: dict[str, Any]) -> bool:
    return bool(obj.get("metadata", {}).get("deletionTimestamp"))


def _delete_and_wait(op: Operator, name: str) -> None:
    op.kubectl("delete", "md", name, "-n", NAMESPACE, "--wait=false", check=False)
    op.wait(f"md {name} to be gone",
            lambda: op.kubectl("get", "md", name, "-n", NAMESPACE, check=False).returncode != 0, 120)


def cluster_answer(op: Operator, obj: dict[str, Any], old: dict[str, Any] | None) -> tuple[bool, str]:
    """(allowed, kubectl's stderr) for a create, or an update of `old` to `obj`."""
    if old is None:
        result = op.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(obj),
                            check=False)
        return result.returncode == 0, result.stderr
    name = old["metadata"]["name"]
    op.kubectl("create", "-f", "-", input=json.dumps(old))
    try:
        for _attempt in range(10):
            # Metacontroller writes the stored object (finalizer, status): retry on its resourceVersion.
            stored = op.md(name)
            new = copy.deepcopy(obj)
            new["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"]
            new["metadata"]["finalizers"] = stored["metadata"].get("finalizers", [])
            result = op.kubectl("replace", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(new),
                                check=False)
            if "the object has been modified" not in result.stderr:
                return result.returncode == 0, result.stderr
        raise AssertionError(f"replace kept conflicting: {result.stderr}")
    finally:
        _delete_and_wait(op, name)


def _parents(path: str) -> list[str]:
    """spec.roles[1].name -> [spec.roles[1].name, spec.roles[1], spec.roles, spec]."""
    out = [path]
    while True:
        cut = max(path.rfind("."), path.rfind("["))
        if cut <= 0:
            return out
        path = path[:cut]
        out.append(path)


def assert_same(op: Operator, obj: dict[str, Any], old: dict[str, Any] | None, path: str | None) -> None:
    offline = offline_verdict(copy.deepcopy(obj), copy.deepcopy(old) if old else None, _world(),
                              kv_cache_dtype_owned=True)
    allowed, stderr = cluster_answer(op, obj, old)
    assert allowed == offline.allowed, f"cluster allowed={allowed}, offline allowed={offline.allowed}\n" \
                                       f"cluster: {stderr}\noffline: {offline.message}"
    if allowed:
        return
    if 'admission webhook "' in stderr:
        for line in offline.message.splitlines():
            if not line.endswith("problems:"):
                assert line in stderr, f"offline line not in the webhook's answer:\n{line}\n---\n{stderr}"
    elif path is not None:
        assert any(p in stderr for p in _parents(path)), f"{path} not named by the API server:\n{stderr}"
        assert path in offline.message, offline.message


def _reachable(obj: dict[str, Any], old: dict[str, Any] | None) -> bool:
    """Whether the case can be played through the API server: no client-set deletionTimestamp, and a
    stored object today's rules admit (one they refuse can only predate the rule that refuses it)."""
    if _deleting(obj) or (old is not None and _deleting(old)):
        return False
    if old is None:
        return True
    return offline_verdict(copy.deepcopy(old), None, WORLD, kv_cache_dtype_owned=True).allowed


REFUSED = [c for c in CASES if c.owned and _reachable(c.obj, c.old)]
ALLOWED = [(i, o, old) for i, o, old in ACCEPTED if _reachable(o, old)]


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example(op: Operator, path: Path) -> None:
    for obj in (o for o in yaml.safe_load_all(path.read_text()) if o):
        assert_same(op, obj, None, None)


@pytest.mark.parametrize("case", REFUSED, ids=[c.id for c in REFUSED])
def test_every_refusal_case(op: Operator, case) -> None:
    assert_same(op, case.obj, case.old, case.path)


@pytest.mark.parametrize("obj,old", [(o, old) for _, o, old in ALLOWED], ids=[i for i, _, _ in ALLOWED])
def test_every_accepted_case(op: Operator, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
    assert_same(op, obj, old, None)


@pytest.mark.parametrize("edit,path", [(e, p) for _, e, p, _ in STRICT], ids=[i for i, *_ in STRICT])
def test_unknown_fields(op: Operator, edit, path: str) -> None:
    obj = server()
    edit(obj)
    assert_same(op, obj, None, path)


# The broken files of tests/unit/test_cli.py that reach the API server (YAML that parses, a
# ModelDeployment of our apiVersion and kind; those two are test_api_version_and_kind's).
BROKEN_REFUSED = [b for b in BROKEN_FILES if b.code == 1 and b.file not in ("kind-typo", "api-version-old")]


@pytest.mark.parametrize("case", BROKEN_REFUSED, ids=[b.file for b in BROKEN_REFUSED])
def test_every_broken_file(op: Operator, case) -> None:
    """Offline and the cluster agree on types and values as well as fields: `replicas: "2"`,
    `version: 0.33`, `vllm`, `Qwen_Chat` are refused by both, at the field offline names."""
    obj = yaml.safe_load((BROKEN / f"{case.file}.yaml").read_text())
    assert_same(op, obj, None, case.field)


@pytest.mark.parametrize("api_version,kind", [("gpustack.ai/v1", "ModelDeployment"),
                                              ("worker.gpustack.ai/v1", "ModelDeploymnet")])
def test_api_version_and_kind(op: Operator, api_version: str, kind: str) -> None:
    obj = server()
    obj.update(apiVersion=api_version, kind=kind)
    offline = offline_verdict(copy.deepcopy(obj), None, _world(), kv_cache_dtype_owned=True)
    allowed, stderr = cluster_answer(op, obj, None)
    assert not allowed and not offline.allowed, (stderr, offline.message)
    assert (api_version if kind == "ModelDeployment" else kind) in stderr


# --- what the cluster runs for a routed pair ------------------------------------------------------


ROLE_KIND_LABEL = vocab.LABEL_ROLE_KIND


def _transfer_config(pod: dict[str, Any]) -> dict[str, Any]:
    engine = next(c for c in pod["spec"]["containers"] if c["name"] == "engine")
    argv = engine["command"]
    return json.loads(argv[argv.index("--kv-transfer-config") + 1])


def test_a_routed_pair_runs_the_protocol_the_roles_and_the_probes_it_declares(op: Operator) -> None:
    obj = yaml.safe_load((EXAMPLES / "pd-pair.yaml").read_text())
    obj["metadata"]["name"] = "pd-parity"
    obj["spec"]["kvTransfer"] = {"protocol": "TCP"}
    for role in obj["spec"]["roles"]:
        role["replicas"] = 1
    op.kubectl("apply", "-f", "-", input=json.dumps(obj))
    try:
        def both() -> dict[str, dict[str, Any]] | None:
            # The deployment's Pods include the router's, which carry no role kind.
            by_kind = {p["metadata"]["labels"].get(ROLE_KIND_LABEL): p for p in op.pods("pd-parity")}
            return by_kind if {"prefill", "decode"} <= set(by_kind) else None

        pods = op.wait("the pair's Pods", both, 120)
        prefill, decode = _transfer_config(pods["prefill"]), _transfer_config(pods["decode"])
        leg = {"mooncake_protocol": "tcp"}
        assert prefill["kv_role"] == "kv_producer" and decode["kv_role"] == "kv_consumer"
        assert [(c["kv_connector"], c["kv_role"], c.get("kv_connector_extra_config"))
                for c in prefill["kv_connector_extra_config"]["connectors"]] == [
            ("MooncakeConnector", "kv_producer", leg), ("MooncakeStoreConnector", "kv_both", None)]
        assert [(c["kv_connector"], c["kv_role"], c.get("kv_connector_extra_config"))
                for c in decode["kv_connector_extra_config"]["connectors"]] == [
            ("MooncakeConnector", "kv_consumer", leg), ("MooncakeStoreConnector", "kv_consumer", None)]
        engine = next(c for c in pods["decode"]["spec"]["containers"] if c["name"] == "engine")
        proxy = pods["decode"]["spec"]["initContainers"][0]
        external = proxy["ports"][0]["containerPort"]
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert engine[probe]["httpGet"]["port"] == external, (probe, engine[probe])
    finally:
        _delete_and_wait(op, "pd-parity")


# --- input judged as the cluster judges it: metadata, scaler files, YAML (docs/admission.md#offline) ---
#
# Generated, not listed: random label keys and values, annotation sizes and names against the real
# kube-apiserver's ObjectMeta validation, and the same classes on ModelDeploymentScaler files. What
# `validate` accepts `kubectl create --dry-run=server` must accept; what it refuses for an API-server
# reason the API server must refuse. A second document of one object is left out: applied together
# the API server takes both (the later replaces the earlier), and `validate` refuses that on purpose.

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from app.admission import objectmeta  # noqa: E402
from app.admission.offline import scaler_verdict  # noqa: E402

LABEL_CHARS = "abcXYZ019-_./ é"
KEYS = st.one_of(
    st.text(alphabet=LABEL_CHARS, min_size=1, max_size=12),
    st.tuples(st.text(alphabet="ab.-Z", min_size=0, max_size=8), st.text(alphabet=LABEL_CHARS, min_size=0, max_size=10))
    .map(lambda t: f"{t[0]}/{t[1]}"),
    st.integers(60, 70).map(lambda n: "k" * n),
)
LABEL_VALUES = st.one_of(st.text(alphabet=LABEL_CHARS, max_size=12), st.integers(60, 70).map(lambda n: "v" * n))
PARITY = settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))


def _metadata_case(obj: dict[str, Any]) -> tuple[bool, str]:
    """Both sides on a create; (offline allowed, the API server's stderr) after asserting they agree."""
    offline = offline_verdict(copy.deepcopy(obj), None, _world(), kv_cache_dtype_owned=True)
    return offline.allowed, offline.message


def _agree_on_create(op: Operator, obj: dict[str, Any], offline_allowed: bool, offline_message: str) -> None:
    # Sent as JSON (here and everywhere in this module): PyYAML writes a generated value such as
    # 09 unquoted, and kubectl's YAML 1.1 reader takes it for a number, judging another object.
    result = op.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(obj), check=False)
    assert (result.returncode == 0) == offline_allowed, \
        f"cluster allowed={result.returncode == 0}, offline allowed={offline_allowed}\ncluster: {result.stderr}\n" \
        f"offline: {offline_message}"


@PARITY
@given(key=KEYS, value=LABEL_VALUES)
def test_generated_labels(op: Operator, key: str, value: str) -> None:
    obj = server()
    obj["metadata"]["labels"] = {key: value}
    allowed, message = _metadata_case(obj)
    _agree_on_create(op, obj, allowed, message)


@PARITY
@given(key=KEYS, size=st.sampled_from([10, 262_000, 262_144, 262_200]))
def test_generated_annotations(op: Operator, key: str, size: int) -> None:
    obj = server()
    obj["metadata"]["annotations"] = {key: "x" * max(0, size - len(key.encode()))}
    allowed, message = _metadata_case(obj)
    _agree_on_create(op, obj, allowed, message)


@PARITY
@given(name=st.text(alphabet="abZ09-._", min_size=1, max_size=20) | st.integers(250, 256).map(lambda n: "a" * n),
       generate=st.booleans())
def test_generated_names(op: Operator, name: str, generate: bool) -> None:
    obj = server()
    if generate:
        del obj["metadata"]["name"]
        obj["metadata"]["generateName"] = name
    else:
        obj["metadata"]["name"] = name
    offline = offline_verdict(copy.deepcopy(obj), None, _world(), kv_cache_dtype_owned=True)
    api_refusals = objectmeta.metadata_refusals(obj)
    result = op.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(obj), check=False)
    # A name the API server takes may still be refused by a webhook rule (a dotted name: rule 8), so
    # the API server's own verdict is compared with the metadata refusals, the whole verdict with the cluster.
    if api_refusals:
        assert result.returncode != 0 and not offline.allowed, (result.stderr, offline.message)
    else:
        assert (result.returncode == 0) == offline.allowed, (result.stderr, offline.message)


SCALER = yaml.safe_load((REPO / "examples" / "autoscaling" / "pd-scaler.yaml").read_text())
SCALER_EDITS = {
    "api-version": lambda d: d.update(apiVersion="worker.gpustack.ai/v2"),
    "unknown-field": lambda d: d["spec"].update(replica=3),
    "string-replicas": lambda d: d["spec"].update(replicas="3"),
    "uppercase-name": lambda d: d["metadata"].update(name="PD-Demo"),
    "bad-label": lambda d: d["metadata"].update(labels={"a b": "c"}),
    "ratio-zero": lambda d: d["spec"]["roles"][0].update(ratio=0),
    "as-is": lambda d: None,
}


@pytest.mark.parametrize("edit", sorted(SCALER_EDITS))
def test_scaler_files(op: Operator, edit: str) -> None:
    obj = copy.deepcopy(SCALER)
    obj["metadata"]["namespace"] = NAMESPACE
    obj["metadata"]["name"] = obj["metadata"]["name"] if edit == "uppercase-name" else "parity-scaler"
    SCALER_EDITS[edit](obj)
    offline = scaler_verdict(copy.deepcopy(obj), None, [], [])
    result = op.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(obj), check=False)
    assert (result.returncode == 0) == offline.allowed, (edit, result.stderr, offline.message)


def test_a_duplicate_key_is_refused_by_both(op: Operator, tmp_path: Path) -> None:
    """A body holding one field twice: the API server's strict decoding refuses it (`duplicate field`),
    and `validate` refuses the same text (JSON is YAML) naming the key and both lines. kubectl's own
    YAML reading keeps the last of the two before sending, so `kubectl create -f` of such a YAML file
    is accepted: the body is posted as written here, as a client that sends the file does."""
    body = json.dumps(server(), indent=1)
    text = body.replace('"kind": "ModelDeployment",', '"kind": "ModelDeployment",\n "kind": "ModelDeployment",', 1)
    path = tmp_path / "dup.json"
    path.write_text(text)
    from app.admission import files

    with pytest.raises(files.InputError, match="'kind' is given twice"):
        files.read_documents(path, "-f")
    uri = f"/apis/{vocab.GROUP}/{vocab.VERSION}/namespaces/{NAMESPACE}/modeldeployments?dryRun=All&fieldValidation=Strict"
    result = op.kubectl("create", "--raw", uri, "-f", str(path), check=False)
    assert result.returncode != 0 and "duplicate field" in result.stderr, result.stderr
    clean = tmp_path / "clean.json"
    clean.write_text(body)
    assert op.kubectl("create", "--raw", uri, "-f", str(clean), check=False).returncode == 0


@pytest.mark.parametrize("args,env", [
    (["--host", "127.0.0.1"], []), (["--ho=localhost"], []), (["--uds", "/tmp/s"], []),
    ([], [{"name": "FOO=BAR", "value": "x"}]), ([], [{"name": "A\nB", "value": "x"}]),
])
def test_pod_contract_refusals_come_from_the_webhook(op: Operator, args: list[str], env: list[dict[str, str]]) -> None:
    obj = server()
    role = obj["spec"]["roles"][0]
    role["extraArgs"] = [*role.get("extraArgs", []), *args]
    if env:
        role["env"] = env
    assert_same(op, obj, None, None)
