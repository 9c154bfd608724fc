"""Operator-owned keys (docs/rendering.md#owned-keys): every spelling of an owned flag, ownership per engine."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app import vocab
from app.engines import owned as O
from app.engines.entry import API_KEY_FLAG, KV_CACHE_DTYPE_FLAG
from app.engines.argv import parse_argv
from app.engines.registry import engine_for, flags_for

V = vocab.ENGINE_VLLM
S = vocab.ENGINE_SGLANG


@pytest.mark.parametrize("engine", [V, S])
def test_owned_keys_exist_in_the_engine_parser(engine):
    flags = flags_for(engine)
    assert engine_for(engine).owned_flags <= flags.options
    assert KV_CACHE_DTYPE_FLAG in flags.options
    assert API_KEY_FLAG in flags.options


@pytest.mark.parametrize(
    "engine,argv,flag,spelling,member",
    [
        # vLLM: every spelling (docs/engines.md#the-rules)
        (V, ["m", "--kv-transfer-config", "{}"], "--kv-transfer-config", "--kv-transfer-config", None),
        (V, ["m", "--kv_transfer_config", "{}"], "--kv-transfer-config", "--kv_transfer_config", None),
        (V, ["m", "--kv-transfer-conf", "{}"], "--kv-transfer-config", "--kv-transfer-conf", None),
        (V, ["m", "--kv_transfer_conf", "{}"], "--kv-transfer-config", "--kv_transfer_conf", None),
        (V, ["m", '--kv-transfer-config={"kv_role":"kv_both"}'], "--kv-transfer-config", "--kv-transfer-config", None),
        (V, ["m", "--kv-transfer-config.kv_role", "kv_both"], "--kv-transfer-config",
         "--kv-transfer-config.kv_role", "kv_role"),
        (V, ["m", "--kv_transfer_config.kv_role=kv_both"], "--kv-transfer-config",
         "--kv_transfer_config.kv_role", "kv_role"),
        (V, ["m", "--kv-tr.kv_connector", "X"], "--kv-transfer-config", "--kv-tr.kv_connector", "kv_connector"),
        (V, ["m", "--kv-events-config", "{}"], "--kv-events-config", "--kv-events-config", None),
        (V, ["m", "--kv_events_config.topic", "x"], "--kv-events-config", "--kv_events_config.topic", "topic"),
        (V, ["m", "--kv-ev={}"], "--kv-events-config", "--kv-ev", None),
        # SGLang: exact, unique prefixes, =value
        (S, ["--hicache-storage-backend", "mooncake"], "--hicache-storage-backend", "--hicache-storage-backend", None),
        (S, ["--hicache-storage-backend-e", "{}"], "--hicache-storage-backend-extra-config",
         "--hicache-storage-backend-e", None),
        (S, ["--hicache-storage-backend-extra-config={}"], "--hicache-storage-backend-extra-config",
         "--hicache-storage-backend-extra-config", None),
        (S, ["--disaggregation-mode", "prefill"], "--disaggregation-mode", "--disaggregation-mode", None),
        (S, ["--disaggregation-m=decode"], "--disaggregation-mode", "--disaggregation-m", None),
        (S, ["--disaggregation-t", "mooncake"], "--disaggregation-transfer-backend", "--disaggregation-t", None),
        (S, ["--disaggregation-bootstrap-port", "8998"], "--disaggregation-bootstrap-port",
         "--disaggregation-bootstrap-port", None),
        (S, ["--disaggregation-b=8998"], "--disaggregation-bootstrap-port", "--disaggregation-b", None),
    ],
)
def test_owned_arg_uses_every_spelling(engine, argv, flag, spelling, member):
    (use,) = O.owned_arg_uses(engine, argv, kv_cache_dtype_owned=False)
    assert (use.engine, use.flag, use.spelling, use.member) == (engine, flag, spelling, member)
    assert use.index == next(i for i, t in enumerate(argv) if t.startswith(spelling.partition(".")[0]))
    assert use.spelled_exactly == (spelling == flag)


@pytest.mark.parametrize(
    "engine,argv",
    [
        (V, ["m", "--hicache-storage-backend", "mooncake"]),  # SGLang's key: no such vLLM option
        (V, ["m", "--kv", "{}"]),  # ambiguous: the engine refuses the line, it is no use
        (V, ["m", "--served-model-name", "x", "--", "--kv-transfer-config", "{}"]),  # after "--"
        (S, ["--kv-transfer-config", "{}"]),  # vLLM's key: not an SGLang option
        (S, ["--kv-events-config", "{}"]),  # an SGLang option, but not owned there
        (S, ["--hicache_storage_backend", "mooncake"]),  # no underscore conversion on SGLang
        (S, ["--hicache-storage-b", "mooncake"]),  # ambiguous
        (S, ["--disaggregation-", "prefill"]),  # ambiguous
        (S, ["--enable-hierarchical-cache", "--hicache-ratio", "2"]),
    ],
)
def test_not_owned_uses(engine, argv):
    assert O.owned_arg_uses(engine, argv, kv_cache_dtype_owned=True) == []


def test_the_only_owned_use_in_dotted_then_value_is_the_dotted_flag():
    uses = O.owned_arg_uses(V, ["m", "--kv-transfer-config.kv_role", "--kv-events-config"],
                            kv_cache_dtype_owned=False)
    assert [u.flag for u in uses] == ["--kv-transfer-config"]


def test_ambiguous_owned_prefix_is_visible_to_admission():
    parsed = parse_argv(S, ["--hicache-storage-b", "mooncake"])
    (amb,) = parsed.ambiguous
    assert set(amb.candidates) == {"--hicache-storage-backend", "--hicache-storage-backend-extra-config"}


@pytest.mark.parametrize(
    "engine,token,owned_when_set",
    [
        (V, "--kv-cache-dtype", True),
        (V, "--kv_cache_dtype", True),
        (V, "--kv-cache-dtype=fp8", True),
        (V, "--kv-cache-dt", False),  # ambiguous with --kv-cache-dtype-skip-layers
        (V, "--kv-cache-dtype-skip-layers", False),
        (S, "--kv-cache-dtype", True),
        (S, "--kv-cache-dt", True),
        (S, "--kv-cache-dtype=bf16", True),
        (S, "--kv_cache_dtype", False),
    ],
)
def test_kv_cache_dtype_is_owned_only_when_asked(engine, token, owned_when_set):
    argv = ["m", token] if "=" in token else ["m", token, "fp8"]
    on = O.owned_arg_uses(engine, argv, kv_cache_dtype_owned=True)
    off = O.owned_arg_uses(engine, argv, kv_cache_dtype_owned=False)
    assert off == []
    assert [u.flag for u in on] == (["--kv-cache-dtype"] if owned_when_set else [])


@pytest.mark.parametrize(
    "name,on_vllm,on_sglang",
    [
        (vocab.ENV_MOONCAKE_CONFIG_PATH, True, False),
        (vocab.ENV_VLLM_MOONCAKE_BOOTSTRAP_PORT, True, False),
        (vocab.ENV_SGLANG_HICACHE_MOONCAKE_CONFIG_PATH, False, True),
        (vocab.ENV_MOONCAKE_MASTER, False, True),
        (vocab.ENV_MOONCAKE_TE_META_DATA_SERVER, False, True),
        (vocab.ENV_MOONCAKE_PROTOCOL, False, True),
        (vocab.ENV_MOONCAKE_DEVICE, False, True),
        (vocab.ENV_MOONCAKE_GLOBAL_SEGMENT_SIZE, False, True),
        (vocab.ENV_MOONCAKE_LOCAL_HOSTNAME, False, True),
        (vocab.ENV_MOONCAKE_TENANT_ID, False, True),
        (vocab.ENV_LEADER_ADDRESS, True, True),
        (vocab.ENV_REPLICA_SIZE, True, True),
        (vocab.ENV_MEMBER_INDEX, True, True),
        (vocab.ENV_MC_TE_METRIC, False, False),  # defaulted, never owned
        (vocab.ENV_MC_FORCE_TCP, False, False),
        (vocab.ENV_VLLM_API_KEY, False, False),
        ("MOONCAKE_SOMETHING_ELSE", False, False),  # a name prefix means nothing
        ("mooncake_master", False, False),  # env names are case-sensitive
    ],
)
def test_owned_env_per_engine(name, on_vllm, on_sglang):
    assert O.owned_env_uses(V, [name]) == ([name] if on_vllm else [])
    assert O.owned_env_uses(S, [name]) == ([name] if on_sglang else [])


def test_owned_env_uses_keeps_order():
    names = ["A", vocab.ENV_MEMBER_INDEX, "B", vocab.ENV_MOONCAKE_CONFIG_PATH]
    assert O.owned_env_uses(V, names) == [vocab.ENV_MEMBER_INDEX, vocab.ENV_MOONCAKE_CONFIG_PATH]


@pytest.mark.parametrize(
    "engine,argv,env,expected",
    [
        (V, ["m", "--api-key", "k"], [], [("argument", "--api-key", "--api-key", 1)]),
        (V, ["m", "--api_key=k"], [], [("argument", "--api-key", "--api_key", 1)]),
        (V, ["m", "--api-k", "k1", "k2"], [], [("argument", "--api-key", "--api-k", 1)]),
        (V, ["m"], [vocab.ENV_VLLM_API_KEY], [("env", "VLLM_API_KEY", "VLLM_API_KEY", None)]),
        (V, ["m", "--api", "k"], [], []),  # ambiguous with --api-server-count
        (S, ["--api-key", "k"], [], [("argument", "--api-key", "--api-key", 0)]),
        (S, ["--api", "k"], [], [("argument", "--api-key", "--api", 0)]),
        (S, ["--model-path", "m"], [vocab.ENV_VLLM_API_KEY], []),  # vLLM's variable
        (S, ["--admin-api-key", "k"], [], []),
    ],
)
def test_api_key_uses(engine, argv, env, expected):
    uses = O.api_key_uses(engine, argv, env)
    assert [(u.kind, u.name, u.spelling, u.index) for u in uses] == expected


# --- Property: an owned flag hidden among other flags is always found, in any spelling --------


def _owned_spellings(engine: str, flag: str) -> list[str]:
    flags = flags_for(engine)
    spellings = [flag]
    for cut in range(3, len(flag)):
        found = parse_argv(engine, [flag[:cut], "x"]).options
        if found and found[0].flag == flag:
            spellings.append(flag[:cut])
    if flags.underscores_to_dashes:
        spellings += ["--" + s[2:].replace("-", "_") for s in list(spellings)]
    return spellings


@pytest.mark.parametrize("engine", [V, S])
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_property_owned_flag_found_among_others(engine, data):
    flags = flags_for(engine)
    owned = sorted(O.owned_flags(engine, kv_cache_dtype_owned=True))
    flag = data.draw(st.sampled_from(owned))
    spelling = data.draw(st.sampled_from(_owned_spellings(engine, flag)))
    form = data.draw(st.sampled_from(["space", "equals"] + (["dotted"] if flags.dotted_members else [])))
    token = {"space": [spelling, "v"], "equals": [f"{spelling}=v"], "dotted": [f"{spelling}.k", "v"]}[form]
    others = sorted(o for o in flags.options - flags.no_value if flags.canonical(o) not in owned and o.startswith("--"))
    before = data.draw(st.lists(st.sampled_from(others), max_size=3))
    after = data.draw(st.lists(st.sampled_from(others), max_size=3))
    argv = ["m"]
    for o in before:
        argv += [o, "1"]
    position = len(argv)
    argv += token
    for o in after:
        argv += [o, "1"]
    uses = O.owned_arg_uses(engine, argv, kv_cache_dtype_owned=True)
    assert [(u.flag, u.index) for u in uses] == [(flag, position)]
