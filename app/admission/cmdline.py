"""The rules that read a role's command line and environment (docs/admission.md#the-rules, 12–15).

The command line is read the way the engine's own parser reads it (`app.engines.argv`): unique
prefixes, vLLM's `_`→`-` and dotted members, `=value`, synonyms such as `-tp`. Kubernetes expands
`$(NAME)` references in a container's command line from its environment, so a token is read after
that expansion (with the role's own `env`) — a flag cannot hide behind a variable.

Which line is read:
- a managed role (no `command`): `extraArgs`, appended after the operator's arguments;
- a take-over role: the engine's arguments inside `command` when they can be read
  (`vllm serve …`, `python -m sglang.launch_server …`); `extraArgs` beside a take-over command is
  inert — read by nobody, refused nothing — and a warning says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from app import vocab
from app.admission.model import Notice, Refusal, Subject, role_path
from app.api.v1 import Role
from app.engines import argv as engine_argv
from app.engines import degrees, owned, takeover
from app.engines.entry import HOST_FLAG, KV_CACHE_DTYPE_FLAG, WILDCARD_HOSTS
from app.engines.registry import engine_for, flags_for
from app.model.context import DeploymentContext, RenderOptions, build_context
from app.world import World

TAKE_OVER = "take over the command line with roles[].command"


@dataclass(frozen=True)
class RoleLine:
    """The engine arguments admission reads for one role, and how to name each token's field path."""

    args: list[str]
    field: str  # "extraArgs" or "command"
    offset: int | None  # index of args[0] inside that field; None when tokens cannot be mapped back

    def path(self, index: int, role_index: int) -> str:
        if self.offset is None:
            return role_path(role_index, self.field)
        return role_path(role_index, f"{self.field}[{index + self.offset}]")


def _env_map(role: Role) -> dict[str, str]:
    return {e.name: e.value or "" for e in role.env}


def role_line(engine: str, role: Role) -> RoleLine | None:
    """What the engine will read from the user for this role, or None when admission cannot read it."""
    env = _env_map(role)
    if role.managed:
        return RoleLine([engine_argv.expand_references(a, env) for a in role.extra_args], "extraArgs", 0)
    command = list(role.command or [])
    args = takeover.engine_args_of_command(engine, command)
    if args is None:
        return None
    offset = len(command) - len(args) if command[len(command) - len(args):] == args else None
    return RoleLine([engine_argv.expand_references(a, env) for a in args], "command", offset)


def _is_spelling_of(option: engine_argv.Option) -> str:
    """`--kv_transfer_config is --kv-transfer-config, which` / `--kv-transfer-config, which`."""
    if option.spelling == option.flag:
        return f"{option.flag}, which"
    return f"{option.spelling} is {option.flag}, which"


# --- rule 12: owned keys ----------------------------------------------------------------------


def owned_arguments(subject: Subject) -> list[Refusal]:
    """Rule 12 (arguments): an owned flag in a managed role's extraArgs, in any spelling the engine reads."""
    engine = subject.engine
    flags = owned.owned_flags(engine, kv_cache_dtype_owned=False)  # the conditional dtype is rule 13
    out: list[Refusal] = []
    for index, role in enumerate(subject.md.spec.roles):
        if not role.managed:
            continue  # extraArgs beside a take-over command is inert: refused nothing
        line = role_line(engine, role)
        if line is None:
            continue
        for use in owned.owned_arg_uses(engine, line.args, kv_cache_dtype_owned=False):
            shown = f"{use.flag}, which" if use.spelled_exactly else f"{use.spelling} is {use.flag}, which"
            out.append(Refusal(line.path(use.index, index), f"{shown} the operator owns on {engine}",
                               f"remove it, or {TAKE_OVER}"))
        # A prefix of several options is refused by the engine itself; when an owned flag is among
        # them, an engine version with fewer options would read it as that flag, so it is refused here.
        for amb in engine_argv.parse_argv(engine, line.args).ambiguous:
            hits = sorted({c for c in amb.candidates if _canonical(engine, c) in flags})
            if hits:
                shown = ", ".join(amb.candidates[:6]) + ("…" if len(amb.candidates) > 6 else "")
                out.append(Refusal(line.path(amb.index, index),
                                   f"{amb.token.partition('=')[0]} is an ambiguous prefix of {shown}, among them "
                                   f"{', '.join(hits)}, which the operator owns on {engine}; {engine} refuses an "
                                   "ambiguous option",
                                   f"spell the option you mean in full; an owned one cannot be set here — {TAKE_OVER}"))
    return out


def _canonical(engine: str, option_string: str) -> str:
    return flags_for(engine).canonical(option_string)


def owned_env(subject: Subject) -> list[Refusal]:
    """Rule 12 (environment): an owned variable name in a role's env.

    Managed roles: every name the engine's row owns, plus the replica variables. Take-over roles:
    the replica variables (rendered for every role above size 1) and MOONCAKE_TENANT_ID on the
    engines that own it (the reuse domain is a security property); the other cache variables are
    the take-over role's own, since the operator configures no cache client for it."""
    engine = subject.engine
    names = owned.owned_env_names(engine)
    out: list[Refusal] = []
    for index, role in enumerate(subject.md.spec.roles):
        for j, entry in enumerate(role.env):
            name = entry.name
            path = role_path(index, f"env[{j}].name")
            if name in vocab.REPLICA_ENV:
                out.append(Refusal(path, f"{name} is owned by the operator on every engine: it tells each Pod of an "
                                   "instance its leader, size and index above size 1, and is reserved at every size so "
                                   "that widening an instance later cannot turn an accepted deployment into a refused one",
                                   "remove it; read the value the operator sets inside the container"))
            elif name == vocab.ENV_MOONCAKE_TENANT_ID and name in names:
                out.append(Refusal(path, f"{name} is owned by the operator on {engine}: it carries the reuse domain of "
                                   "the deployment's KVCachePoolBinding, and a workload able to set it could write into "
                                   "another binding's domain",
                                   "remove it; the tenant comes from the binding named by spec.kvCache.poolRef — a "
                                   "namespace needing another reuse boundary asks its administrator for another binding"))
            elif role.managed and name in names:
                out.append(Refusal(path, f"{name} is owned by the operator on {engine}",
                                   f"remove it, or {TAKE_OVER}"))
    return out


# --- rule 23: the Pod's contract with its probes and Services --------------------------------


def _contract_problem(engine: str, option: engine_argv.Option) -> str | None:
    """Why an option breaks the Pod's contract (the entry's `contract_flags`), or None: `--host` is
    fine on a wildcard address."""
    why = engine_for(engine).contract_flags.get(option.flag)
    if why is None:
        return None
    if option.flag == HOST_FLAG and option.value is not None and option.value.strip() in WILDCARD_HOSTS:
        return None
    shown = f"{option.spelling} {option.value}" if option.value is not None else option.spelling
    named = shown if option.spelling == option.flag else f"{shown} (read as {option.flag})"
    return f"{named}: {why}"


def contract_arguments(subject: Subject) -> list[Refusal]:
    """Rule 23: an option that breaks the Pod's contract with its probes and Services (listening on
    loopback or a Unix socket, TLS on the served port), in any spelling the engine reads (prefixes,
    `_`, `=value`, `$(VAR)`), in extraArgs or a readable take-over command: such a Pod runs, and never
    becomes Ready or reachable."""
    engine = subject.engine
    out: list[Refusal] = []
    for index, role in enumerate(subject.md.spec.roles):
        line = role_line(engine, role)
        if line is None:
            continue
        for option in engine_argv.parse_argv(engine, line.args).options:
            problem = _contract_problem(engine, option)
            if problem is not None:
                out.append(Refusal(line.path(option.index, index), problem,
                                   "remove it: the operator renders the listener (every interface, plain HTTP, the "
                                   "declared port); terminate TLS at the gateway in front of the router"))
    return out


def model_name_flag(subject: Subject) -> list[Refusal]:
    """Rule 24: spec.model.name starting with '-': the operator places it on the command line right after
    `vllm serve` (and after SGLang's --model-path), where the engine's parser would read it as an
    option — a way to pass an owned flag past rule 12."""
    name = subject.md.spec.model.name
    if not name or not name.lstrip().startswith("-"):
        return []
    return [Refusal("spec.model.name", f"{name[:60]!r} starts with '-': the engine's parser would read it as an option "
                    "(the model goes on the command line), not as a model",
                    "name the model itself (a Hugging Face id such as Qwen/Qwen2.5-7B-Instruct, or a path); options go "
                    "in roles[].extraArgs")]


# --- rule 13: --kv-cache-dtype ----------------------------------------------------------------

KV_CACHE_DTYPE = KV_CACHE_DTYPE_FLAG


def _carries_dtype(engine: str, role: Role | None) -> bool:
    if role is None or not role.managed:
        return False
    line = role_line(engine, role)
    return line is not None and bool(engine_argv.parse_argv(engine, line.args).of(KV_CACHE_DTYPE))


def kv_cache_dtype(subject: Subject) -> list[Refusal]:
    """Rule 13: --kv-cache-dtype in a managed role's extraArgs while spec.kvCache is set and the setting is on.

    A stored object that already carried the flag keeps running on its own value (it comes later on
    the command line and wins); its next update is refused until the flag is removed — except the
    update made while it is being deleted (the one that clears its finalizer)."""
    md = subject.md
    if md.spec.kv_cache is None or not subject.kv_cache_dtype_owned:
        return []
    engine = subject.engine
    binding_name = md.spec.kv_cache.pool_ref.name
    dtype = None
    if subject.world is not None:
        binding = subject.world.binding(md.metadata.namespace, binding_name)
        dtype = binding.spec.domain.dtype if binding is not None else None
    rendered = (f"the dtype of KVCachePoolBinding {binding_name!r} ({dtype})" if dtype
                else f"the dtype of KVCachePoolBinding {binding_name!r}")
    out: list[Refusal] = []
    for index, role in enumerate(md.spec.roles):
        if not role.managed:
            continue
        line = role_line(engine, role)
        if line is None:
            continue
        found = engine_argv.parse_argv(engine, line.args).of(KV_CACHE_DTYPE)
        if not found:
            continue
        stored = _carries_dtype(engine, subject.old_role(role.name))
        if stored and subject.deleting:
            continue  # grandfathered: the update that clears the finalizer on deletion
        for option in found:
            problem = (f"{_is_spelling_of(option)} the operator owns on {engine} while spec.kvCache is set: it "
                       f"renders {rendered} there, because cache blocks must be written in the binding's dtype")
            if stored:
                problem += ("; the stored deployment carries it and keeps running on its own value, but every update "
                            "is refused until it is removed")
            out.append(Refusal(line.path(option.index, index), problem,
                               "remove it; to serve another dtype, use a KVCachePoolBinding whose domain has that dtype "
                               f"(spec.kvCache is frozen: that is another deployment), or {TAKE_OVER}"))
    return out


# --- rule 14: ports ---------------------------------------------------------------------------


def _context(subject: Subject) -> DeploymentContext:
    return build_context(subject.md, subject.world or World(),
                         RenderOptions(kv_cache_dtype_owned=subject.kv_cache_dtype_owned))


def _reserved_ports(subject: Subject, role: Role) -> dict[int, str]:
    ctx = _context(subject)
    reserved: dict[int, str] = {}
    if engine_for(subject.engine).kv_events_rendered(ctx, role):
        reason = "the KV-event {} port the operator declares on a routed vLLM role that produces cache blocks"
        reserved[vocab.KV_EVENTS_PORT] = reason.format("publisher")
        reserved[vocab.KV_EVENTS_REPLAY_PORT] = reason.format("replay")
    pair = {vocab.ROLE_KIND_PREFILL, vocab.ROLE_KIND_DECODE} <= ctx.kinds
    if (role.managed and role.kind == vocab.ROLE_KIND_PREFILL and pair
            and (subject.md.spec.router is not None or subject.md.spec.kv_cache is not None)):
        reserved[vocab.PREFILL_BOOTSTRAP_PORT] = "the prefiller's bootstrap port in a routed or cached prefill/decode pair"
    return reserved


def ports(subject: Subject) -> list[Refusal]:
    """Rule 14: a --port other than the first declared port; a reserved port declared or passed.

    Behind a routed vLLM decoder's routing proxy the rule turns around: the proxy owns the external
    port (the first declared, else 8000) and the engine's own --port is the internal one, so that
    --port must differ from the external port (and a declared port must not be the internal one)."""
    engine = subject.engine
    ctx = _context(subject)
    out: list[Refusal] = []
    for index, role in enumerate(subject.md.spec.roles):
        reserved = _reserved_ports(subject, role)
        proxied = engine_for(engine).routing_proxy_rendered(ctx, role)
        external = role.ports[0].port if role.ports else vocab.DEFAULT_SERVING_PORT
        line = role_line(engine, role)
        reading = engine_argv.read_port(engine, line.args) if line is not None else engine_argv.PortReading(None)
        if proxied and reading.port is None and reading.problem is None:
            reserved.setdefault(vocab.ROUTING_PROXY_ENGINE_PORT,
                                "the port vLLM listens on behind the routing proxy of a routed decoder")
        for j, declared in enumerate(role.ports):
            if declared.port in reserved:
                out.append(Refusal(role_path(index, f"ports[{j}].port"), f"{declared.port} is reserved: "
                                   f"{reserved[declared.port]}", "declare another port"))
        if line is None or (reading.port is None and reading.problem is None):
            continue
        path = line.path(reading.index or 0, index)
        if reading.problem is not None:
            out.append(Refusal(path, reading.problem,
                               "pass a port number in 1..65535, or leave --port out (the role listens on its first "
                               "declared port, else 8000)"))
            continue
        shown = f"{reading.spelling} {reading.raw}"
        if proxied:
            if reading.port == external:
                out.append(Refusal(path, f"{shown}: on a routed vLLM decoder the routing proxy owns the external port "
                                   f"{external} and vLLM listens behind it, so the engine cannot take {external} too",
                                   f"pass another --port for the engine (the operator's default is "
                                   f"{vocab.ROUTING_PROXY_ENGINE_PORT}), or leave --port out"))
        elif role.ports and reading.port != role.ports[0].port:
            out.append(Refusal(path, f"{shown} tells the engine to listen on {reading.port}, but "
                               f"{role_path(index, 'ports[0].port')} declares {role.ports[0].port}",
                               "make the two agree, or keep one: without ports the container, probes and Service "
                               "target follow --port; without --port the operator passes the declared port"))
        if reading.port in reserved and not any(p.port == reading.port for p in role.ports):
            out.append(Refusal(path, f"{shown}: {reading.port} is reserved: {reserved[reading.port]}",
                               "listen on another port"))
    return out


# --- rule 15: parallel degrees ----------------------------------------------------------------


def _cards_per_pod(subject: Subject, role: Role) -> int | None:
    """Cards each Pod of the role gets, or None when that is not a number of cards (CPU, unknown type)."""
    from app import quantity

    res = role.resources
    sliced = bool(res.accelerator_sliced_memory_percentage or res.accelerator_sliced_cores_percentage)
    if res.accelerator is not None:
        try:
            cards = quantity.whole(res.accelerator)
        except quantity.QuantityError:
            return None
        if cards is None or cards < 0 or quantity.multiplier(res.accelerator) is not None:
            return None
        if subject.world is not None:
            it = subject.world.instance_types.get(role.instance_type)
            if it is not None and not it.spec.acceleratable:
                return None
        return 1 if (sliced or res.accelerator_partitioned_profile) and cards >= 1 else cards
    if subject.world is None:
        return None
    it = subject.world.instance_types.get(role.instance_type)
    if it is None or not it.spec.acceleratable:
        return None
    return 1  # the mutating webhook's default


def parallel_degrees(subject: Subject) -> list[Refusal]:
    """Rule 15: a known degree flag with no, a non-integer or an out-of-range value; a declared
    width above the cards each Pod gets."""
    engine = subject.engine
    out: list[Refusal] = []
    table = engine_for(engine).degree_flags
    for index, role in enumerate(subject.md.spec.roles):
        line = role_line(engine, role)
        if line is None:
            continue
        env = _env_map(role)
        reading = degrees.read_degrees(engine, line.args, env)
        for problem in reading.problems:
            if problem.index is None:
                j = next((k for k, e in enumerate(role.env) if e.name == problem.flag), None)
                path = role_path(index, f"env[{j}].value") if j is not None else role_path(index, "env")
            else:
                path = line.path(problem.index, index)
            out.append(Refusal(path, problem.message, "give the degree a whole number of at least 1, or leave it out"))
        if reading.problems:
            continue
        parsed = engine_argv.parse_argv(engine, line.args)
        declared = [o for o in parsed.options if o.flag in table or o.flag == "--enable-expert-parallel"]
        dp_env = engine_for(engine).data_parallel_env
        if not declared and not (dp_env is not None and dp_env in env):
            continue
        cards = _cards_per_pod(subject, role)
        if cards is None:
            continue
        width = degrees.declared_width(reading.degrees, pods=role.size)
        if width > cards:
            d = reading.degrees
            parts = [f"tensor {d.tensor}", f"pipeline {d.pipeline}", f"data {d.data}"]
            if d.data_local is not None:
                parts.append(f"data-local {d.data_local}")
            if d.nnodes > 1:
                parts.append(f"nnodes {d.nnodes}")
            out.append(Refusal(
                role_path(index, line.field),
                f"the command line declares a width of {width} card(s) per Pod ({', '.join(parts)}; size "
                f"{role.size}), above the {cards} card(s) each Pod of role {role.name!r} gets "
                f"({role_path(index, 'resources.accelerator')})",
                "lower the degrees, or spread the instance over more Pods with a larger size (resources and size are "
                "frozen: that is another deployment)",
            ))
    return out


# --- warnings ---------------------------------------------------------------------------------


def idle_cards_notices(subject: Subject) -> list[Notice]:
    """A warning (docs/admission.md#the-rules): a declared width (tp×pp×dp-local…, 1 when no degree is passed) below the
    cards each Pod gets leaves cards idle. Rule 15 refuses the opposite; an unreadable line says nothing."""
    engine = subject.engine
    out: list[Notice] = []
    for index, role in enumerate(subject.md.spec.roles):
        line = role_line(engine, role)
        if line is None:
            continue
        reading = degrees.read_degrees(engine, line.args, _env_map(role))
        if reading.problems or engine_argv.parse_argv(engine, line.args).config_file:
            continue
        cards = _cards_per_pod(subject, role)
        if cards is None:
            continue
        width = degrees.declared_width(reading.degrees, pods=role.size)
        if width < cards:
            flag = engine_for(engine).tensor_flag
            out.append(Notice(
                role_path(index, line.field),
                f"the engine's declared width is {width} card(s) per Pod, below the {cards} card(s) each Pod of role "
                f"{role.name!r} gets: {cards - width} card(s) idle; pass the degrees (e.g. {flag} {cards}) or request "
                f"{width} card(s)"))
    return out


API_KEY_WARNING = ("guards the engine's /v1 routes: probes and gates reading /v1 (a decode role's /v1/models) get "
                   "401, so a disaggregated pair's decoder never becomes Ready; north-south auth belongs at the gateway")


def api_key_notices(subject: Subject) -> list[Notice]:
    """--api-key / VLLM_API_KEY are not owned: accepted, with a warning."""
    engine = subject.engine
    out: list[Notice] = []
    for index, role in enumerate(subject.md.spec.roles):
        line = role_line(engine, role)
        env_names = [e.name for e in role.env]
        for use in owned.api_key_uses(engine, line.args if line is not None else [], env_names):
            if use.kind == "env":
                path = role_path(index, f"env[{env_names.index(use.name)}].name")
            else:
                path = line.path(use.index or 0, index) if line is not None else role_path(index)
            out.append(Notice(path, f"{use.spelling} {API_KEY_WARNING}"))
    return out


def inert_extra_args_notices(subject: Subject) -> list[Notice]:
    out: list[Notice] = []
    for index, role in enumerate(subject.md.spec.roles):
        if not role.managed and role.extra_args:
            out.append(Notice(role_path(index, "extraArgs"), "is inert beside roles[].command: read by nobody, refused "
                              "nothing, and not read for parallelism; put the arguments in the command"))
        elif role.managed:
            line = role_line(subject.engine, role)
            if line is not None and engine_argv.parse_argv(subject.engine, line.args).config_file:
                out.append(Notice(role_path(index, "extraArgs"), "--config reads options from a file admission "
                                  "cannot see: an operator-owned key in it is not refused, and conflicts at start"))
    return out
