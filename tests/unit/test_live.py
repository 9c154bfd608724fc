"""`modeldeployment status` and `plan` (app/live.py) on views built from the planner's own
passes: the table shows what the status lists, and the plan is the sync hook's decision."""

from __future__ import annotations

import copy
import io
from contextlib import redirect_stderr, redirect_stdout
from typing import Any

import pytest

from app import cli, live, vocab
from app.control.sync import SyncResult, SyncSettings
from tests.conftest import world_objects
from tests.helpers import NOW, parent, pods, sync, workload


def ready_pods(result: SyncResult, node: str = "node-a") -> list[dict[str, Any]]:
    out = []
    for i, p in enumerate(pods(result)):
        observed = copy.deepcopy(p)
        observed["metadata"]["uid"] = f"uid-{i}"
        observed["spec"]["nodeName"] = node
        observed["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        out.append(observed)
    return out


def steady_view(md: dict[str, Any]) -> live.LiveView:
    """A deployment whose every replica is admitted and Ready, with the status its pass writes."""
    observed = ready_pods(sync(md))
    workloads = [workload("team-a", p["metadata"]["labels"][vocab.LABEL_KUEUE_POD_GROUP_NAME]) for p in observed]
    view = live.LiveView(copy.deepcopy(md), observed, workloads, world_objects())
    view.md["status"] = live.plan(view.md, view, SyncSettings(), NOW).status  # type: ignore[union-attr]
    return view


@pytest.mark.parametrize(("since", "shown"), [(NOW, "0s"), ("2026-11-29T11:59:15Z", "45s"),
                                              ("2026-11-29T11:57:00Z", "3m"), ("2026-11-29T09:00:00Z", "3h"),
                                              ("2026-11-25T12:00:00Z", "4d"), (None, "-")])
def test_age(since: str | None, shown: str):
    assert live.age(since, NOW) == shown


def test_the_table_shows_each_replica_with_its_stage_pods_and_node():
    view = steady_view(parent("qwen-chat"))
    pulling = view.pods[1]
    pulling["status"] = {"phase": "Pending", "conditions": [], "containerStatuses": [
        {"name": "engine", "ready": False, "restartCount": 0,
         "state": {"waiting": {"reason": "ErrImageNeverPull", "message": "image not present"}}}]}
    view.md["status"] = live.plan(view.md, view, SyncSettings(), NOW).status  # type: ignore[union-attr]
    rows = {r[1]: r for r in live.status_rows(view, "2026-11-29T12:02:00Z")}
    assert rows["r1"][2:5] == [vocab.STAGE_PULLING, "ErrImageNeverPull", "2m"]
    assert rows["r1"][5] == pulling["metadata"]["name"] and rows["r1"][6] == "node-a"
    assert "image not present" in rows["r1"][7]
    assert rows["r0"][2] == vocab.PHASE_READY
    text = live.status_text(view, NOW)
    assert text.splitlines()[1].split() == live.STATUS_HEADER


def test_a_starting_replica_shows_its_progress_against_the_budget():
    entry = {"reason": vocab.STAGE_REASON_STARTUP_PROBE, "startedAt": "2026-11-29T11:58:00Z",
             "startupBudgetSeconds": 3600}
    assert live._reason(entry, NOW) == "StartupProbe 120s/3600s"


def _plan(md: dict[str, Any], view: live.LiveView) -> list[str]:
    result = live.plan(live.proposed_parent(md, view.md), view, SyncSettings(), NOW)
    assert isinstance(result, SyncResult)
    return live.plan_lines(md, view.md, result)


def test_plan_a_scale_up_adds_the_new_ordinals():
    view = steady_view(parent("qwen-chat"))
    edited = copy.deepcopy(view.md)
    edited["spec"]["roles"][0]["replicas"] = 6
    lines = _plan(edited, view)
    assert lines[0] == "role server: 4 -> 6 replicas"
    assert "  added: qwen-chat-server-r4, qwen-chat-server-r5" in lines


def test_plan_a_scale_down_sheds_the_highest_ordinals():
    view = steady_view(parent("qwen-chat"))
    edited = copy.deepcopy(view.md)
    edited["spec"]["roles"][0]["replicas"] = 2
    assert "  shed (scale-down): qwen-chat-server-r2, qwen-chat-server-r3" in _plan(edited, view)


def test_plan_an_env_change_rolls_one_serving_replica_now_and_the_rest_in_order():
    view = steady_view(parent("qwen-chat"))
    edited = copy.deepcopy(view.md)
    edited["spec"]["roles"][0].setdefault("env", []).append({"name": "EXTRA", "value": "1"})
    lines = _plan(edited, view)
    assert "  replaced now: qwen-chat-server-r0" in lines
    assert ("  then replaced one at a time, each once the one before is Ready: qwen-chat-server-r1, "
            "qwen-chat-server-r2, qwen-chat-server-r3") in lines


def test_plan_of_the_live_object_itself_changes_nothing():
    view = steady_view(parent("qwen-chat"))
    assert _plan(copy.deepcopy(view.md), view) == ["role server: 4 -> 4 replicas", "  unchanged"]


def test_the_proposed_parent_takes_the_live_identity_and_the_next_generation():
    view = steady_view(parent("qwen-chat"))
    edited = copy.deepcopy(view.md)
    edited["metadata"].pop("uid")
    edited["spec"]["roles"][0]["replicas"] = 5
    proposed = live.proposed_parent(edited, view.md)
    assert proposed["metadata"]["uid"] == view.md["metadata"]["uid"]
    assert proposed["metadata"]["generation"] == view.md["metadata"]["generation"] + 1
    assert proposed["status"] == view.md["status"]
    assert live.proposed_parent(view.md, view.md)["metadata"]["generation"] == view.md["metadata"]["generation"]


def test_status_without_a_cluster_is_one_line_naming_the_way_out(tmp_path: Any):
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = cli.main(["status", "qwen-chat", "--kubeconfig", str(tmp_path / "absent")])
    assert code == cli.EXIT_USAGE
    assert err.getvalue().count("\n") == 1 and "--kubeconfig" in err.getvalue()


def test_kubectl_md_is_the_same_cli_under_kubectls_name():
    out = io.StringIO()
    with redirect_stdout(out), pytest.raises(SystemExit):
        cli.main(["--help"], prog="kubectl md")
    assert out.getvalue().startswith("usage: kubectl md")


def test_watch_prints_the_table_again_only_when_it_changes(monkeypatch: pytest.MonkeyPatch):
    """--watch reads every interval and prints only a table that differs from the last one."""
    view = steady_view(parent("qwen-chat"))
    changed = copy.deepcopy(view)
    changed.md["status"]["phase"] = "Degraded"
    reads = iter([view, view, changed])
    monkeypatch.setattr(live, "_live", lambda args: (None, "team-a"))
    monkeypatch.setattr(live, "read_view", lambda config, namespace, name: next(reads))
    monkeypatch.setattr(live, "utc_now", lambda: NOW)
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 3:
            raise KeyboardInterrupt

    monkeypatch.setattr(live.time, "sleep", sleep)
    out = io.StringIO()
    with redirect_stdout(out), pytest.raises(KeyboardInterrupt):
        live.cmd_status(cli.parser().parse_args(["status", "qwen-chat", "--watch", "--interval", "0.5"]))
    tables = out.getvalue().strip().split("\n\n")
    assert len(tables) == 2 and ": Ready" in tables[0] and ": Degraded" in tables[1]
    assert sleeps == [0.5, 0.5, 0.5]
