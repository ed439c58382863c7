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


STATS_CHUNK = 1 << 22  # elements converted to float64 at a time: bounded extra memory for any tensor size


def _stats64(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(a·a, b·b, a·b) accumulated in float64 whatever the inputs' dtype (fp32, bf16, fp16): each chunk of the
    inputs is converted exactly once, so the temporary memory is two float64 chunks for any tensor size."""
    if a.dtype == torch.float64 and b.dtype == torch.float64 and a.numel() <= STATS_CHUNK:
        return torch.dot(a, a), torch.dot(b, b), torch.dot(a, b)
    out = torch.zeros(3, dtype=torch.float64, device=a.device)
    for start in range(0, max(a.numel(), 1), STATS_CHUNK):
        x, y = a[start:start + STATS_CHUNK].double(), b[start:start + STATS_CHUNK].double()
        out += torch.stack((torch.dot(x, x), torch.dot(y, y), torch.dot(x, y)))
    return out[0], out[1], out[2]


def tensor_stats(grads_r: Sequence[Tensor], grads_f: Sequence[Tensor]) -> tuple[Tensor, Tensor, Tensor]:
    """Per-tensor ‖g_r‖², ‖g_f‖², g_r·g_f in float64, from gradients of any floating dtype.

    In float32 the squares overflow for ‖g‖ ≳ 1.8e19 and underflow for ‖g‖ ≲ 1e-19, and the cancellation in
    ‖g_r⊥‖² = ‖g_r‖² − κ²/‖g_f‖² loses every digit once sin θ ≲ 1e-3 (fp32 statistics then pick a branch at
    random and can break the trust region); float64 resolves sin²θ down to ~1e-14."""
    if len(grads_r) != len(grads_f):
        raise ValueError(f"{len(grads_r)} retain gradients vs {len(grads_f)} forget gradients")
    rr, ff, rf = [], [], []
    for gr, gf in zip(grads_r, grads_f):
        if gr.shape != gf.shape:
            raise ValueError(f"gradient shapes differ: {tuple(gr.shape)} vs {tuple(gf.shape)}")
        aa, bb, ab = _stats64(gr.reshape(-1), gf.reshape(-1))
        rr.append(aa)
        ff.append(bb)
        rf.append(ab)
    return torch.stack(rr), torch.stack(ff), torch.stack(rf)


def block_stats(per_tensor: Tensor, index: Tensor, num_blocks: int) -> Tensor:
    """Sum per-tensor statistics into their blocks."""
    out = torch.zeros(num_blocks, dtype=per_tensor.dtype, device=per_tensor.device)
    return out.index_add_(0, index.to(per_tensor.device), per_tensor)


def _round_into(x: Tensor, dtype: torch.dtype) -> Tensor:
    """float64 → dtype; for half-precision types toward zero, so that no element grows in magnitude."""
    y = x.to(dtype)
    if dtype in (torch.float16, torch.bfloat16):
        grew = y.double().abs() > x.abs()
        y = torch.where(grew, torch.nextafter(y, torch.zeros_like(y)), y)
    return y


def combine_into(
    out: Sequence[Tensor], grads_f: Sequence[Tensor], grads_r: Sequence[Tensor], coef_f: Sequence[float],
    coef_r: Sequence[float], precise: Sequence[bool] | None = None,
) -> None:
    """out[k] ← coef_f[k]·grads_f[k] + coef_r[k]·grads_r[k], in place (out may alias grads_f).

    precise[k]: compute that combination in float64 and round once into out[k]'s dtype. Needed where the two
    terms nearly cancel (almost colinear gradients, large opposite coefficients): in float32 the cancellation
    error would be a visible fraction of the result. Into bf16/fp16 the rounding is toward zero, element by
    element, so the stored update is never longer than the exact one (the trust region holds at any dtype)."""
    for k, (o, gf, gr, a, b) in enumerate(zip(out, grads_f, grads_r, coef_f, coef_r)):
        if precise is not None and precise[k] and o.dtype != torch.float64:
            if not o.is_contiguous():
                o.copy_(_round_into(gf.double() * a + gr.double() * b, o.dtype))
                continue
            flat_o, flat_f, flat_r = o.view(-1), gf.reshape(-1), gr.reshape(-1)
            for start in range(0, flat_o.numel(), STATS_CHUNK):
                sl = slice(start, start + STATS_CHUNK)
                flat_o[sl] = _round_into(flat_f[sl].double() * a + flat_r[sl].double() * b, o.dtype)
        elif o is gf:
            o.mul_(a).add_(gr, alpha=b)
        else:
            torch.add(gf.mul(a), gr, alpha=b, out=o)
