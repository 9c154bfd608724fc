"""Pods the cluster stores but can never run, and options smuggled past the owned-key rule
(docs/admission.md#the-rules, rules 23-27): every spelling each engine's parser reads, generated
from the engines' own option tables, not listed by hand."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from app.admission import pods
from app.admission.validate import validate
from app.engines.registry import engine_for, flags_for
from app.world import World, load_yaml_objects

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
WORLD = World.of(load_yaml_objects(EXAMPLES / "world"))
QWEN = yaml.safe_load((EXAMPLES / "deployments" / "qwen-chat.yaml").read_text())
VERSIONS = {"vLLM": "0.33.0", "SGLang": "0.5.23"}


def deployment(engine: str = "vLLM", **role: Any) -> dict[str, Any]:
    md = copy.deepcopy(QWEN)
    md["spec"]["engine"] = {"name": engine, "version": VERSIONS[engine]}
    md["spec"]["roles"][0].update(role)
    return md


def paths(md: dict[str, Any]) -> list[str]:
    return [r.path for r in validate(md, None, WORLD).refusals]


def test_the_example_is_allowed() -> None:
    for engine in VERSIONS:
        assert paths(deployment(engine)) == []


# --- rule 23: options that break the Pod's contract, in every spelling ---------------------------


def spellings(engine: str, flag: str) -> list[str]:
    """Every way the engine's parser reads `flag`: its option strings, each unique prefix of them, and
    on vLLM the underscore spellings."""
    table = flags_for(engine)
    strings = [o for o in table.options if table.canonical(o) == flag]
    out: set[str] = set(strings)
    for option in strings:
        for end in range(3, len(option)):
            prefix = option[:end]
            if [o for o in table.options if o.startswith(prefix)] == [option]:
                out.add(prefix)
    if table.underscores_to_dashes:
        out |= {"--" + s[2:].replace("-", "_") for s in list(out) if s.startswith("--")}
    return sorted(out)


CONTRACT = [(engine, flag) for engine in VERSIONS for flag in engine_for(engine).contract_flags]


@pytest.mark.parametrize("engine,flag", CONTRACT)
def test_every_spelling_of_a_contract_option_is_refused(engine: str, flag: str) -> None:
    for spelling in spellings(engine, flag):
        for args in ([spelling, "127.0.0.1"], [f"{spelling}=127.0.0.1"]):
            refused = paths(deployment(engine, extraArgs=["--max-model-len", "4096", *args]))
            assert "spec.roles[0].extraArgs[2]" in refused, (engine, args)


@pytest.mark.parametrize("engine", VERSIONS)
@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
def test_a_wildcard_host_is_allowed(engine: str, host: str) -> None:
    assert paths(deployment(engine, extraArgs=["--host", host])) == []


@settings(max_examples=40, deadline=None)
@given(engine=st.sampled_from(sorted(VERSIONS)),
       host=st.ip_addresses().map(str).filter(lambda h: h not in ("0.0.0.0", "::")) | st.sampled_from(["localhost", ""]))
def test_any_other_host_is_refused(engine: str, host: str) -> None:
    assert "spec.roles[0].extraArgs[1]" in paths(deployment(engine, extraArgs=[f"--host={host}", "--port=8000"]) ) \
        or "spec.roles[0].extraArgs[0]" in paths(deployment(engine, extraArgs=[f"--host={host}", "--port=8000"]))


def test_a_host_behind_a_variable_is_read() -> None:
    md = deployment(extraArgs=["--host", "$(BIND)"], env=[{"name": "BIND", "value": "127.0.0.1"}])
    assert "spec.roles[0].extraArgs[0]" in paths(md)


def test_a_take_over_command_is_read_too() -> None:
    md = deployment(command=["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct", "--uds", "/tmp/s"])
    assert "spec.roles[0].command[3]" in paths(md)


# --- rule 24: a model name read as an option ------------------------------------------------------


@given(name=st.from_regex(r"-{1,2}[a-z][-a-z_.=]{0,30}", fullmatch=True))
def test_a_model_name_starting_with_a_dash_is_refused(name: str) -> None:
    md = deployment()
    md["spec"]["model"]["name"] = name
    assert "spec.model.name" in paths(md)


# --- rule 25: env names -----------------------------------------------------------------------------

PRINTABLE = st.characters(min_codepoint=0x20, max_codepoint=0x7E).filter(lambda c: c != "=")


@given(name=st.text(PRINTABLE, min_size=1, max_size=40))
def test_printable_ascii_names_without_equals_are_allowed(name: str) -> None:
    assert pods.env_name_problem(name) is None


@given(head=st.text(PRINTABLE, max_size=10), bad=st.sampled_from(["=", "\n", "\t", "\x00", "é", "\x7f", "名"]),
       tail=st.text(PRINTABLE, max_size=10))
def test_other_names_are_refused(head: str, bad: str, tail: str) -> None:
    name = head + bad + tail
    assert pods.env_name_problem(name) is not None
    md = deployment(env=[{"name": name, "value": "x"}])
    assert "spec.roles[0].env[0].name" in paths(md)


# --- rules 26-27: sizes -------------------------------------------------------------------------------


def test_an_argument_above_128_kib_is_refused() -> None:
    assert "spec.roles[0].extraArgs[1]" in paths(deployment(extraArgs=["--served-model-name", "x" * (128 * 1024)]))
    assert paths(deployment(extraArgs=["--served-model-name", "x" * (128 * 1024 - 1)])) == []


def test_a_nul_byte_is_refused() -> None:
    assert "spec.roles[0].env[0].value" in paths(deployment(env=[{"name": "A", "value": "a\x00b"}]))


def test_a_huge_env_is_refused_for_size() -> None:
    env = [{"name": f"VAR_{i}", "value": "v"} for i in range(70_000)]
    refused = paths(deployment(env=env))
    assert "object" in refused and "spec.roles[0]" in refused


def test_a_huge_argument_is_refused_for_size() -> None:
    refused = paths(deployment(extraArgs=["--served-model-name", "x" * (5 * 1024 * 1024)]))
    assert {"object", "spec.roles[0]", "spec.roles[0].extraArgs[1]"} <= set(refused)


# --- accelerator: a quantity that multiplies ----------------------------------------------------


@pytest.mark.parametrize("value", ["2Gi", "1k", "1M", "1e3", "2Ki"])
def test_a_multiplying_suffix_on_accelerator_is_refused_once(value: str) -> None:
    verdict = validate(deployment(resources={"accelerator": value}), None, WORLD)
    messages = [str(r) for r in verdict.refusals if r.path.endswith("accelerator")]
    assert len(messages) == 1 and "counts cards" in messages[0], messages
    assert not [w for w in verdict.warnings if "idle" in str(w)]


@pytest.mark.parametrize("value", [2, "2", "2000m"])
def test_plain_card_counts_are_allowed(value: Any) -> None:
    assert paths(deployment(resources={"accelerator": value})) == []
