"""bench/operator_profile.py: the summary of a py-spy raw profile of the operator process."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from bench import operator_profile


def test_the_summary_shares_samples_by_the_operators_functions_and_by_leaf(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    raw.write_text(
        "run (app/web/serving.py:10);sync (app/web/hooks.py:20);loads (json/__init__.py:5) 6\n"
        "run (app/web/serving.py:10);_follow (app/kube/composition.py:30);send (httpx/_client.py:9) 3\n"
        "run (app/web/serving.py:11);sync (app/web/hooks.py:21);sync (app/web/hooks.py:22) 1\n"
        "not a sample line\n")
    text = operator_profile.summarize(raw, "a run")
    assert "10 samples" in text
    inclusive, leaves = text.split("## Leaf functions (self time)")
    # A frame counts once per sample however often the stack holds it; line numbers are merged.
    assert "100.0%  run (app/web/serving.py)" in inclusive
    assert " 70.0%  sync (app/web/hooks.py)" in inclusive
    assert " 30.0%  _follow (app/kube/composition.py)" in inclusive
    assert "json" not in inclusive  # only the operator's own frames above
    assert " 60.0%  loads (json/__init__.py)" in leaves


def test_the_sampler_keeps_py_spys_output_in_a_file_so_a_chatty_run_cannot_block_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A stand-in for py-spy that writes more than a pipe holds before it is stopped, then writes its
    # profile on SIGINT as py-spy does.
    fake = tmp_path / "py-spy"
    fake.write_text(
        "#!/usr/bin/env python3\n"
        "import signal, sys, time\n"
        "out = sys.argv[sys.argv.index('--output') + 1]\n"
        "def done(*_):\n"
        "    open(out, 'w').write('f (app/x.py:1) 1\\n')\n"
        "    sys.stderr.write('Wrote raw profile\\n')\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGINT, done)\n"
        "sys.stderr.write('x' * 200_000 + '\\n')\n"
        "sys.stderr.flush()\n"
        "open(out + '.chatted', 'w').close()\n"
        "while True:\n"
        "    time.sleep(0.05)\n")
    fake.chmod(0o755)
    monkeypatch.setattr(operator_profile.shutil, "which", lambda _: str(fake))
    raw = tmp_path / "operator-profile.raw"
    sampler = operator_profile.Sampler(os.getpid(), raw)
    deadline = time.monotonic() + 30
    while not (tmp_path / "operator-profile.raw.chatted").exists():  # it got past its 200 KB of output
        assert sampler.proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    assert sampler.stop().endswith("Wrote raw profile")
    assert raw.read_text() == "f (app/x.py:1) 1\n"
