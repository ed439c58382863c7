"""Blocks ("layers") of a parameter list, the three per-block gradient statistics, and applying δ = a·g_f + b·g_r.

These are the only places HAMU touches full gradient tensors; everything else works on L scalars.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

__all__ = ["GROUPINGS", "block_index", "tensor_stats", "block_stats", "combine_into"]

GROUPINGS = ("parameter", "module", "global")


def block_index(named_params: Sequence[tuple[str, nn.Parameter]], grouping: str = "parameter") -> tuple[Tensor, list[str]]:
    """Map each parameter tensor to a block id.

    parameter: every tensor is its own block (the paper's "layer");
    module:    tensors of one module (same name up to the last dot) share a block, e.g. conv weight + bias;
    global:    one block over all parameters (the single-constraint ablation).
    Returns (index tensor of length #tensors, block names).
    """
    if grouping not in GROUPINGS:
        raise ValueError(f"grouping={grouping!r}: choose one of {GROUPINGS}")
    if not named_params:
        raise ValueError("no trainable parameters: nothing to unlearn (are all parameters frozen?)")
    names: list[str] = []
    ids: list[int] = []
    seen: dict[str, int] = {}
    for name, _ in named_params:
        if grouping == "parameter":
            key = name
        elif grouping == "module":
            key = name.rsplit(".", 1)[0] if "." in name else name
        else:
            key = "all"
        if key not in seen:
            seen[key] = len(names)
            names.append(key)
        ids.append(seen[key])
    return torch.tensor(ids, dtype=torch.long), names


def tensor_stats(grads_r: Sequence[Tensor], grads_f: Sequence[Tensor]) -> tuple[Tensor, Tensor, Tensor]:
    """Per-tensor ‖g_r‖², ‖g_f‖², g_r·g_f, accumulated in fp32 (or better)."""
    if len(grads_r) != len(grads_f):
        raise ValueError(f"{len(grads_r)} retain gradients vs {len(grads_f)} forget gradients")
    rr, ff, rf = [], [], []
    for gr, gf in zip(grads_r, grads_f):
        if gr.shape != gf.shape:
            raise ValueError(f"gradient shapes differ: {tuple(gr.shape)} vs {tuple(gf.shape)}")
        a = gr.reshape(-1)
        b = gf.reshape(-1)
        if a.dtype not in (torch.float32, torch.float64):
            a, b = a.float(), b.float()
        rr.append(torch.dot(a, a))
        ff.append(torch.dot(b, b))
        rf.append(torch.dot(a, b))
    return torch.stack(rr), torch.stack(ff), torch.stack(rf)


def block_stats(per_tensor: Tensor, index: Tensor, num_blocks: int) -> Tensor:
    """Sum per-tensor statistics into their blocks."""
    out = torch.zeros(num_blocks, dtype=per_tensor.dtype, device=per_tensor.device)
    return out.index_add_(0, index.to(per_tensor.device), per_tensor)


def combine_into(
    out: Sequence[Tensor], grads_f: Sequence[Tensor], grads_r: Sequence[Tensor], coef_f: Sequence[float], coef_r: Sequence[float]
) -> None:
    """out[k] ← coef_f[k]·grads_f[k] + coef_r[k]·grads_r[k], in place (out may alias grads_f)."""
    for o, gf, gr, a, b in zip(out, grads_f, grads_r, coef_f, coef_r):
        if o is gf:
            o.mul_(a).add_(gr, alpha=b)
        else:
            torch.add(gf.mul(a), gr, alpha=b, out=o)
