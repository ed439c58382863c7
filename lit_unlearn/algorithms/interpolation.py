"""Move weights part of the way back to the model they were fine-tuned from: θ ← θ₀ + keep·(θ − θ₀).

A reference-free start for unlearning. The target is its base (θ₀, the model before the fine-tune that taught the
forget data) plus a fine-tuning delta; scaling the delta by `keep` < 1 takes away part of everything the fine-tune
memorised, forget and retain alike, without gradient ascent, so no item is pushed onto the steep, confidently
wrong slopes that gradient-based membership attacks read. The retain objective then teaches back what the retain
set holds. A Llama-2-7B user has θ₀: it is the public model their fine-tune started from (no retain-only model is
needed). Pure tensors, no framework.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor

__all__ = ["interpolate_toward_"]


@torch.no_grad()
def interpolate_toward_(params: Iterable[tuple[str, Tensor]], base: dict[str, Tensor], keep: float) -> int:
    """In place, for each (name, θ) with a base tensor of that name: θ ← θ₀ + keep·(θ − θ₀), computed in θ's dtype
    (keep = 1 leaves θ as it is, keep = 0 gives θ₀). Returns how many tensors moved; a shape mismatch or a
    missing name is an error, since a partly reset model is not what was asked for."""
    if not 0.0 <= keep <= 1.0:
        raise ValueError(f"keep must be in [0, 1], got {keep}")
    moved = 0
    for name, p in params:
        if name not in base:
            raise KeyError(f"the base model has no tensor {name!r}")
        b = base[name]
        if b.shape != p.shape:
            raise ValueError(f"{name}: the base's shape {tuple(b.shape)} differs from {tuple(p.shape)}")
        p.mul_(keep).add_(b.to(device=p.device, dtype=p.dtype), alpha=1.0 - keep)
        moved += 1
    return moved
