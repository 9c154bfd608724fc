"""The CLI under bad input: no file, flag or setting makes a subcommand print a traceback.

Each broken file of tests/data/broken/ (the mistakes people really make writing a
ModelDeployment) goes through `validate` and `render`: both exit non-zero (1 for a refusal, 2 for a
file that cannot be read), name the right field, echo what was wrong and give the fix; `render`
refuses exactly what `validate` refuses and prints no object. Then the files and flags themselves
(a missing -f, an unreadable world, a port in use), and `serve`'s help.
"""

from __future__ import annotations

import io
import os
import re
import socket
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import pytest

from app import cli
from app.admission import files
from app.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
BROKEN = ROOT / "tests" / "data" / "broken"
EXAMPLE = ROOT / "examples" / "deployments" / "qwen-chat.yaml"


@dataclass(frozen=True)
class Printed:
    code: int
    stdout: str
    stderr: str

    @property
    def text(self) -> str:
        return self.stdout + self.stderr


def run(*argv: str) -> Printed:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = cli.main(list(argv))
        except SystemExit as exc:  # argparse's own usage errors
            code = int(exc.code or 0)
    return Printed(code, out.getvalue(), err.getvalue())


@dataclass(frozen=True)
class Broken:
    file: str
    code: int  # 1: refused; 2: the file cannot be read
    field: str  # the field (or file position) the message names
    says: tuple[str, ...]  # what is wrong and the fix, in the message's words
    never: tuple[str, ...] = ()


BROKEN_FILES = [
    Broken("typo-replica", 1, "spec.roles[0].replica", ("unknown field 'replica'", "rename it to 'replicas'")),
    Broken("engine-lowercase", 1, "spec.engine.name", ("'vllm' is not one of", "did you mean 'vLLM'", "set name: vLLM")),
    Broken("replicas-word", 1, "spec.roles[0].replicas", ("'two' is not a whole number", "from 0 to 1024")),
    Broken("replicas-quoted", 1, "spec.roles[0].replicas", ("'2' is a string", "without quotes: replicas: 2")),
    Broken("replicas-negative", 1, "spec.roles[0].replicas", ("-1 is below the minimum of 0", "from 0 to 1024")),
    Broken("size-zero", 1, "spec.roles[0].size", ("0 is below the minimum of 1", "from 1 to 64")),
    Broken("no-instance-type", 1, "spec.roles[0].instanceType", ("required and missing", "add instanceType:")),
    Broken("no-model", 1, "spec.model", ("required and missing", "add model: {name:")),
    Broken("version-float", 1, "spec.engine.version", ("0.33 is a number", 'quote it: version: "0.33"'),
           never=("is empty", "valid string")),
    Broken("name-underscore", 1, "metadata.name", ("'Qwen_Chat'", "DNS-1123 subdomain", "name: qwen-chat"),
           never=("spec.roles[0].name", "shorter role name")),
    Broken("engine-string", 1, "spec.engine", ("'vLLM' is a string", "engine: {name: vLLM}")),
    Broken("model-string", 1, "spec.model", ("is a string", "model: {name: Qwen/Qwen2.5-14B-Instruct}")),
    Broken("roles-mapping", 1, "spec.roles", ("is a mapping, and the field is a list", "'- '")),
    Broken("extra-args-string", 1, "spec.roles[0].extraArgs", ("'-tp 2' is a string", 'extraArgs: ["-tp", "2"]'),
           never=("idle",)),
    Broken("accelerator-word", 1, "spec.roles[0].resources.accelerator", ("'two' is not a Kubernetes quantity",
                                                                         "accelerator: 1")),
    Broken("role-kind-lowercase", 1, "spec.roles[0].kind", ("'prefill'", "did you mean 'Prefill'", "set kind: Prefill")),
    Broken("privileged-quoted", 1, "spec.roles[0].privileged", ("'true' is a string", "privileged: true")),
    Broken("port-quoted", 1, "spec.roles[0].ports[0].port", ("'8000' is a string", "port: 8000")),
    Broken("env-number", 1, "spec.roles[0].env[0].value", ("1 is a whole number", 'quote it: value: "1"')),
    Broken("label-number", 1, "metadata.labels.tier", ("label values are strings", 'tier: "1"')),
    Broken("role-name-capital", 1, "spec.roles[0].name", ("'Server' is not a DNS-1123 label", "name: server")),
    Broken("router-name", 1, "spec.router.name", ("'llm-d' is not one of", "set name: llm-d-router")),
    Broken("no-roles", 1, "spec.roles", ("holds 0 item(s)", "at least 1")),
    Broken("kind-typo", 1, "kind", ("'ModelDeploymnet'", "set kind: ModelDeployment")),
    Broken("api-version-old", 1, "apiVersion", ("worker.gpustack.ai/v1alpha1", "set apiVersion: worker.gpustack.ai/v1")),
    Broken("unknown-instance-type", 1, "spec.roles[0].instanceType", ("'nvidia-a10g' does not exist",)),
    Broken("tensor-parallel-word", 1, "spec.roles[0].extraArgs[0]", ("--tensor-parallel-size must be a whole number",
                                                                    "'two'")),
    Broken("two-prefill", 1, "spec.roles[1].kind", ("second Prefill role", "declare one Prefill role")),
    Broken("yaml-tab", 2, "yaml-tab.yaml:15:1", ("not valid YAML", "tab", "spaces")),
    Broken("yaml-colon", 2, "yaml-colon.yaml:9:15", ("not valid YAML", "quote")),
    Broken("not-a-deployment", 2, "not-a-deployment.yaml", ("holds no ModelDeployment", "apiVersion: worker.gpustack.ai/v1")),
    Broken("empty", 2, "empty.yaml", ("holds no ModelDeployment",)),
]


def test_every_broken_file_has_a_row_and_the_table_is_large() -> None:
    on_disk = {p.stem for p in BROKEN.glob("*.yaml")}
    assert on_disk == {b.file for b in BROKEN_FILES}
    assert len(BROKEN_FILES) >= 25


def _check(printed: Printed, case: Broken) -> None:
    assert printed.code == case.code, printed.text
    assert "Traceback" not in printed.text and "internal error" not in printed.text, printed.text
    # The fix is in the message: no pointer at `kubectl explain`, which needs a cluster.
    assert "kubectl explain" not in printed.text, printed.text
    assert case.field in printed.text, printed.text
    for words in case.says:
        assert words in printed.text, (words, printed.text)
    for words in case.never:
        assert words not in printed.text, (words, printed.text)


@pytest.mark.parametrize("case", BROKEN_FILES, ids=[b.file for b in BROKEN_FILES])
def test_validate_names_the_field_the_problem_and_the_fix(case: Broken) -> None:
    printed = run("validate", "-f", str(BROKEN / f"{case.file}.yaml"))
    _check(printed, case)
    if case.code == 1:
        # The field leads its own line: `<field>: <problem> — <fix>`.
        assert re.search(rf"^{re.escape(case.field)}: .+ — .+", printed.stdout, re.MULTILINE), printed.stdout


@pytest.mark.parametrize("case", BROKEN_FILES, ids=[b.file for b in BROKEN_FILES])
def test_render_refuses_what_validate_refuses_and_prints_no_object(case: Broken) -> None:
    printed = run("render", "-f", str(BROKEN / f"{case.file}.yaml"))
    _check(printed, case)
    assert printed.stdout == ""
    if case.code == 1:
        assert "refused, so not rendered" in printed.stderr and "modeldeployment validate -f" in printed.stderr


def test_render_and_validate_agree_on_an_example() -> None:
    assert run("validate", "-f", str(EXAMPLE)).code == 0
    printed = run("render", "-q", "--objects-only", "-f", str(EXAMPLE))
    assert printed.code == 0 and "kind: Pod" in printed.stdout


# --- files and flags ---------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["render", "validate"])
def test_a_missing_file_is_one_line_naming_the_flag(command: str, tmp_path: Path) -> None:
    printed = run(command, "-f", str(tmp_path / "nope.yaml"))
    assert printed.code == 2 and printed.stderr.count("\n") == 1, printed.stderr
    assert printed.stderr.startswith(f"error: -f {tmp_path / 'nope.yaml'}: no such file")


@pytest.mark.parametrize("command", ["render", "validate"])
def test_a_missing_world_names_the_world_flag(command: str, tmp_path: Path) -> None:
    printed = run(command, "-f", str(EXAMPLE), "--world", str(tmp_path / "absent"))
    assert printed.code == 2 and "error: --world" in printed.stderr and "InstanceTypes" in printed.stderr


@pytest.mark.parametrize("command", ["render", "validate"])
def test_an_unreadable_world_directory_is_an_error_not_an_empty_world(command: str, tmp_path: Path) -> None:
    # The suite may run as root, whom a chmod does not stop: the listing fails as it would for anyone else.
    world = tmp_path / "world"
    (world / "sub").mkdir(parents=True)

    def walk(top, onerror=None, **kwargs):
        onerror(PermissionError(13, "Permission denied", str(world / "sub")))
        return iter(())

    with mock.patch.object(files.os, "walk", walk):
        printed = run(command, "-f", str(EXAMPLE), "--world", str(world))
    assert printed.code == 2 and f"error: --world {world / 'sub'}: permission denied" in printed.stderr


def test_a_world_with_broken_yaml_names_its_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "types.yaml").write_text("kind: InstanceType\nmetadata: {name: a\n")
    printed = run("render", "-f", str(EXAMPLE), "--world", str(tmp_path))
    assert printed.code == 2 and f"--world {tmp_path / 'types.yaml'}:" in printed.stderr, printed.stderr


def test_a_broken_old_object_names_the_old_flag() -> None:
    printed = run("validate", "-f", str(EXAMPLE), "--old", str(BROKEN / "yaml-tab.yaml"))
    assert printed.code == 2 and "error: --old " in printed.stderr


def test_crds_into_a_path_that_is_not_a_directory(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    printed = run("crds", "--out", str(tmp_path / "file" / "crds"))
    assert printed.code == 2 and printed.stderr.startswith("error: --out ") and "Traceback" not in printed.text


def test_a_setting_that_does_not_parse_names_its_variable() -> None:
    with mock.patch.dict(os.environ, {"MODELDEPLOYMENT_HOOKS_PORT": "eighty"}):
        printed = run("validate", "-f", str(EXAMPLE))
    assert printed.code == 2 and "MODELDEPLOYMENT_HOOKS_PORT='eighty'" in printed.stderr
    with mock.patch.dict(os.environ, {"MODELDEPLOYMENT_LOG_LEVEL": "LOUD"}):
        printed = run("validate", "-f", str(EXAMPLE))
    assert printed.code == 2 and "MODELDEPLOYMENT_LOG_LEVEL" in printed.stderr and "Traceback" not in printed.text


def test_an_unexpected_failure_is_one_line_not_a_traceback() -> None:
    with mock.patch.object(cli, "cmd_crds", side_effect=RuntimeError("boom")):
        printed = run("crds", "--out", "/nonexistent")
    assert printed.code == cli.EXIT_INTERNAL and "internal error" in printed.stderr and "boom" in printed.stderr
    assert "Traceback" not in printed.text


# --- serve ---------------------------------------------------------------------------------------


def test_serve_help_names_every_listener_flag_with_its_default_and_variable() -> None:
    printed = run("serve", "--help")
    text = " ".join(printed.stdout.split())
    assert printed.code == 0
    for flag, variable, default in [("--host", "MODELDEPLOYMENT_HOST", "127.0.0.1"),
                                    ("--port", "MODELDEPLOYMENT_PORT", "8443"),
                                    ("--hooks-port", "MODELDEPLOYMENT_HOOKS_PORT", "8081"),
                                    ("--tls-cert", "MODELDEPLOYMENT_TLS_CERT_FILE", "none"),
                                    ("--tls-key", "MODELDEPLOYMENT_TLS_KEY_FILE", "none")]:
        assert flag in text and f"[{variable}; default {default}" in text.replace("default: ", "default "), flag


def test_the_local_defaults_keep_off_kubectls_fallback_port() -> None:
    # kubectl without a kubeconfig talks to localhost:8080: the README's `render | kubectl apply
    # --dry-run=server` must never reach the operator there.
    defaults = Settings.model_fields
    assert 8080 not in (defaults["port"].default, defaults["hooks_port"].default)
    assert defaults["port"].default != defaults["hooks_port"].default


def _serve(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELDEPLOYMENT_")}
    env["MODELDEPLOYMENT_KUBE"] = "off"
    return subprocess.run([sys.executable, "-m", "app.cli", "serve", "--world", str(ROOT / "examples" / "world"),
                           *argv], capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)


@pytest.mark.parametrize("taken", ["--port", "--hooks-port"])
def test_a_port_in_use_is_one_line_naming_it_and_nothing_starts(taken: str) -> None:
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    busy = holder.getsockname()[1]
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    other = free.getsockname()[1]
    free.close()
    ports = {"--port": busy, "--hooks-port": other} if taken == "--port" else {"--port": other, "--hooks-port": busy}
    try:
        done = _serve("--port", str(ports["--port"]), "--hooks-port", str(ports["--hooks-port"]))
    finally:
        holder.close()
    variable = "MODELDEPLOYMENT_PORT" if taken == "--port" else "MODELDEPLOYMENT_HOOKS_PORT"
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().count("\n") == 0, done.stderr  # one line, nothing started before it
    assert f"port {busy} on 127.0.0.1 is already in use ({taken}, {variable})" in done.stderr
    assert "Uvicorn running" not in done.stderr and "Traceback" not in done.stderr


def test_serve_refuses_a_certificate_without_its_key_and_one_port_for_both() -> None:
    printed = run("serve", "--tls-cert", str(EXAMPLE))
    assert printed.code == 2 and "--tls-key is missing" in printed.stderr
    printed = run("serve", "--port", "9443", "--hooks-port", "9443")
    assert printed.code == 2 and "both 9443" in printed.stderr and "--hooks-port 0" in printed.stderr


def _flag(argv: list[str], flag: str) -> int:
    return int(argv[argv.index(flag) + 1])


def test_every_shipped_serve_command_passes_ports_that_agree() -> None:
    """The image, the manifests and the chart serve webhooks on 8443 and hooks on 8080 (in a Pod, off
    any user's kubectl); compose runs serve's local defaults; each health check reaches a listener."""
    import json as jsonlib

    import yaml

    dockerfile = (ROOT / "Dockerfile").read_text()
    cmd = jsonlib.loads(re.search(r"^CMD (\[.*\])$", dockerfile, re.MULTILINE).group(1))
    deployment = yaml.safe_load((ROOT / "manifests" / "operator" / "deployment.yaml").read_text())
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    chart = yaml.safe_load((ROOT / "charts" / "modeldeployment" / "values.yaml").read_text())["ports"]
    for argv in (cmd, args):
        assert (_flag(argv, "--port"), _flag(argv, "--hooks-port")) == (chart["webhook"], chart["hooks"])
    health = re.search(r"http://127\.0\.0\.1:(\d+)/healthz", dockerfile)
    assert health and int(health.group(1)) == _flag(cmd, "--hooks-port")  # plain HTTP, with or without TLS
    assert re.search(rf"^EXPOSE {_flag(cmd, '--port')} {_flag(cmd, '--hooks-port')}$", dockerfile, re.MULTILINE)
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]["operator"]
    defaults = Settings.model_fields
    assert (_flag(compose["command"], "--port"), _flag(compose["command"], "--hooks-port")) == \
        (defaults["port"].default, defaults["hooks_port"].default)
    assert compose["ports"] == [f"{p}:{p}" for p in (defaults["port"].default, defaults["hooks_port"].default)]
    assert "--port" not in (ROOT / "scripts" / "serve.sh").read_text().split("exec", 1)[1]  # serve's defaults


def test_serve_refuses_a_world_or_a_certificate_it_cannot_read(tmp_path: Path) -> None:
    printed = run("serve", "--world", str(tmp_path / "absent"))
    assert printed.code == 2 and printed.stderr.startswith(f"error: --world {tmp_path / 'absent'}: no such file")
    with mock.patch.dict(os.environ, {"MODELDEPLOYMENT_WORLD_DIR": str(tmp_path / "absent")}):
        printed = run("serve")
    assert printed.code == 2 and "MODELDEPLOYMENT_WORLD_DIR" in printed.stderr
    (tmp_path / "tls.crt").write_text("not a certificate")
    (tmp_path / "tls.key").write_text("not a key")
    printed = run("serve", "--port", "0", "--hooks-port", "0", "--tls-cert", str(tmp_path / "tls.crt"),
                  "--tls-key", str(tmp_path / "tls.key"))
    assert printed.code == 2 and "the pair does not load" in printed.stderr and "Traceback" not in printed.text


def test_render_of_a_scaler_file_says_what_checks_it() -> None:
    scaler = ROOT / "examples" / "autoscaling" / "pd-scaler.yaml"
    printed = run("render", "-f", str(scaler))
    assert printed.code == 2 and "ModelDeploymentScalers only" in printed.stderr and "validate -f" in printed.stderr
    assert "kind:" not in printed.text  # never judged as a misspelt ModelDeployment
