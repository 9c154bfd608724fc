"""Pods the cluster stores but can never run (docs/admission.md#the-rules, rules 25-27). Pure.

A ModelDeployment is stored as written, and its Pods are created later by the sync hook; what the
API server or the kubelet refuses there surfaces as a Pod that never appears or never starts, long
after `kubectl apply` said `created`. So admission refuses it up front:

- an env name the API server refuses in a Pod (Kubernetes 1.34+, RelaxedEnvironmentVariableValidation
  GA: non-empty, printable ASCII, no '=') — the sync hook's Pod create would fail on every pass;
- an argument or env entry the kernel refuses to exec (a single string above MAX_ARG_STRLEN,
  128 KiB, or holding a NUL byte): the container is created and fails to start, forever;
- an object above what etcd stores (1.5 MiB, the API server's default `--max-request-bytes`
  of etcd), and a role whose own env, arguments and volumes leave no room in its Pods for what the
  operator adds.
"""

from __future__ import annotations

import json
from typing import Any

from app.admission.model import Refusal, Subject, role_path

# The kernel's limit on one argv or envp string, NUL included (MAX_ARG_STRLEN = 32 pages of 4 KiB).
MAX_ARG_BYTES = 128 * 1024
# etcd's default request limit (--max-request-bytes, 1.5 MiB): an object above it is never stored.
MAX_OBJECT_BYTES = 1536 * 1024
# What one role may put into each of its Pods (env, arguments, command, volumes), leaving the rest
# of etcd's limit to the operator's own fields and metadata.
MAX_ROLE_BYTES = 1024 * 1024
ENV_NAME_RULE = "a non-empty string of printable ASCII characters other than '='"


def _size(value: Any) -> int:
    """Bytes as stored. A lone surrogate (which no API server sends: Go's decoder writes U+FFFD in
    its place) counts as three bytes, as that replacement does, rather than failing the review."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass"))


def env_name_problem(name: str) -> str | None:
    """Why the API server refuses `name` as a container env name (IsRelaxedEnvVarName), or None."""
    if not name:
        return "is empty"
    bad = next((c for c in name if not " " <= c <= "~" or c == "="), None)
    if bad is None:
        return None
    return f"holds {bad!r}" if bad == "=" else f"holds the character U+{ord(bad):04X}, which is not printable ASCII"


def env_names(subject: Subject) -> list[Refusal]:
    """Rule 25: every roles[].env[].name is an env name the API server takes in a Pod."""
    out: list[Refusal] = []
    for index, role in enumerate(subject.md.spec.roles):
        for j, env in enumerate(role.env):
            problem = env_name_problem(env.name)
            if problem is not None:
                out.append(Refusal(role_path(index, f"env[{j}].name"), f"{json.dumps(env.name)[:60]} {problem}: the API "
                                   f"server refuses such a Pod (an env name is {ENV_NAME_RULE}), so no Pod of the role "
                                   "is ever created", "rename the variable, e.g. with '_' in place of the character"))
    return out


def _string_problem(text: str, what: str) -> str | None:
    size = len(text.encode("utf-8", "surrogatepass")) + 1
    if size > MAX_ARG_BYTES:
        return (f"{what} is {size - 1:,} bytes, above the {MAX_ARG_BYTES // 1024} KiB the kernel takes in one argument "
                "or variable (MAX_ARG_STRLEN): the container can never start")
    if "\x00" in text:
        return f"{what} holds a NUL byte, which no argument or variable can carry: the container can never start"
    return None


def exec_strings(subject: Subject) -> list[Refusal]:
    """Rule 26: each argument (extraArgs, command) and each `NAME=value` env entry fits the kernel's
    per-string limit and holds no NUL."""
    out: list[Refusal] = []
    remedy = "pass large content as a file (a volume: ConfigMap, Secret, or the model's directory)"
    for index, role in enumerate(subject.md.spec.roles):
        for field, tokens in (("command", role.command or []), ("extraArgs", role.extra_args)):
            for j, token in enumerate(tokens):
                problem = _string_problem(token, "the argument")
                if problem is not None:
                    out.append(Refusal(role_path(index, f"{field}[{j}]"), problem, remedy))
        for j, env in enumerate(role.env):
            problem = _string_problem(f"{env.name}={env.value or ''}", "the variable")
            if problem is not None:
                out.append(Refusal(role_path(index, f"env[{j}].value"), problem, remedy))
    return out


def _role_share(role: dict[str, Any]) -> int:
    return sum(_size(role.get(field)) for field in ("env", "extraArgs", "command", "additionalVolumes") if role.get(field))


def object_size(subject: Subject) -> list[Refusal]:
    """Rule 27: the object within etcd's 1.5 MiB, and each role's share of its Pods within 1 MiB."""
    out: list[Refusal] = []
    total = _size(subject.raw)
    if total > MAX_OBJECT_BYTES:
        out.append(Refusal("object", f"the ModelDeployment is {total:,} bytes as JSON, above the {MAX_OBJECT_BYTES:,} "
                           "(1.5 MiB) etcd stores in one object", "move large values out of the object (a ConfigMap or "
                           "Secret mounted as a volume), or split the deployment"))
    roles = (subject.raw.get("spec") or {}).get("roles")
    for index, role in enumerate(roles if isinstance(roles, list) else []):
        share = _role_share(role) if isinstance(role, dict) else 0
        if share > MAX_ROLE_BYTES:
            out.append(Refusal(role_path(index), f"the role's env, arguments and volumes take {share:,} bytes in each of "
                               f"its Pods, above the {MAX_ROLE_BYTES:,} (1 MiB) that leaves room for the operator's own "
                               "fields under etcd's 1.5 MiB per Pod", "move large values into a ConfigMap or Secret "
                               "mounted as a volume (or envFrom)"))
    return out
