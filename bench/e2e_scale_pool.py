"""bench/e2e-scale's pool: the shape of its kwok nodes and how many the largest N needs.

Shared by the driver (bench/e2e_scale.py), which builds the pool, and the report
(bench/e2e_scale_report.py), which states its size.
"""

from __future__ import annotations

# A dedicated pool of kwok nodes with room for every Pod of the largest N plus the replacements of
# a rollout (a quarter more): 16 nodes (~1,250 one-card Pods) up to N = 100, more beyond. Kueue's
# quota is the pool's total (a pool sized for N = 100 left N = 200's apply queued at 1,345 of 2,000).
MIN_NODES = 16
PODS_PER_DEPLOYMENT = 10
GPUS_PER_NODE = 80
CPU_PER_NODE = 800
MEMORY_PER_NODE_GI = 4096
PODS_PER_NODE = 110


def pool_nodes(largest: int) -> int:
    """Nodes enough for `largest` deployments' Pods and a rollout's replacements, on cards and Pods."""
    wanted = largest * PODS_PER_DEPLOYMENT * 5 // 4
    return max(MIN_NODES, -(-wanted // min(GPUS_PER_NODE, PODS_PER_NODE)))
