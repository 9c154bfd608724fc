"""bench/kueue_workers.py: Kueue's busy workers read off its goroutine dumps."""

from __future__ import annotations

import http.server
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator

import pytest

from bench import e2e_scale_report, kueue_workers

CR = "sigs.k8s.io/controller-runtime/pkg/internal/controller"
RUNTIME_TAIL = (
    f"#\t0x1\t{CR}.(*Controller[...]).Reconcile+0x1aa\t{CR}/controller.go:221\n"
    f"#\t0x2\t{CR}.(*Controller[...]).reconcileHandler+0x39a\t{CR}/controller.go:478\n"
    f"#\t0x3\t{CR}.(*Controller[...]).processNextWorkItem+0x1f7\t{CR}/controller.go:437\n")
API_CALL = ("#\t0x10\tgolang.org/x/net/http2.(*ClientConn).internalRoundTrip+0x524\thttp2/transport.go:1030\n"
            "#\t0x11\tk8s.io/client-go/rest.(*Request).Do+0x144\trest/request.go:1136\n")
K = "sigs.k8s.io/kueue/pkg"

# Three busy Pod workers (a condition written, one waiting on its fan-out of Pod patches), one busy
# Workload worker, and idle workers waiting on their queue (not counted).
DUMP = f"""goroutine profile: total 9

2 @ 0x48e10e 0x46a3a5
{API_CALL}#\t0x20\t{K}/workload/patching.patchStatus+0x39c\tpatching.go:1
#\t0x21\t{K}/workload/patching.PatchStatus+0xcb\tpatching.go:2
#\t0x22\t{K}/workload.SetConditionAndUpdate+0x28d\tworkload.go:3
#\t0x23\t{K}/controller/jobframework.(*JobReconciler).ReconcileGenericJob+0x2d24\treconciler.go:4
#\t0x24\t{K}/controller/jobs/pod.(*Reconciler).Reconcile+0x166\tpod_controller.go:126
{RUNTIME_TAIL}
1 @ 0x48e10e 0x46b232
#\t0x30\tsync.(*WaitGroup).Wait+0x84\tsync/waitgroup.go:206
#\t0x31\t{K}/util/parallelize.Until+0x112\tparallelize.go:63
#\t0x32\t{K}/controller/jobs/pod.(*Pod).Finalize+0x3a4\tpod_controller.go:593
#\t0x33\t{K}/controller/jobs/pod.(*Pod).Stop+0xb93\tpod_controller.go:550
#\t0x34\t{K}/controller/jobframework.(*JobReconciler).stopJob+0x625\treconciler.go:1388
#\t0x35\t{K}/controller/jobframework.(*JobReconciler).ReconcileGenericJob+0x19c4\treconciler.go:453
#\t0x36\t{K}/controller/jobs/pod.(*Reconciler).Reconcile+0x166\tpod_controller.go:126
{RUNTIME_TAIL}
1 @ 0x48e10e 0x46a3a5
{API_CALL}#\t0x40\t{K}/controller/core.(*WorkloadReconciler).reconcileSyncAdmissionChecks+0x495\tworkload_controller.go:1
#\t0x41\t{K}/controller/core.(*WorkloadReconciler).Reconcile+0x3329\tworkload_controller.go:2
{RUNTIME_TAIL}
5 @ 0x48e10e 0x46a3a5
#\t0x50\tsigs.k8s.io/controller-runtime/pkg/controller/priorityqueue.(*priorityqueue[...]).GetWithPriority+0x116\tpq.go:436
#\t0x51\t{CR}.(*Controller[...]).processNextWorkItem+0x5a\t{CR}/controller.go:420
"""

CONDITION = ("patching.patchStatus < workload.SetConditionAndUpdate < jobframework.JobReconciler.ReconcileGenericJob"
             " (API call)")
FINALIZE = "pod.Pod.Finalize < jobframework.JobReconciler.stopJob (parallel API calls)"
CHECKS = "core.WorkloadReconciler.reconcileSyncAdmissionChecks (API call)"


def test_a_dump_counts_the_goroutines_inside_a_reconcile_by_reconciler_and_what_they_wait_on() -> None:
    assert kueue_workers.busy_workers(DUMP) == Counter({
        ("pod.Reconciler.Reconcile", CONDITION): 2,
        ("pod.Reconciler.Reconcile", FINALIZE): 1,
        ("core.WorkloadReconciler.Reconcile", CHECKS): 1,
    })


def test_the_summary_is_the_mean_per_sample_per_reconciler_and_its_largest_activities() -> None:
    samples = [kueue_workers.busy_workers(DUMP), Counter({("pod.Reconciler.Reconcile", FINALIZE): 1})]
    summary = kueue_workers.summary(samples, top=1)
    assert summary["samples"] == 2
    assert summary["busy"] == {"pod.Reconciler.Reconcile": 2.0, "core.WorkloadReconciler.Reconcile": 0.5}
    assert summary["activities"]["pod.Reconciler.Reconcile"] == [[CONDITION, 1.0]]
    assert kueue_workers.summary([]) == {"samples": 0, "busy": {}, "activities": {}}


@pytest.fixture
def pprof() -> Iterator[str]:
    """A local stand-in for Kueue's pprof endpoint that serves DUMP."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            assert self.path == "/debug/pprof/goroutine?debug=1"
            body = DUMP.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _until(condition: Callable[[], bool], within_s: float = 60.0) -> None:
    """Polls `condition`; a bound far above what it takes, so a broken sampler fails, never hangs."""
    deadline = time.monotonic() + within_s
    while not condition():
        assert time.monotonic() < deadline, "the sampler made no progress"
        time.sleep(0.02)


def test_the_sampler_samples_until_stopped_and_its_thread_ends(pprof: str) -> None:
    sampler = kueue_workers.Sampler(pprof, every_s=0.05)
    sampler.start()
    _until(lambda: len(sampler.samples) >= 3)
    summary = sampler.stop()
    assert not sampler._thread.is_alive()
    assert summary["errors"] == 0 and summary["samples"] >= 3
    assert summary["busy"]["pod.Reconciler.Reconcile"] == 3.0


def test_the_sampler_counts_an_unreachable_endpoint_as_errors_not_samples() -> None:
    with socket.socket() as closed:  # a port nothing listens on once this socket is closed
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    sampler = kueue_workers.Sampler(f"127.0.0.1:{port}", every_s=0.05)
    sampler.start()
    _until(lambda: sampler.errors >= 2)
    summary = sampler.stop()
    assert summary["samples"] == 0 and summary["errors"] >= 2


def _run(busy: dict | None) -> dict:
    edit: dict = {"seconds": 1.0}
    if busy is not None:
        edit["kueue_workers"] = busy
    return {"edit": edit}


def test_the_report_has_a_busy_workers_row_per_sampled_edit_and_nothing_without_samples() -> None:
    busy = kueue_workers.summary([kueue_workers.busy_workers(DUMP)])
    results = {"sizes": {"100": {"wide": _run(busy), "lws": _run(None)}}}
    lines = e2e_scale_report.kueue_workers_section(results, [100])
    rows = [line for line in lines if line.startswith("| 100 |")]
    assert rows == [f"| 100 | ours (LWS shape) | 1 | 3.00 | 1.00 | 0.00 | {CONDITION} 2.00; {FINALIZE} 1.00 |"]
    assert e2e_scale_report.kueue_workers_section({"sizes": {"100": {"wide": _run(None), "lws": _run(None)}}},
                                                  [100]) == []
