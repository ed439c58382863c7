"""Which process of a launch this is, from the launcher's environment (no process group needed: run folders and
caches are decided before one exists)."""

from __future__ import annotations

import os

__all__ = ["process_rank"]


def process_rank() -> int:
    """This process's global rank, from the launcher's environment (0 when it sets none)."""
    for key in ("RANK", "SLURM_PROCID"):
        if os.environ.get(key, "").isdigit():
            return int(os.environ[key])
    node, local = os.environ.get("NODE_RANK", "0"), os.environ.get("LOCAL_RANK", "0")
    return int(node) * 1000 + int(local) if node.isdigit() and local.isdigit() else 0
