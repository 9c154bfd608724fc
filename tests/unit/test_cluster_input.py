"""Input judged exactly as the cluster will (docs/admission.md#reading-a-file and
#offline): YAML the API server's decoder refuses (alias bombs, duplicate keys), ObjectMeta as the
API server validates it, ModelDeploymentScaler files through the same strict check, and `render`
refusing whatever `validate` refuses. The classes are generated (hypothesis), not listed."""

from __future__ import annotations

import io
import resource
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app import cli, yamlread
from app.admission import files, objectmeta
from app.admission.offline import validate_offline

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
QWEN = (EXAMPLES / "deployments" / "qwen-chat.yaml").read_text()
PD = (EXAMPLES / "deployments" / "pd-pair.yaml").read_text()
SCALER = (EXAMPLES / "autoscaling" / "pd-scaler.yaml").read_text()


def run(*argv: str, stdin: str | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        if stdin is not None:
            import sys
            from unittest import mock

            with mock.patch.object(sys, "stdin", io.StringIO(stdin)):
                code = cli.main(list(argv))
        else:
            code = cli.main(list(argv))
    return code, out.getvalue(), err.getvalue()


def validate_text(tmp_path: Path, text: str) -> tuple[int, str, str]:
    path = tmp_path / "input.yaml"
    path.write_text(text)
    out, err = io.StringIO(), io.StringIO()
    code = validate_offline(path, EXAMPLES / "world", None, kv_cache_dtype_owned=True, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


# --- reading a file: aliases ---------------------------------------------------------------------


def bomb(width: int, depth: int, inside: str = "") -> str:
    """A "billion laughs" document: `depth` levels of `width` aliases to the level below."""
    lines = [f'l0: &l0 [{", ".join(["lol"] * width)}]']
    for level in range(1, depth):
        lines.append(f"l{level}: &l{level} [{', '.join([f'*l{level - 1}'] * width)}]")
    return inside + "\n".join(lines) + "\n"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(width=st.integers(min_value=4, max_value=12), depth=st.integers(min_value=7, max_value=12))
def test_an_alias_bomb_is_refused_fast_and_small(width: int, depth: int) -> None:
    text = bomb(width, depth)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    with pytest.raises(yamlread.ExcessiveAliasing):
        yamlread.documents_of_text(text, "bomb.yaml")
    assert time.monotonic() - started < 2.0
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 50 * 1024  # KiB: no expansion happened


def test_a_bomb_inside_extra_args_stops_validate_and_render_with_exit_2(tmp_path: Path) -> None:
    anchors = bomb(9, 9).replace("\n", "\n  ")
    text = QWEN.replace("spec:", f"x-anchors:\n  {anchors}\nspec:", 1)
    path = tmp_path / "bomb.yaml"
    path.write_text(text)
    for command in ("validate", "render"):
        code, out, err = run(command, "-f", str(path))
        assert code == 2 and out == "" and "aliases expand" in err, (command, err)


def test_few_aliases_are_read_as_values() -> None:
    text = "a: &a {x: 1}\nb: *a\nc: [*a, *a]\n"
    (doc,) = yamlread.documents_of_text(text, "ok.yaml")
    assert doc.obj == {"a": {"x": 1}, "b": {"x": 1}, "c": [{"x": 1}, {"x": 1}]}


def test_a_recursive_alias_is_refused() -> None:
    with pytest.raises(yamlread.ExcessiveAliasing, match="recursive"):
        yamlread.documents_of_text("a: &a [1, *a]\n", "loop.yaml")


@pytest.mark.parametrize("total,allowed", [(400_000, 0.99), (4_000_000, 0.10), (2_200_000, 0.545)])
def test_the_alias_ratio_is_go_yamls(total: int, allowed: float) -> None:
    assert yamlread.allowed_alias_ratio(total) == pytest.approx(allowed)


# --- reading a file: duplicate keys ------------------------------------------------------------

# Plain keys only: YAML 1.1 reads `on`, `yes`, `n`, `null`... as booleans and null, not as the key's text.
YAML_SPECIAL = {"y", "yes", "n", "no", "on", "off", "true", "false", "null"}
KEYS = st.lists(st.from_regex(r"[a-z][a-zA-Z]{0,8}", fullmatch=True).filter(lambda k: k.lower() not in YAML_SPECIAL),
                min_size=1, max_size=8, unique=True)


@given(keys=KEYS, data=st.data())
def test_a_duplicate_key_is_refused_with_the_key_and_both_lines(keys: list[str], data: st.DataObject) -> None:
    twice = data.draw(st.sampled_from(keys))
    lines = [f"{k}: {i}" for i, k in enumerate(keys)]
    at = data.draw(st.integers(min_value=keys.index(twice) + 1, max_value=len(lines)))
    lines.insert(at, f"{twice}: again")
    nested = data.draw(st.booleans())
    text = "spec:\n" + "".join(f"  {line}\n" for line in lines) if nested else "".join(f"{line}\n" for line in lines)
    offset = 2 if nested else 1
    with pytest.raises(yamlread.DuplicateKey) as caught:
        yamlread.documents_of_text(text, "dup.yaml")
    assert caught.value.key == twice
    assert (caught.value.first_line, caught.value.second_line) == (keys.index(twice) + offset, at + offset)


def test_the_cli_names_the_duplicate_key_and_both_lines(tmp_path: Path) -> None:
    text = QWEN.replace("spec:", "spec:\n  engine: {name: vLLM}", 1)
    code, out, err = run("validate", "-f", str(_write(tmp_path, text)))
    assert code == 2 and "'engine' is given twice" in err and "on lines" in err and "keep one" in err


def test_merge_keys_are_not_duplicates() -> None:
    (doc,) = yamlread.documents_of_text("base: &b {x: 1}\nm:\n  <<: *b\n  y: 2\n", "merge.yaml")
    assert doc.obj["m"] == {"x": 1, "y": 2}


def test_values_stay_json() -> None:
    (doc,) = yamlread.documents_of_text("when: 2024-01-02\nblob: !!binary aGVsbG8=\n", "json.yaml")
    assert doc.obj == {"when": "2024-01-02", "blob": "hello"}


def test_deep_nesting_is_refused_not_a_traceback(tmp_path: Path) -> None:
    code, out, err = run("validate", "-f", str(_write(tmp_path, "a: " + "[" * 5000 + "]" * 5000 + "\n")))
    assert code == 2 and "error:" in err and "Traceback" not in err


def _write(tmp_path: Path, text: str, name: str = "input.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# --- -f - -----------------------------------------------------------------------------------


def test_stdin_is_read_once_for_validate_and_render() -> None:
    code, out, _err = run("validate", "-f", "-", stdin=QWEN)
    assert code == 0 and out == "team-a/qwen-chat: allowed\n"
    code, out, _err = run("render", "-f", "-", "--objects-only", "-q", stdin=QWEN)
    assert code == 0 and "kind: Pod" in out


def test_stdin_errors_name_stdin() -> None:
    code, _out, err = run("validate", "-f", "-", stdin="a: [\n")
    assert code == 2 and "-f <stdin>:" in err


def test_a_terminal_on_stdin_is_refused_clearly() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    with pytest.raises(files.InputError, match="standard input is a terminal"):
        files.read_documents(files.STDIN, "-f", stdin=Tty())


# --- metadata as the API server judges it ----------------------------------------------------

LABEL_NAME = st.from_regex(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?", fullmatch=True)
PREFIX = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?(\.[a-z0-9]{1,10})?", fullmatch=True)


@given(prefix=st.none() | PREFIX, name=LABEL_NAME, value=st.just("") | LABEL_NAME)
def test_valid_labels_pass(prefix: str | None, name: str, value: str) -> None:
    key = f"{prefix}/{name}" if prefix else name
    assert objectmeta.label_refusals({"labels": {key: value}}) == []


BAD_KEYS = st.one_of(
    LABEL_NAME.map(lambda n: n + "/x/y"),  # two slashes
    LABEL_NAME.map(lambda n: "/" + n),  # empty prefix
    LABEL_NAME.map(lambda n: "Upper.Case/" + n),  # prefix not a DNS subdomain
    st.text(alphabet="abc", min_size=64, max_size=80),  # name too long
    st.sampled_from(["-a", "a-", "a b", "ä", "a=b", "x/", "_x"]),
)


@given(key=BAD_KEYS)
def test_invalid_label_keys_are_refused(key: str) -> None:
    (refusal,) = objectmeta.label_refusals({"labels": {key: "v"}})
    assert refusal.path == f"metadata.labels.{key}" and "label key" in refusal.problem


@given(value=st.text(alphabet="ab", min_size=64, max_size=100) | st.sampled_from(["-x", "x-", "a b", "a/b", "é"]))
def test_invalid_label_values_are_refused(value: str) -> None:
    (refusal,) = objectmeta.label_refusals({"labels": {"app": value}})
    assert "label value" in refusal.problem


@given(size=st.integers(min_value=0, max_value=300 * 1024))
def test_annotations_are_bounded_at_256_kib(size: int) -> None:
    refusals = objectmeta.annotation_refusals({"annotations": {"note": "x" * size}})
    assert bool(refusals) == (size + len("note") > 256 * 1024)


def test_annotation_keys_are_read_lowercased() -> None:
    assert objectmeta.annotation_refusals({"annotations": {"Example.COM/Key": "v"}}) == []
    assert objectmeta.annotation_refusals({"annotations": {"a b": "v"}})


def test_generate_name_without_name_is_judged_by_the_generated_name(tmp_path: Path) -> None:
    text = QWEN.replace("name: qwen-chat\n", "generateName: qwen-\n", 1)
    code, out, err = validate_text(tmp_path, text)
    assert code == 0, out
    assert "qwen-<5 random characters>: allowed" in out and "None" not in out + err
    assert "kubectl apply` refuses generateName" in err
    code, out, err = run("render", "-f", str(_write(tmp_path, text)))
    assert code == 2 and out == "" and "generateName without metadata.name" in err


def test_an_invalid_generate_name_is_refused(tmp_path: Path) -> None:
    code, out, _err = validate_text(tmp_path, QWEN.replace("name: qwen-chat\n", "generateName: Qwen_\n", 1))
    assert code == 1 and "metadata.generateName" in out


def test_two_documents_of_one_object_are_refused(tmp_path: Path) -> None:
    code, out, _err = validate_text(tmp_path, QWEN + "---\n" + QWEN)
    assert code == 1
    assert out.count("team-a/qwen-chat: allowed") == 1 and "is also the document at" in out


def test_a_directory_names_each_verdicts_file(tmp_path: Path) -> None:
    _write(tmp_path, QWEN, "a.yaml")
    _write(tmp_path, PD, "b.yaml")
    code, out, _err = run("validate", "-f", str(tmp_path))
    assert code == 0
    assert f"({tmp_path / 'a.yaml'}:" in out and f"({tmp_path / 'b.yaml'}:" in out


# --- scaler files: the API server's checks -----------------------------------------------------

SCALER_BREAKS = {
    "apiVersion": (lambda d: d.update(apiVersion="worker.gpustack.ai/v2"), "apiVersion"),
    "unknown": (lambda d: d["spec"].update(replica=3), "spec.replica"),
    "string replicas": (lambda d: d["spec"].update(replicas="3"), "spec.replicas"),
    "uppercase name": (lambda d: d["metadata"].update(name="PD-Demo"), "metadata.name"),
    "no deploymentRef": (lambda d: d["spec"].pop("deploymentRef"), "spec.deploymentRef"),
    "ratio word": (lambda d: d["spec"]["roles"][0].update(ratio="one"), "spec.roles[0].ratio"),
    "bad label": (lambda d: d["metadata"].update(labels={"a b": "c"}), "metadata.labels.a b"),
}


@pytest.mark.parametrize("case", sorted(SCALER_BREAKS))
def test_a_scaler_is_judged_like_a_deployment(tmp_path: Path, case: str) -> None:
    doc = yaml.safe_load(SCALER)
    change, path = SCALER_BREAKS[case]
    change(doc)
    code, out, _err = validate_text(tmp_path, yaml.safe_dump(doc))
    assert code == 1, out
    assert f"\n{path}: " in out or out.split("\n")[1].startswith(f"{path}: "), out
    assert "Input should be" not in out and "pydantic" not in out


@pytest.mark.parametrize("typo,meant", [("ModelDeploymentScalar", "ModelDeploymentScaler"),
                                        ("ModelDeploymentscaler", "ModelDeploymentScaler"),
                                        ("ModelDeploymnt", "ModelDeployment")])
def test_a_typod_kind_suggests_the_closest_kind(tmp_path: Path, typo: str, meant: str) -> None:
    source = SCALER if meant.endswith("Scaler") else QWEN
    code, out, _err = validate_text(tmp_path, source.replace(f"kind: {meant}\n", f"kind: {typo}\n", 1))
    assert code == 1 and f"did you mean {meant!r}" in out


# --- render ≡ validate ---------------------------------------------------------------------------


def test_a_refused_scaler_stops_the_render_of_its_file(tmp_path: Path) -> None:
    doc = yaml.safe_load(SCALER)
    doc["spec"]["replicas"] = "3"
    path = _write(tmp_path, PD + "---\n" + yaml.safe_dump(doc))
    assert run("validate", "-f", str(path))[0] == 1
    code, out, err = run("render", "-f", str(path), "--objects-only", "-q")
    assert code == 1 and out == "" and "nothing rendered" in err


def test_one_refused_deployment_of_two_renders_nothing(tmp_path: Path) -> None:
    path = _write(tmp_path, QWEN + "---\n" + PD.replace("spec:\n", "spec:\n  bogus: 1\n", 1))
    code, out, _err = run("render", "-f", str(path), "--objects-only", "-q")
    assert code == 1 and out == ""


def test_render_applies_the_scalers_replicas(tmp_path: Path) -> None:
    doc = yaml.safe_load(SCALER)
    doc["spec"]["replicas"] = 3
    path = _write(tmp_path, PD + "---\n" + yaml.safe_dump(doc))
    code, out, err = run("render", "-f", str(path), "--objects-only", "-q")
    assert code == 0, err
    pods = [d for d in yaml.safe_load_all(out) if d and d["kind"] == "Pod"]
    plain = [d for d in yaml.safe_load_all(run("render", "-f", str(_write(tmp_path, PD, "pd.yaml")), "--objects-only",
                                               "-q")[1]) if d and d["kind"] == "Pod"]
    assert len(pods) > len(plain)


# --- messages: no Python spellings, no placeholders ----------------------------------------------

SCALARS = st.none() | st.booleans() | st.integers(-5, 10**12) | st.floats(allow_nan=False, allow_infinity=False) \
    | st.text(max_size=12).filter(lambda t: "None" not in t) | st.sampled_from(["2Gi", "-x", "", "1.5"])
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6).filter(lambda t: "None" not in t), inner,
                                                                                            max_size=3), max_leaves=6)


def _paths(node: object, at: tuple = ()) -> list[tuple]:
    out = [at]
    if isinstance(node, dict):
        for key, item in node.items():
            out += _paths(item, (*at, key))
    elif isinstance(node, list):
        for index, item in enumerate(node):
            out += _paths(item, (*at, index))
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_no_refusal_speaks_python(data: st.DataObject) -> None:
    import re

    from app.admission.offline import judge_documents
    from app.world import World

    source = yaml.safe_load(data.draw(st.sampled_from([QWEN, PD, SCALER])))
    target = data.draw(st.sampled_from([p for p in _paths(source) if p and p[0] not in ("kind", "apiVersion")]))
    node = source
    for part in target[:-1]:
        node = node[part]
    node[target[-1]] = data.draw(VALUES)
    docs = [yamlread.Document(source, "f.yaml", 1)]
    (judged,) = judge_documents(docs, [], World.of([]), kv_cache_dtype_owned=True)
    text = judged.label + "\n" + judged.verdict.message + "\n".join(judged.verdict.warnings)
    assert not re.search(r"\bNone\b(?!')|(?<!')\bb'|<[A-Z][a-z]", text.replace("'None'", "")), text


def test_a_scaler_the_model_cannot_read_is_refused_in_the_api_servers_words() -> None:
    """A /scale write past a bound reaches the scaler webhook without the API server's check of the
    whole object: its refusal still reads like the API server's, not like pydantic's."""
    from app.admission.scaler import parse_refusals

    doc = yaml.safe_load(SCALER)
    doc["spec"]["replicas"] = 10**6
    scaler, refusals = parse_refusals(doc)
    assert scaler is None and [r.path for r in refusals] == ["spec.replicas"]
    assert "above the maximum" in refusals[0].problem and "Input should" not in str(refusals[0])


@pytest.mark.parametrize("name,says", [("qwen.chat", "'qwen.chat-server'"), ("q" * 70, "at most 56 characters")])
def test_a_deployment_name_refusal_names_the_services_and_the_field(tmp_path: Path, name: str, says: str) -> None:
    code, out, _err = validate_text(tmp_path, QWEN.replace("name: qwen-chat", f"name: {name}", 1))
    assert code == 1 and says in out
    assert f"metadata.name: '{name}'" in out


# --- reading a file: sizes, keys -----------------------------------------------------------------


def _peak_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def test_a_file_of_too_many_values_is_refused_before_they_are_built() -> None:
    before = _peak_kib()
    with pytest.raises(yamlread.FileTooLarge, match="values"):
        yamlread.documents_of_text("a:\n" + "- a\n" * 1_000_000, "many.yaml")
    assert _peak_kib() - before < 80 * 1024


@pytest.mark.parametrize("text", ["a: '" + "x" * (3 * 1024 * 1024 + 10) + "'\n",
                                  "a: &a '" + "x" * 100_000 + "'\nb: [" + ", ".join(["*a"] * 40) + "]\n"])
def test_a_document_above_the_api_servers_request_limit_is_refused(text: str) -> None:
    with pytest.raises(yamlread.ExcessiveAliasing, match="3 MiB"):
        yamlread.documents_of_text(text, "big.yaml")


def test_scalar_keys_are_spelled_as_json() -> None:
    (doc,) = yamlread.documents_of_text("spec: {null: 1, 2: x, true: y}\n", "keys.yaml")
    assert doc.obj == {"spec": {"null": 1, "2": "x", "true": "y"}}
