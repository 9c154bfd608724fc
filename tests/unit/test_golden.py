"""Golden renders: what `modeldeployment render` prints for every example, byte for byte.

Each file of `examples/deployments/` (and each extra input of `tests/golden/inputs/`, which
covers the routers and engine paths no example uses) is rendered by the CLI itself, against the
example world it ships, twice: as children + status (`render -f FILE`) and as objects only
(`render -f FILE --objects-only`), and what it prints on standard output is compared with
`tests/golden/<name>.<mode>.yaml`. Standard error is not: it carries the side-effect intents as
the Python repr of the intent objects (a debugging aid whose spelling follows the code), and the
intents are tested where they are planned (tests/unit/test_sync.py).

The render is a pure function of the deployment, the world and the operator's settings, except
for one input: the wall clock, which only stamps the conditions' `lastTransitionTime`. It is
pinned here to `FIXED_NOW`, and the environment is emptied of every operator setting, so the
goldens are the defaults' render. `test_render_ignores_hash_seed` renders again in fresh
interpreters with other hash seeds, so no set or dict order leaks into the output.

The goldens change only in a commit that changes the render on purpose (say so in its message),
never in a refactoring commit. Regenerate them with:

    UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/unit/test_golden.py -q
"""

from __future__ import annotations

import difflib
import io
import json
import os
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import pytest

from app import cli

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
INPUTS = sorted((ROOT / "examples" / "deployments").glob("*.yaml")) + sorted((GOLDEN / "inputs").glob("*.yaml"))
# The one clock reading a render takes (conditions' lastTransitionTime).
FIXED_NOW = "2025-01-01T00:00:00Z"
MODES = {"render": [], "objects": ["--objects-only"]}
# Environment variables that are operator settings (app/settings.py): none may reach the goldens.
SETTING_PREFIXES = ("MODELDEPLOYMENT_", "GPUSTACK_MODEL_DEPLOYMENT_")
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"
MAX_DIFF_LINES = 120


@dataclass(frozen=True)
class Printed:
    code: int
    stdout: str
    stderr: str


def _settings_free_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(SETTING_PREFIXES)}


def render(path: Path, mode: str) -> Printed:
    """What `modeldeployment render -f path [--objects-only]` prints, with the clock pinned."""
    out, err = io.StringIO(), io.StringIO()
    with mock.patch.dict(os.environ, _settings_free_env(), clear=True), \
            mock.patch.object(cli, "utc_now", lambda: FIXED_NOW), redirect_stdout(out), redirect_stderr(err):
        code = cli.main(["render", "-f", str(path), *MODES[mode]])
    return Printed(code, out.getvalue(), err.getvalue())


def golden_path(path: Path, mode: str) -> Path:
    return GOLDEN / f"{path.stem}.{mode}.yaml"


def render_all() -> dict[str, str]:
    """Every input in every mode, keyed by golden file name (the hash-seed test's subprocess calls it)."""
    printed: dict[str, str] = {}
    for path in INPUTS:
        for mode in MODES:
            printed[golden_path(path, mode).name] = render(path, mode).stdout
    return printed


def unified_diff(expected: list[str], actual: list[str]) -> list[str]:
    """A unified diff of two line lists. difflib.unified_diff's matcher treats a line repeated in
    over 1% of a long file as junk (every `protocol: TCP` here), which turns a one-line change into
    a hunk of a hundred; this matcher does not."""
    lines: list[str] = []
    matcher = difflib.SequenceMatcher(None, expected, actual, autojunk=False)
    for group in matcher.get_grouped_opcodes(3):
        first, last = group[0], group[-1]
        lines.append(f"@@ -{first[1] + 1},{last[2] - first[1]} +{first[3] + 1},{last[4] - first[3]} @@\n")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                lines += [" " + line for line in expected[i1:i2]]
                continue
            lines += ["-" + line for line in expected[i1:i2]]
            lines += ["+" + line for line in actual[j1:j2]]
    return lines


def _diff(expected: str, actual: str, name: str) -> str:
    lines = [f"--- tests/golden/{name} (committed)\n", f"+++ {name} (rendered now)\n",
             *unified_diff(expected.splitlines(keepends=True), actual.splitlines(keepends=True))]
    shown = "".join(lines[:MAX_DIFF_LINES])
    more = f"\n... {len(lines) - MAX_DIFF_LINES} more diff lines" if len(lines) > MAX_DIFF_LINES else ""
    return (f"the render of {name} changed:\n{shown}{more}\n"
            "If the change is intended, regenerate in the same commit (and say so in its message): "
            "UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/unit/test_golden.py -q")


def _compare(golden: Path, actual: str) -> None:
    if UPDATE:
        golden.write_text(actual)
        return
    assert golden.exists(), (f"no golden file {golden.relative_to(ROOT)}; write it with "
                             "UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/unit/test_golden.py -q")
    expected = golden.read_text()
    assert actual == expected, _diff(expected, actual, golden.name)


def test_inputs_are_found_and_named_apart() -> None:
    assert len(INPUTS) >= 5
    stems = [p.stem for p in INPUTS]
    assert len(stems) == len(set(stems)), f"two golden inputs share a name: {sorted(stems)}"


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("path", INPUTS, ids=[p.stem for p in INPUTS])
def test_render_matches_golden(path: Path, mode: str) -> None:
    printed = render(path, mode)
    assert printed.code == 0, f"render -f {path.name} exited {printed.code}: {printed.stderr}"
    _compare(golden_path(path, mode), printed.stdout)


def test_no_golden_file_without_an_input() -> None:
    expected = {golden_path(path, mode).name for path in INPUTS for mode in MODES}
    found = {p.name for p in GOLDEN.iterdir() if p.is_file() and p.name != "README.md"}
    assert found <= expected, f"golden files with no input (delete them): {sorted(found - expected)}"


def test_objects_only_prints_the_children_of_the_full_render() -> None:
    """`--objects-only` is the full render without its trailing status document."""
    path = INPUTS[0]
    full, objects = render(path, "render"), render(path, "objects")
    assert full.stdout.startswith(objects.stdout)
    assert full.stdout[len(objects.stdout):].startswith("---\nstatus:")


@pytest.mark.skipif(UPDATE, reason="the goldens are being rewritten")
@pytest.mark.parametrize("seed", ["0", "4242"])
def test_render_ignores_hash_seed(seed: str) -> None:
    """A fresh interpreter with another hash seed prints the same bytes for every input."""
    script = ("import json, sys; from tests.unit.test_golden import render_all; "
              "json.dump(render_all(), sys.stdout)")
    env = {**_settings_free_env(), "PYTHONHASHSEED": seed}
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    for name, actual in json.loads(done.stdout).items():
        expected = (GOLDEN / name).read_text()
        assert actual == expected, f"PYTHONHASHSEED={seed}: " + _diff(expected, actual, name)
