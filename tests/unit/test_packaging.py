"""The installed package stands on its own: declared imports, a current lock, and a wheel that
renders, validates and serves from a directory outside the source tree."""

from __future__ import annotations

import ast
import importlib.metadata
import os
import re
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
import tomllib
import urllib.request
import zipfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _name(requirement: str) -> str:
    """PEP 503 normalized distribution name of a requirement string."""
    raw = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement.strip())
    assert raw, requirement
    return re.sub(r"[-_.]+", "-", raw.group(0)).lower()


def _declared() -> set[str]:
    return {_name(r) for r in PYPROJECT["project"]["dependencies"]}


def _top_level_imports() -> dict[str, list[str]]:
    """Top-level modules imported anywhere in app/ (absolute imports only), with where."""
    found: dict[str, list[str]] = {}
    for path in sorted((ROOT / "app").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.split(".")[0], []).append(str(path.relative_to(ROOT)))
    return found


def test_every_import_in_app_is_declared_in_pyproject():
    distributions = importlib.metadata.packages_distributions()
    declared = _declared()
    undeclared = {}
    for module, where in _top_level_imports().items():
        if module in sys.stdlib_module_names or module == "app":
            continue
        owners = {_name(d) for d in distributions.get(module, [])}
        assert owners, f"{module} (imported by {where[0]}) is not installed"
        if not owners & declared:
            undeclared[module] = (sorted(owners), where[0])
    assert not undeclared, f"imported but not declared in pyproject.toml dependencies: {undeclared}"


def test_lock_pins_every_declared_dependency_with_hashes():
    lock = (ROOT / "requirements.lock").read_text()
    pinned = {_name(m.group(1)) for m in re.finditer(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==", lock, re.MULTILINE)}
    missing = _declared() - pinned
    assert not missing, f"run scripts/lock.sh: requirements.lock lacks {sorted(missing)}"
    # Each pin is followed by at least one hash (pip --require-hashes refuses otherwise).
    entries = re.split(r"\n(?=[A-Za-z0-9])", lock.split("\n", 1)[1])
    assert entries and all("--hash=sha256:" in e for e in entries if "==" in e)


def test_dockerfile_installs_the_lock_in_its_own_layer_pins_the_base_and_checks_health():
    text = (ROOT / "Dockerfile").read_text()
    lock_install = text.index("-r requirements.lock")
    assert text.index("COPY requirements.lock") < lock_install < text.index("COPY app ")
    assert "--require-hashes" in text
    base = re.search(r"ARG PYTHON_IMAGE=(\S+)", text).group(1)
    assert re.fullmatch(r"python:\d+\.\d+\.\d+-slim-\w+", base), base
    assert "HEALTHCHECK" in text and "/healthz" in text


def test_packaged_example_world_is_a_copy_of_examples_world():
    packaged = ROOT / "app" / "data" / "world"
    source = ROOT / "examples" / "world"
    assert sorted(p.name for p in packaged.iterdir()) == sorted(p.name for p in source.iterdir())
    for path in source.iterdir():
        assert (packaged / path.name).read_text() == path.read_text(), f"cp examples/world/{path.name} app/data/world/"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The wheel built from this tree, installed into a fresh venv; returns its bin directory.

    The wheel itself is installed with pip (no dependencies); its dependencies are taken from the
    test interpreter's site-packages through a .pth file (this runs offline). The source tree is not
    on the path: commands run from a temporary directory and the editable install's hook (a .pth in
    the test venv) is not processed for a directory added by a .pth.
    """
    tmp = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(tmp / "dist"), str(ROOT)], check=True, capture_output=True, cwd=tmp)
    (wheel,) = (tmp / "dist").glob("modeldeployment-*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--quiet",
                    "--no-deps", str(wheel)], check=True, capture_output=True, cwd=tmp)
    site = Path(subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "zz_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv / "bin"


def test_wheel_carries_the_declared_package_data(installed):
    """py.typed (app/ is type-checked: PEP 561) and the data files pyproject declares."""
    (wheel,) = (installed.parent.parent / "dist").glob("modeldeployment-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    assert "app/py.typed" in names
    assert any(n.startswith("app/data/world/") and n.endswith(".yaml") for n in names)
    assert any(n.startswith("app/engines/data/") and n.endswith(".json") for n in names)


def _run(bin_dir: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MODELDEPLOYMENT_", "PYTHON"))}
    return subprocess.run([str(bin_dir / "modeldeployment"), *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=60)


def test_installed_wheel_runs_from_outside_the_source_tree(installed, tmp_path):
    where = subprocess.run([str(installed / "python"), "-c", "import app; print(app.__file__)"],
                           capture_output=True, text=True, cwd=tmp_path, check=True).stdout.strip()
    assert str(installed.parent) in where and str(ROOT) not in where
    shutil.copy(ROOT / "examples" / "deployments" / "qwen-chat.yaml", tmp_path / "md.yaml")

    render = _run(installed, tmp_path, "render", "-f", "md.yaml", "--objects-only", "-q")
    assert render.returncode == 0, render.stderr
    docs = [d for d in yaml.safe_load_all(render.stdout) if d]
    assert docs and all(d.get("apiVersion") and d.get("kind") and d["metadata"].get("name") for d in docs)
    assert {d["kind"] for d in docs} >= {"Pod", "Service"}
    assert "# status: qwen-chat: phase" in render.stderr

    with_status = _run(installed, tmp_path, "render", "-f", "md.yaml", "-q")
    assert list(yaml.safe_load_all(with_status.stdout))[-1].keys() == {"status"}

    validate = _run(installed, tmp_path, "validate", "-f", "md.yaml")
    assert validate.returncode == 0, validate.stdout + validate.stderr
    assert "allowed" in validate.stdout

    no_tree = _run(installed, tmp_path, "crds")
    assert no_tree.returncode == 2 and "--out" in no_tree.stderr
    wrote = _run(installed, tmp_path, "crds", "--out", "crds")
    assert wrote.returncode == 0 and len(list((tmp_path / "crds").glob("*.yaml"))) == 7


def test_installed_wheel_serves(installed, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MODELDEPLOYMENT_", "PYTHON"))}
    env["MODELDEPLOYMENT_KUBE"] = "off"
    proc = subprocess.Popen([str(installed / "modeldeployment"), "serve", "--port", str(port), "--hooks-port", "0"], cwd=tmp_path,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as answer:
                    assert answer.status == 200 and answer.read() == b"ok"
                    break
            except OSError:
                assert proc.poll() is None, proc.stdout.read()
                assert time.monotonic() < deadline, "serve did not answer /healthz within 30 s"
                time.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
