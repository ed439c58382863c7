"""Framework-free unlearning math: pure functions on tensors, shared by every trainer."""

from lit_unlearn.algorithms.blocks import (
    COMBINE_PRECISIONS,
    GROUPINGS,
    block_index,
    block_stats,
    combine_arithmetic,
    combine_into,
    tensor_stats,
)
from lit_unlearn.algorithms.hamu import (
    INFEASIBLE_POLICIES,
    QUOTA_ALLOCATIONS,
    VARIANTS,
    BlockSolution,
    Branch,
    HamuStep,
    allocate_quota,
    clip_scales,
    hamu_step,
    solve_blocks,
)

__all__ = [
    "COMBINE_PRECISIONS",
    "GROUPINGS",
    "INFEASIBLE_POLICIES",
    "QUOTA_ALLOCATIONS",
    "VARIANTS",
    "BlockSolution",
    "Branch",
    "HamuStep",
    "allocate_quota",
    "block_index",
    "block_stats",
    "clip_scales",
    "combine_arithmetic",
    "combine_into",
    "hamu_step",
    "solve_blocks",
    "tensor_stats",
]
