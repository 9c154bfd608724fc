"""Benchmarks of the hooks service: sync cost vs. the JSON floor, throughput, webhook latency.

Run everything with `.venv/bin/python -m bench` (or `bench/run.sh`); see bench/README.md.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = Path(__file__).resolve().parent
