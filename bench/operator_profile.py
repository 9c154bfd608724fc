"""Where the operator process's CPU goes on the real stack: py-spy sampling that process for a
whole e2e-scale run (`bench/e2e-scale.sh --profile`), summarized by the share of samples under
each of the operator's own functions and under each step of the event loop.

py-spy reads the process from outside (no change to the operator, a few percent of one core at
50 samples a second); bench/run.sh installs it. Idle threads are not sampled, so a share is of the
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
    """py-spy recording one process into `raw` (its "raw" collapsed-stack format) until stopped."""

    def __init__(self, pid: int, raw: Path) -> None:
        self.raw = raw
        exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        self.proc = subprocess.Popen(  # noqa: S603 - our own argv
            [exe, "record", "--pid", str(pid), "--rate", str(RATE), "--format", "raw", "--output", str(raw),
             "--nonblocking"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def stop(self) -> str:
        """Stops sampling (py-spy writes its file on SIGINT); returns py-spy's own last words."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            _, err = self.proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        return (err or b"").decode(errors="replace").strip()[-400:]


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
