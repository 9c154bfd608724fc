"""scripts/dashboard_png.py: its PromQL stand-ins compute what Prometheus would, and the committed
samples behind docs/images/dashboard.png fill every panel of the dashboard."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "docs" / "images" / "dashboard-samples.jsonl.gz"


def module():
    spec = importlib.util.spec_from_file_location("dashboard_png", ROOT / "scripts" / "dashboard_png.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def exposition(counter: float, buckets: dict[str, float]) -> str:
    lines = ["# TYPE demo_total counter", f"demo_total{{name=\"a\"}} {counter}",
             "# TYPE demo_seconds histogram"]
    lines += [f"demo_seconds_bucket{{le=\"{le}\"}} {v}" for le, v in buckets.items()]
    lines += [f"demo_seconds_count {buckets['+Inf']}", "demo_seconds_sum 1.0"]
    return "\n".join(lines) + "\n"


def test_quantile_and_increase_over_the_window(tmp_path: Path):
    dash = module()
    path = tmp_path / "samples.jsonl"
    rows = [{"t": 100.0, "step": "start"},
            {"t": 100.0, "metrics": exposition(0, {"1.0": 0, "2.0": 0, "+Inf": 0})},
            {"t": 110.0, "metrics": exposition(3, {"1.0": 2, "2.0": 4, "+Inf": 4})},
            {"t": 150.0, "metrics": exposition(3, {"1.0": 2, "2.0": 4, "+Inf": 4})}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    scrapes, steps = dash.load(path)
    assert steps == [(100.0, "start")] and len(scrapes) == 3
    # 4 observations in the window at t=110: 2 in (0, 1], 2 in (1, 2]; the median is 1 s, p75 1.5 s.
    assert dash.quantile_over_time(scrapes, "demo_seconds", None, 0.5)[""] == ([10.0], [1.0])
    assert dash.quantile_over_time(scrapes, "demo_seconds", None, 0.75)[""][1] == [1.5]
    # increase over 30 s: 3 at t=10 s; at t=50 s the window (20 s, 50 s] holds none.
    assert dash.increase(scrapes, "demo_total", lambda l: l["name"])["a"] == ([0.0, 10.0, 50.0], [0.0, 3.0, 0.0])
    assert dash.increase(scrapes, "demo_total", lambda l: l["name"], per_second=True)["a"][1][1] == 3.0 / 30


def test_the_committed_run_fills_every_panel():
    dash = module()
    scrapes, steps = dash.load(SAMPLES)
    assert scrapes[-1][0] - scrapes[0][0] > 150, "a run long enough for every step"
    done = " | ".join(text for _, text in steps)
    for step in ("scale", "rollout", "evicts", "loses its hardware detail", "too-big", "delete"):
        assert step in done, (step, done)
    phases = {phase for points in dash.phase_spans(scrapes).values() for _, phase in points}
    assert {"Starting", "Ready"} <= phases
    panels = dash.panels(scrapes)
    assert len(panels) + 1 == len(json.loads((ROOT / "manifests" / "monitoring" / "dashboards" /
                                              "modeldeployment.json").read_text())["panels"])
    for title, _, _, data in panels:
        assert any(v > 0 for _, values in data.values() for v in values), f"panel without data: {title}"


def test_a_missing_matplotlib_is_one_line_naming_the_extra(tmp_path: Path, capsys, monkeypatch) -> None:
    mod = module()
    monkeypatch.setattr(mod, "matplotlib_missing", lambda: True)
    assert mod.main(["dashboard_png.py", str(SAMPLES), str(tmp_path / "out.png")]) == 2
    err = capsys.readouterr().err
    assert "matplotlib" in err and ".[dashboard]" in err and "Traceback" not in err


def test_the_dashboard_extra_is_declared() -> None:
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(req.startswith("matplotlib") for req in extras["dashboard"])
