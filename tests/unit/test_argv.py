"""Engine argv reading: flag data, option resolution, whole-line walks, degrees, width, port."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app import vocab
from app.engines import argv as A
from app.engines.degrees import declared_width, read_degrees
from app.engines.registry import ENGINES, flags_for
from app.engines.sglang import SGLANG
from app.engines.takeover import engine_args_of_command
from app.engines.vllm import VLLM

V = vocab.ENGINE_VLLM
S = vocab.ENGINE_SGLANG


# --- Flag data --------------------------------------------------------------------------------


@pytest.mark.parametrize("flags", [VLLM.flags, SGLANG.flags], ids=lambda f: f.engine)
def test_flag_tables_are_consistent(flags):
    assert len(flags.options) > 400  # several hundred: a partial list would break prefixes
    assert flags.no_value <= flags.options
    assert flags.optional_value <= flags.options
    assert flags.many_values <= flags.options
    assert flags.negative <= flags.no_value
    assert not (flags.no_value & flags.many_values)
    assert not (flags.no_value & flags.optional_value)
    for alias, canonical in flags.synonyms.items():
        assert alias in flags.options and canonical in flags.options
        assert canonical.startswith("--") and canonical not in flags.synonyms
    assert all(o.startswith("-") and " " not in o for o in flags.options)


@pytest.mark.parametrize(
    "engine,option,canonical",
    [
        (V, "-tp", "--tensor-parallel-size"),
        (V, "-pp", "--pipeline-parallel-size"),
        (V, "-dp", "--data-parallel-size"),
        (V, "-dpl", "--data-parallel-size-local"),
        (V, "-dcp", "--decode-context-parallel-size"),
        (V, "-pcp", "--prefill-context-parallel-size"),
        (V, "-ep", "--enable-expert-parallel"),
        (V, "--disable-expert-parallel", "--enable-expert-parallel"),
        (V, "--no-enable-expert-parallel", "--enable-expert-parallel"),
        (V, "-n", "--nnodes"),
        (V, "-q", "--quantization"),
        (V, "--port", "--port"),
        (V, "--api-key", "--api-key"),
        (V, "--kv-transfer-config", "--kv-transfer-config"),
        (V, "--kv-events-config", "--kv-events-config"),
        (V, "--kv-cache-dtype", "--kv-cache-dtype"),
        (S, "--tp-size", "--tp-size"),
        (S, "--tensor-parallel-size", "--tp-size"),
        (S, "--pipeline-parallel-size", "--pp-size"),
        (S, "--data-parallel-size", "--dp-size"),
        (S, "--ep", "--ep-size"),
        (S, "--expert-parallel-size", "--ep-size"),
        (S, "--model", "--model-path"),
        (S, "--enable-hicache", "--enable-hierarchical-cache"),
        (S, "--hicache-storage-backend-extra-config", "--hicache-storage-backend-extra-config"),
        (S, "--disaggregation-bootstrap-port", "--disaggregation-bootstrap-port"),
        (S, "--port", "--port"),
        (S, "--api-key", "--api-key"),
        (S, "--kv-cache-dtype", "--kv-cache-dtype"),
    ],
)
def test_known_option_strings(engine, option, canonical):
    flags = flags_for(engine)
    assert option in flags.options
    assert flags.canonical(option) == canonical


def test_flags_for_unknown_engine():
    with pytest.raises(KeyError, match="unknown engine"):
        flags_for("TensorRT-LLM")
    assert set(ENGINES) == set(vocab.ENGINES)


# --- One token --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "engine,token,flag,spelling,value,member,abbreviated",
    [
        (V, "--kv-transfer-config", "--kv-transfer-config", "--kv-transfer-config", None, None, False),
        (V, "--kv_transfer_config", "--kv-transfer-config", "--kv_transfer_config", None, None, False),
        (V, "--kv-transfer-conf", "--kv-transfer-config", "--kv-transfer-conf", None, None, True),
        (V, "--kv_transfer_conf", "--kv-transfer-config", "--kv_transfer_conf", None, None, True),
        (V, "--kv-tr", "--kv-transfer-config", "--kv-tr", None, None, True),
        (V, '--kv-transfer-config={"kv_role":"kv_both"}', "--kv-transfer-config", "--kv-transfer-config",
         '{"kv_role":"kv_both"}', None, False),
        (V, "--kv_transfer_config=a_b", "--kv-transfer-config", "--kv_transfer_config", "a_b", None, False),
        (V, "--kv-transfer-config.kv_role", "--kv-transfer-config", "--kv-transfer-config.kv_role", None,
         "kv_role", False),
        (V, "--kv_transfer_config.kv_role=kv_both", "--kv-transfer-config", "--kv_transfer_config.kv_role",
         "kv_both", "kv_role", False),
        (V, "--kv-transfer-conf.kv_connector_extra_config.x", "--kv-transfer-config",
         "--kv-transfer-conf.kv_connector_extra_config.x", None, "kv_connector_extra_config.x", True),
        (V, "--kv-events-config.topic", "--kv-events-config", "--kv-events-config.topic", None, "topic", False),
        (V, "--kv_cache_dtype", "--kv-cache-dtype", "--kv_cache_dtype", None, None, False),
        (V, "-tp", "--tensor-parallel-size", "-tp", None, None, False),
        (V, "-tp=4", "--tensor-parallel-size", "-tp", "4", None, False),
        (V, "--tensor_parallel_size", "--tensor-parallel-size", "--tensor_parallel_size", None, None, False),
        (V, "--tensor-parallel=2", "--tensor-parallel-size", "--tensor-parallel", "2", None, True),
        (V, "-n2", "--nnodes", "-n", "2", None, False),
        (V, "-O3", "--optimization-level", "-O", "3", None, False),
        (V, "-O=1", "--optimization-level", "-O", "1", None, False),
        (V, "--port=9000", "--port", "--port", "9000", None, False),
        (V, "--por", "--port", "--por", None, None, True),
        (S, "--tp", "--tp-size", "--tp", None, None, True),
        (S, "--dp", "--dp-size", "--dp", None, None, True),
        (S, "--ep", "--ep-size", "--ep", None, None, False),
        (S, "--tp-size=2", "--tp-size", "--tp-size", "2", None, False),
        (S, "--tensor-parallel-size", "--tp-size", "--tensor-parallel-size", None, None, False),
        (S, "--hicache-storage-backend", "--hicache-storage-backend", "--hicache-storage-backend", None, None,
         False),
        (S, "--hicache-storage-backend-e", "--hicache-storage-backend-extra-config",
         "--hicache-storage-backend-e", None, None, True),
        (S, "--hicache-storage-backend-extra=x", "--hicache-storage-backend-extra-config",
         "--hicache-storage-backend-extra", "x", None, True),
        (S, "--disaggregation-m", "--disaggregation-mode", "--disaggregation-m", None, None, True),
        (S, "--kv-cache-dt", "--kv-cache-dtype", "--kv-cache-dt", None, None, True),
    ],
)
def test_resolve_option(engine, token, flag, spelling, value, member, abbreviated):
    r = A.resolve_option(engine, token)
    assert isinstance(r, A.Resolved), r
    assert (r.flag, r.spelling, r.explicit_value, r.member, r.abbreviated) == (
        flag, spelling, value, member, abbreviated
    )


@pytest.mark.parametrize(
    "engine,token,candidates",
    [
        (V, "--kv", {"--kv-transfer-config", "--kv-events-config", "--kv-cache-dtype"}),
        (V, "--kv-cache-dt", {"--kv-cache-dtype", "--kv-cache-dtype-skip-layers"}),
        (V, "--kv_cache_d", {"--kv-cache-dtype", "--kv-cache-dtype-skip-layers"}),
        (V, "--api", {"--api-key", "--api-server-count"}),
        (V, "-d", {"-dp", "-dpl", "-dcp"}),
        (S, "--pp", {"--pp-size", "--pp-max-micro-batch-size", "--pp-async-batch-depth"}),
        (S, "--hicache-storage-b", {"--hicache-storage-backend", "--hicache-storage-backend-extra-config"}),
        (S, "--disaggregation-", {"--disaggregation-mode", "--disaggregation-transfer-backend"}),
    ],
)
def test_ambiguous_prefix_is_reported_not_guessed(engine, token, candidates):
    r = A.resolve_option(engine, token)
    assert isinstance(r, A.Ambiguous)
    assert candidates <= set(r.candidates)
    assert list(r.candidates) == sorted(r.candidates)


@pytest.mark.parametrize(
    "engine,token",
    [
        (V, "model"),
        (V, "-1"),
        (V, "-0.5x"),  # dotted key "-0": no such option
        (V, "--no-such-flag"),
        (V, "--"),
        (V, "-"),
        (V, "--disaggregation-mode"),  # SGLang's, not vLLM's
        (S, "--kv_transfer_config"),  # no underscore conversion on SGLang
        (S, "--tp_size"),
        (S, "--kv-transfer-config.kv_role"),  # no dotted members on SGLang
        (S, "--kv-transfer-config"),
        (S, "-tp"),
    ],
)
def test_tokens_that_are_not_options(engine, token):
    assert A.resolve_option(engine, token) is None


def test_underscores_convert_only_before_the_first_dot_or_equals():
    r = A.resolve_option(V, "--kv_transfer_config.kv_connector_extra_config.some_key=a_b")
    assert isinstance(r, A.Resolved)
    assert r.member == "kv_connector_extra_config.some_key"
    assert r.explicit_value == "a_b"


# --- Whole lines ------------------------------------------------------------------------------


def _flags(engine, argv):
    return [(o.flag, o.values) for o in A.parse_options(engine, argv)]


@pytest.mark.parametrize(
    "engine,argv,expected",
    [
        (V, ["m", "-tp", "2"], [("--tensor-parallel-size", ("2",))]),
        (V, ["m", "--enable-expert-parallel", "-tp", "2"],
         [("--enable-expert-parallel", ()), ("--tensor-parallel-size", ("2",))]),
        # a boolean never swallows the next token, even a positional
        (V, ["--enforce-eager", "m"], [("--enforce-eager", ())]),
        # dotted members take the next token unconditionally
        (V, ["m", "--kv-transfer-config.kv_role", "kv_both", "-tp", "2"],
         [("--kv-transfer-config", ("kv_both",)), ("--tensor-parallel-size", ("2",))]),
        (V, ["m", "--kv-transfer-config.kv_role", "--kv-events-config"], [("--kv-transfer-config", ("--kv-events-config",))]),
        # multi-value options take every following argument
        (V, ["m", "--api-key", "a", "b", "--port", "9000"], [("--api-key", ("a", "b")), ("--port", ("9000",))]),
        (V, ["m", "--served-model-name", "x", "y"], [("--served-model-name", ("x", "y"))]),
        # negative numbers are values; option-looking tokens are not
        (V, ["m", "--seed", "-1"], [("--seed", ("-1",))]),
        (V, ["m", "-tp", "-pp", "2"], [("--tensor-parallel-size", ()), ("--pipeline-parallel-size", ("2",))]),
        # "--" ends the options
        (V, ["m", "-tp", "2", "--", "--kv-transfer-config", "{}"], [("--tensor-parallel-size", ("2",))]),
        (V, ["m", "-O3"], [("--optimization-level", ("3",))]),
        (V, ["m", "-O", "2"], [("--optimization-level", ("2",))]),
        (V, ["m", "--hf-token", "-tp", "4"], [("--hf-token", ()), ("--tensor-parallel-size", ("4",))]),
        (V, ["m", "--hf-token", "tok"], [("--hf-token", ("tok",))]),
        (S, ["--model-path", "m", "--tp", "2", "--enable-hicache"],
         [("--model-path", ("m",)), ("--tp-size", ("2",)), ("--enable-hierarchical-cache", ())]),
        (S, ["--hicache-storage-backend-e={}", "--disaggregation-mode", "prefill"],
         [("--hicache-storage-backend-extra-config", ("{}",)), ("--disaggregation-mode", ("prefill",))]),
    ],
)
def test_parse_options(engine, argv, expected):
    assert _flags(engine, argv) == expected


def test_parse_argv_reports_ambiguous_unknown_config_and_missing_values():
    p = A.parse_argv(V, ["m", "--kv", "x", "--nope", "--config", "c.yaml", "-tp"])
    assert [(a.token, a.index) for a in p.ambiguous] == [("--kv", 1)]
    assert p.unknown == ((3, "--nope"),)
    assert p.config_file
    (tp,) = p.of("--tensor-parallel-size")
    assert tp.value_missing and tp.index == 6
    assert not A.parse_argv(S, ["--model-path", "m"]).config_file


def test_option_records_spelling_index_and_negation():
    (o,) = A.parse_options(V, ["m", "--disable_expert_parallel"])
    assert (o.flag, o.option_string, o.spelling, o.index, o.negated) == (
        "--enable-expert-parallel", "--disable-expert-parallel", "--disable_expert_parallel", 1, True
    )
    (o,) = A.parse_options(V, ["m", "--kv_transfer_config.kv_role=kv_both"])
    assert (o.spelling, o.member, o.value, o.token) == (
        "--kv_transfer_config.kv_role", "kv_role", "kv_both", "--kv_transfer_config.kv_role=kv_both"
    )


# --- Take-over commands -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "engine,command,expected",
    [
        (V, ["vllm", "serve", "m", "--tp", "2"], ["m", "--tp", "2"]),
        (V, ["/usr/local/bin/vllm", "serve", "m"], ["m"]),
        (V, ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"], ["--model", "m"]),
        (V, ["python3.12", "-u", "-m", "vllm.entrypoints.cli.main", "serve", "m", "-tp", "2"], ["m", "-tp", "2"]),
        (V, ["env", "A=1", "vllm", "serve", "m"], ["m"]),
        (V, ["vllm", "bench", "serve"], None),
        (V, ["bash", "-c", "vllm serve m -tp 2"], None),
        (V, ["sh", "-c", "exec vllm serve m"], None),
        (V, ["python3", "-m", "sglang.launch_server"], None),
        (V, ["python3", "/app/run.py", "-tp", "2"], None),
        (V, ["python3", "-c", "import vllm"], None),
        (V, ["env", "-i", "vllm", "serve", "m"], None),
        (V, [], None),
        (S, ["python3", "-m", "sglang.launch_server", "--model-path", "m", "--tp", "2"],
         ["--model-path", "m", "--tp", "2"]),
        (S, ["python", "-X", "dev", "-m", "sglang.launch_server", "--tp-size", "4"], ["--tp-size", "4"]),
        (S, ["sglang", "serve", "m", "--model-type", "llm", "--tp", "2"], ["m", "--tp", "2"]),
        (S, ["sglang", "serve", "--model-type=llm", "--model-path", "m"], ["--model-path", "m"]),
        (S, ["vllm", "serve", "m"], None),
        (S, ["bash", "-c", "python3 -m sglang.launch_server"], None),
    ],
)
def test_engine_args_of_command(engine, command, expected):
    assert engine_args_of_command(engine, command) == expected


# --- Degrees ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "engine,argv,env,fields",
    [
        (V, ["m"], {}, dict(tensor=1, pipeline=1, data=1)),
        (V, ["m", "-tp", "2"], {}, dict(tensor=2)),
        (V, ["m", "--tensor-parallel-size=4"], {}, dict(tensor=4)),
        (V, ["m", "--tensor_parallel_size", "2"], {}, dict(tensor=2)),
        (V, ["m", "--tensor-parallel", "8"], {}, dict(tensor=8)),
        (V, ["m", "-tp", "2", "-tp", "4"], {}, dict(tensor=4)),  # the last one wins
        (V, ["m", "-pp", "2", "-dp", "2", "-dpl", "1", "-dcp", "2", "-pcp", "2"], {},
         dict(pipeline=2, data=2, data_local=1, decode_context=2, prefill_context=2)),
        (V, ["m", "-ep"], {}, dict(expert_parallel=True)),
        (V, ["m", "-ep", "--disable-expert-parallel"], {}, dict(expert_parallel=False)),
        (V, ["m"], {vocab.ENV_VLLM_DP_SIZE: "4"}, dict(data=4, data_from_env=True)),
        (V, ["m", "-dp", "2"], {vocab.ENV_VLLM_DP_SIZE: "4"}, dict(data=2, data_from_env=False)),
        (V, ["m", "-tp", "$(GPUSTACK_REPLICA_SIZE)"], {vocab.ENV_REPLICA_SIZE: "2"}, dict(tensor=2)),
        (V, ["m", "-n", "2", "-dpn", "0"], {}, dict(nnodes=2, data_external_lb=True)),
        (S, ["--tp-size", "2"], {}, dict(tensor=2)),
        (S, ["--tp", "4", "--pp-size", "2", "--dp", "2", "--ep", "4"], {},
         dict(tensor=4, pipeline=2, data=2, expert=4)),
        (S, ["--tensor-parallel-size", "8", "--attn-dp-size", "4"], {}, dict(tensor=8, attention_data=4)),
        (S, ["--tp", "8", "--dp", "4", "--enable-dp-attention"], {}, dict(tensor=8, data=1, attention_data=4)),
        (S, ["--tp", "2"], {vocab.ENV_VLLM_DP_SIZE: "4"}, dict(data=1)),  # a vLLM variable
    ],
)
def test_read_degrees(engine, argv, env, fields):
    reading = read_degrees(engine, argv, env)
    assert reading.problems == ()
    for name, value in fields.items():
        assert getattr(reading.degrees, name) == value, name


@pytest.mark.parametrize(
    "engine,argv,env,flag,words",
    [
        (V, ["m", "-tp"], {}, "--tensor-parallel-size", ["`-tp`", "no value"]),
        (V, ["m", "-tp", "--enforce-eager"], {}, "--tensor-parallel-size", ["no value"]),
        (V, ["m", "-tp", "two"], {}, "--tensor-parallel-size", ["`-tp two`", "whole number", "'two'"]),
        (V, ["m", "-tp", "0"], {}, "--tensor-parallel-size", ["`-tp 0`", "at least 1", "got 0"]),
        (V, ["m", "-tp", "-2"], {}, "--tensor-parallel-size", ["at least 1", "got -2"]),
        (V, ["m", "--tensor_parallel_size=2.5"], {}, "--tensor-parallel-size", ["--tensor_parallel_size 2.5", "'2.5'"]),
        (V, ["m", "--pipeline-parallel-size="], {}, "--pipeline-parallel-size", ["whole number", "''"]),
        (V, ["m", "-dpl", "0"], {}, "--data-parallel-size-local", ["at least 1"]),
        (V, ["m", "--tensor-parallel-size.x", "1"], {}, "--tensor-parallel-size", ["JSON member"]),
        (V, ["m", "-tp", "$(UNSET)"], {}, "--tensor-parallel-size", ["'$(UNSET)'"]),
        (V, ["m"], {vocab.ENV_VLLM_DP_SIZE: "two"}, vocab.ENV_VLLM_DP_SIZE, ["VLLM_DP_SIZE", "'two'"]),
        (S, ["--tp-size", "x"], {}, "--tp-size", ["`--tp-size x`", "'x'"]),
        (S, ["--tp"], {}, "--tp-size", ["`--tp`", "no value"]),
        (S, ["--dp-size", "0"], {}, "--dp-size", ["at least 1"]),
        (S, ["--ep", "two"], {}, "--ep-size", ["`--ep two`"]),
    ],
)
def test_degree_problems_name_the_flag_and_value(engine, argv, env, flag, words):
    reading = read_degrees(engine, argv, env)
    assert len(reading.problems) == 1
    (problem,) = reading.problems
    assert problem.flag == flag
    for word in words:
        assert word in problem.message, problem.message


def test_every_bad_occurrence_is_a_problem():
    reading = read_degrees(V, ["m", "-tp", "x", "-pp", "0", "-tp", "2"])
    assert [p.flag for p in reading.problems] == ["--tensor-parallel-size", "--pipeline-parallel-size"]
    assert reading.degrees.tensor == 2


@pytest.mark.parametrize(
    "engine,argv,pods,width",
    [
        (V, ["m"], 1, 1),
        (V, ["m", "-tp", "4"], 1, 4),
        (V, ["m", "-tp", "2", "-pp", "2"], 1, 4),
        (V, ["m", "-tp", "2", "-dp", "2"], 1, 4),  # dp_local defaults to dp on one node
        (V, ["m", "-tp", "2", "-dp", "4", "-dpl", "2"], 1, 4),
        (V, ["m", "-tp", "2", "-dcp", "2"], 1, 2),  # DCP reuses TP ranks
        (V, ["m", "-tp", "2", "-pcp", "2"], 1, 4),
        (V, ["m", "-tp", "2", "-ep"], 1, 2),
        (V, ["m", "-tp", "2", "-dp", "4", "--data-parallel-rank", "1"], 1, 2),  # external LB
        (V, ["m", "-tp", "2"], 1, 2),
        (V, ["m", "-tp", "16", "--nnodes", "2"], 2, 8),
        (V, ["m", "-tp", "8", "-dp", "2", "--nnodes", "2"], 2, 8),
        (V, ["m", "-tp", "16"], 2, 8),  # no --nnodes: at most an even share of the world
        (S, ["--tp", "4"], 1, 4),
        (S, ["--tp", "2", "--pp-size", "2"], 1, 4),
        (S, ["--tp", "2", "--dp", "2"], 1, 4),  # DP replicas each own a TP group
        (S, ["--tp", "8", "--attn-dp-size", "8"], 1, 8),  # attention DP runs inside TP
        (S, ["--tp", "8", "--dp", "8", "--enable-dp-attention"], 1, 8),
        (S, ["--tp", "16", "--nnodes", "2"], 2, 8),
        (S, ["--tp", "8", "--pp-size", "2", "--nnodes", "2"], 2, 8),
    ],
)
def test_declared_width(engine, argv, pods, width):
    reading = read_degrees(engine, argv)
    assert reading.problems == ()
    assert declared_width(reading.degrees, pods=pods) == width


def test_vllm_dp_size_env_is_one_rank_per_process():
    reading = read_degrees(V, ["m", "-tp", "2"], {vocab.ENV_VLLM_DP_SIZE: "4"})
    assert reading.degrees.data == 4
    assert declared_width(reading.degrees) == 2


# --- Port -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "engine,argv,port,spelling",
    [
        (V, ["m"], None, None),
        (V, ["m", "--port", "9000"], 9000, "--port"),
        (V, ["m", "--port=9001"], 9001, "--port"),
        (V, ["m", "--por", "9002"], 9002, "--por"),
        (V, ["m", "--port", "1", "--port", "65535"], 65535, "--port"),
        (V, ["m", "--port", "$(PORT)"], 8080, "--port"),
        (S, ["--model-path", "m", "--port", "30000"], 30000, "--port"),
        (S, ["--model-path", "m", "--po=30001"], 30001, "--po"),
    ],
)
def test_read_port(engine, argv, port, spelling):
    reading = A.read_port(engine, argv, {"PORT": "8080"})
    assert reading.problem is None
    assert (reading.port, reading.spelling) == (port, spelling)


@pytest.mark.parametrize(
    "engine,argv,words",
    [
        (V, ["m", "--port"], ["no value"]),
        (V, ["m", "--port", "http"], ["'http'"]),
        (V, ["m", "--port", "0"], ["1..65535", "got 0"]),
        (V, ["m", "--port=70000"], ["got 70000"]),
        (V, ["m", "--port", "8000", "--port", "x"], ["'x'"]),
        (S, ["--model-path", "m", "--port", "-1"], ["got -1"]),
    ],
)
def test_read_port_problems(engine, argv, words):
    reading = A.read_port(engine, argv)
    assert reading.port is None and reading.problem is not None
    for word in words:
        assert word in reading.problem


def test_expand_references():
    env = {"A": "1", "B": "x"}
    assert A.expand_references("$(A)-$(B)", env) == "1-x"
    assert A.expand_references("$$(A)", env) == "$(A)"
    assert A.expand_references("$(C)", env) == "$(C)"


# --- Property: any known flag in any accepted spelling is recovered ---------------------------


def _shortest_unique_prefix(engine: str, option: str) -> str:
    for cut in range(3 if option.startswith("--") else 2, len(option)):
        r = A.resolve_option(engine, option[:cut])
        if isinstance(r, A.Resolved) and r.option_string == option:
            return option[:cut]
    return option


@st.composite
def _spelt_option(draw, engine):
    flags = flags_for(engine)
    option = draw(st.sampled_from(sorted(flags.options - {"-h", "--help", "--config"})))
    takes = option not in flags.no_value
    forms = ["exact"]
    if option.startswith("--"):
        forms += ["prefix"]
        if flags.underscores_to_dashes:
            forms += ["underscores"]
    if takes:
        forms += ["equals"]
        if flags.dotted_members:
            forms += ["dotted"]
        if len(option) == 2:
            forms += ["attached"]
    form = draw(st.sampled_from(forms))
    value = draw(st.from_regex(r"[a-z0-9][a-z0-9_]{0,6}", fullmatch=True))
    name = option
    if form == "prefix":
        name = _shortest_unique_prefix(engine, option)
    if form == "underscores":
        name = "--" + _shortest_unique_prefix(engine, option)[2:].replace("-", "_")
    tokens = {
        "equals": [f"{name}={value}"],
        "dotted": [f"{name}.member", value],
        "attached": [f"{name}{value}"],
    }.get(form, [name, value] if takes else [name])
    if option in flags.optional_value and form in ("exact", "prefix", "underscores") and draw(st.booleans()):
        tokens = [name]  # nargs="?" given no value
    return flags.canonical(option), tokens


@pytest.mark.parametrize("engine", [V, S])
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_property_parse_options_recovers_canonical_flags(engine, data):
    items = data.draw(st.lists(_spelt_option(engine), min_size=1, max_size=8))
    argv = ["served-model"]
    expected = []
    for canonical, tokens in items:
        expected.append(canonical)
        argv += tokens
    parsed = A.parse_argv(engine, argv)
    assert parsed.ambiguous == () and parsed.unknown == ()
    assert [o.flag for o in parsed.options] == expected
