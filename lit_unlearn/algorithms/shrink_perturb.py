"""Shrink and perturb a copy of the weights before distilling into it (UNDO: Lee et al., NeurIPS 2025, "Distillation
robustifies unlearning"): θ ← (1 − α)·θ + α·β·ε, ε Xavier-uniform for matrices and 0 for vectors (norm gains and
biases only shrink), as the paper's corruption does; or θ ← (1 − α)·θ + α·θ_base, a step back toward the model the
target was fine-tuned from (`toward`). α = 1 with noise is a fresh random initialisation scaled by β.

Why it helps: unlearning that only hides the forget set leaves it in the weights, where relearning finds it. A copy
whose weights are moved far enough keeps little of it, and distillation from the unlearned teacher then restores
the teacher's behaviour, which no longer shows the forget set, without restoring what the teacher hides.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping

import torch
from torch import Tensor

__all__ = ["shrink_perturb_", "xavier_uniform_bound"]


def xavier_uniform_bound(shape: torch.Size) -> float:
    """PyTorch's xavier_uniform_ bound for a matrix: √(6 / (fan_in + fan_out))."""
    fan_out, fan_in = shape[0], math.prod(shape[1:])
    return math.sqrt(6.0 / (fan_in + fan_out))


@torch.no_grad()
def shrink_perturb_(params: Iterable[tuple[str, Tensor]], alpha: float, beta: float = 0.1,
                    generator: torch.Generator | None = None, toward: Mapping[str, Tensor] | None = None,
                    where: Callable[[str], bool] | None = None) -> float:
    """Shrink and perturb (name, tensor) pairs in place; `where(name)` picks which (all floating tensors by default).
    Returns the share of the elements changed. Noise is drawn on the CPU in the order given (reproducible across
    devices)."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    changed = total = 0
    for name, p in params:
        total += p.numel()
        if not p.is_floating_point() or (where is not None and not where(name)):
            continue
        if toward is not None:
            if name not in toward:
                raise KeyError(f"no weight {name!r} to move toward")
            target = toward[name].to(device=p.device, dtype=torch.float32)
        elif p.dim() >= 2:
            bound = xavier_uniform_bound(p.shape)
            target = beta * (torch.rand(p.shape, generator=generator, dtype=torch.float32) * 2 - 1) * bound
            target = target.to(p.device)
        else:
            target = torch.zeros_like(p, dtype=torch.float32)
        p.copy_(((1.0 - alpha) * p.float() + alpha * target).to(p.dtype))
        changed += p.numel()
    return changed / max(1, total)
