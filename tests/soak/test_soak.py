"""A short chaos soak (bench/soak.md) on the real stack, fixed seed: about three minutes of user
operations, departures and platform faults on four deployments of mixed shapes (size 1 and 2, a
routed P/D pair with the KV cache, SGLang and vLLM, a pool without spare quota), every invariant of
bench/soak_watch.py judged every half second. Any violation fails the test with its history.

The operator runs as two replicas behind one address (tests/e2e/md_operator.py); the schedule
opens with one of them killed (SIGKILL, started again), so every run shows the other carrying
the passes and the webhooks meanwhile."""

from __future__ import annotations

import json
from pathlib import Path

SEED = 22
SCHEDULE_SECONDS = 100
SIZE = 4


def test_a_short_chaos_soak_keeps_every_invariant(tmp_path: Path) -> None:
    from bench import soak

    out = tmp_path / "soak.json"
    summary = soak.run(SEED, SCHEDULE_SECONDS, SIZE, out_json=out, first=("operator-kill",),
                       command=f"python -m bench.soak --seed {SEED} --duration {SCHEDULE_SECONDS} --size {SIZE} "
                               "--first operator-kill")
    assert out.is_file()
    assert summary["operations"] >= 20 and summary["faults"] >= 5, (summary["by_kind"], summary["episodes"])
    assert summary["by_kind"]["platform"].get("operator-kill", 0) >= 1, summary["by_kind"]
    assert summary["convergence_after_fault"], "no fault was followed by a measured convergence"
    assert not summary["violations"], json.dumps(summary["violations"], indent=1)
