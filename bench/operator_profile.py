"""Where the operator process's CPU goes on the real stack: py-spy sampling that process for a
whole e2e-scale run (`bench/e2e-scale.sh --profile`), summarized by the share of samples under
each of the operator's own functions (inclusive) and by the leaf functions where the time is spent.

py-spy reads the process from outside (no change to the operator, a few percent of one core at
50 samples a second); bench/e2e-scale.sh installs it. Idle threads are not sampled, so a share is of the
time the process was doing something.
"""

from __future__ import annotations

import collections
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

RATE = 50  # samples a second
_LINE = re.compile(r":\d+\)$")


class Sampler:
    """py-spy recording one process into `raw` (its "raw" collapsed-stack format) until stopped.
    Its own output goes to a file beside `raw` (a pipe nobody reads during an hour-long run could
    fill and stop it)."""

    def __init__(self, pid: int, raw: Path) -> None:
        self.raw = raw
        self.log = raw.with_name(raw.name + ".log")
        exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(  # noqa: S603 - our own argv
                [exe, "record", "--pid", str(pid), "--rate", str(RATE), "--format", "raw", "--output", str(raw),
                 "--nonblocking"], stdout=log, stderr=subprocess.STDOUT)

    def stop(self) -> str:
        """Stops sampling (py-spy writes its file on SIGINT); returns py-spy's own last words."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return self.log.read_text(errors="replace").strip()[-400:]


def _stacks(raw: Path) -> list[tuple[list[str], int]]:
    out = []
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            out.append(([_LINE.sub(")", frame) for frame in stack.split(";")], int(count)))
    return out


def summarize(raw: Path, title: str, top: int = 40) -> str:
    """A text report: samples under each of the operator's functions (inclusive, `app/` frames),
    and the heaviest leaf functions anywhere (where the time is spent itself)."""
    stacks = _stacks(raw)
    total = sum(n for _, n in stacks) or 1
    inclusive: collections.Counter[str] = collections.Counter()
    leaves: collections.Counter[str] = collections.Counter()
    for frames, n in stacks:
        for frame in set(frames):
            if "(app/" in frame:
                inclusive[frame] += n
        leaves[frames[-1]] += n
    lines = [f"# {title}", f"# py-spy at {RATE} Hz, {total} samples (non-idle); share of samples", "",
             "## The operator's functions, inclusive", ""]
    lines += [f"{n / total * 100:5.1f}%  {frame}" for frame, n in inclusive.most_common(top)]
    lines += ["", "## Leaf functions (self time)", ""]
    lines += [f"{n / total * 100:5.1f}%  {frame}" for frame, n in leaves.most_common(top // 2)]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(summarize(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else sys.argv[1]), end="")
