"""Round-to-nearest weight quantisation with per-group scales, written in torch so that it runs anywhere (CPU).

Zhang et al. (ICLR 2025) found that 4-bit quantisation brings back most of what utility-constrained unlearning
removed: the unlearning updates are smaller than a 4-bit bucket, so the unlearned and the original weights round
to the same values. Round-to-nearest with a scale per group of `group_size` consecutive weights (along each row)
is the simplest quantiser and the one most comparable across papers.

Symmetric (the default, like GPTQ/AWQ's "sym"): levels q ∈ [−(2^(b−1) − 1), 2^(b−1) − 1], scale = max|w| / qmax.
Asymmetric: levels q ∈ [0, 2^b − 1], scale = (max − min)/(2^b − 1), zero point round(−min/scale).
The result is returned de-quantised (the float values the quantised model computes with).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["fake_quantize", "quantize_model", "QUANTIZED_TYPES"]

QUANTIZED_TYPES = (nn.Linear, nn.Embedding)  # what weight-only quantisers of LLMs quantise


def fake_quantize(weight: Tensor, bits: int, group_size: int = 128, symmetric: bool = True) -> Tensor:
    """`weight` rounded to `bits`-bit levels with one scale per group of `group_size` consecutive entries of each
    row (the last dimension; a row shorter than a group, or not divisible by it, has one smaller last group)."""
    if not 2 <= bits <= 16:
        raise ValueError(f"bits must be in [2, 16], got {bits}")
    if group_size < 1:
        raise ValueError(f"group_size must be ≥ 1, got {group_size}")
    w = weight.detach().to(torch.float64)
    shape = w.shape
    rows = w.reshape(-1, shape[-1]) if w.dim() > 1 else w.reshape(1, -1)
    out = torch.empty_like(rows)
    for start in range(0, rows.shape[1], group_size):
        g = rows[:, start:start + group_size]
        if symmetric:
            qmax = 2 ** (bits - 1) - 1
            scale = g.abs().amax(dim=1, keepdim=True) / qmax
            scale = torch.where(scale > 0, scale, torch.ones_like(scale))
            out[:, start:start + group_size] = torch.clamp(torch.round(g / scale), -qmax, qmax) * scale
        else:
            qmax = 2 ** bits - 1
            lo, hi = g.amin(dim=1, keepdim=True), g.amax(dim=1, keepdim=True)
            scale = (hi - lo) / qmax
            scale = torch.where(scale > 0, scale, torch.ones_like(scale))
            zero = torch.round(-lo / scale)
            q = torch.clamp(torch.round(g / scale) + zero, 0, qmax)
            out[:, start:start + group_size] = (q - zero) * scale
    return out.reshape(shape).to(weight.dtype)


@torch.no_grad()
def quantize_model(model: nn.Module, bits: int, group_size: int = 128, symmetric: bool = True,
                   types: tuple[type, ...] = QUANTIZED_TYPES) -> int:
    """Quantise, in place, the weight of every module of `types` (linear layers and embeddings; norms and biases
    stay in full precision, as weight-only LLM quantisers leave them). Returns how many tensors were quantised."""
    n = 0
    for module in model.modules():
        if isinstance(module, types) and getattr(module, "weight", None) is not None:
            module.weight.copy_(fake_quantize(module.weight, bits, group_size, symmetric))
            n += 1
    return n
