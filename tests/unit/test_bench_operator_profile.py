"""bench/operator_profile.py: the summary of a py-spy raw profile of the operator process."""

from __future__ import annotations

from pathlib import Path

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
