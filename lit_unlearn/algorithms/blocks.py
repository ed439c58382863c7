"""Blocks ("layers") of a parameter list, the three per-block gradient statistics, and applying δ = a·g_f + b·g_r.

These are the only places HAMU touches full gradient tensors; everything else works on L scalars.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

__all__ = ["GROUPINGS", "COMBINE_PRECISIONS", "block_index", "tensor_stats", "block_stats", "combine_arithmetic",
           "combine_into"]

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


HALF_TYPES = (torch.float16, torch.bfloat16)
COMBINE_PRECISIONS = ("auto", "float64")
# A combination computed in a type of unit roundoff u errs by at most 2u·(|a|‖g_f‖ + |b|‖g_r‖) = 2u·c·‖δ‖ (c the
# block's conditioning). Where that could exceed half of the 1e-6 trust-region tolerance, compute in float64.
PRECISE_COMBINE_ABOVE = 5e-7


def combine_arithmetic(dtype: torch.dtype, conditioning: Sequence[float], precision: str = "auto") -> list[torch.dtype]:
    """Per tensor, the type its combination is computed in (then rounded once into `dtype`; toward zero for bf16 and
    fp16, so the stored update is never longer than the computed one).

    auto:    float32 for bf16/fp16 gradients and the gradients' own type otherwise, wherever its error bound
             2u·c stays under PRECISE_COMBINE_ABOVE; float64 elsewhere. The trust region holds as with float64.
    float64: every bf16/fp16 combination in float64 (the earlier implementation; kept to measure against)."""
    if precision not in COMBINE_PRECISIONS:
        raise ValueError(f"combine precision {precision!r}: choose one of {COMBINE_PRECISIONS}")
    if dtype == torch.float64 or (dtype in HALF_TYPES and precision == "float64"):
        return [torch.float64] * len(conditioning)
    work = torch.float32 if dtype in HALF_TYPES else dtype
    u = torch.finfo(work).eps / 2
    return [torch.float64 if 2 * u * c > PRECISE_COMBINE_ABOVE else work for c in conditioning]


def truncate_to_bf16(x: Tensor) -> Tensor:
    """float32 → bf16 toward zero: bf16 is float32's upper 16 bits, and truncating a sign-magnitude pattern rounds
    toward zero, in one pass."""
    return (x.view(torch.int32) >> 16).to(torch.int16).view(torch.bfloat16)


def _round_into(x: Tensor, dtype: torch.dtype) -> Tensor:
    """x (float64 or float32) → dtype; for half-precision types toward zero, so that no element grows in magnitude."""
    if x.dtype == dtype:
        return x
    if x.dtype == torch.float32 and dtype == torch.bfloat16:
        return truncate_to_bf16(x)
    y = x.to(dtype)
    if dtype in HALF_TYPES:
        grew = y.to(x.dtype).abs() > x.abs()  # exact: bf16 and fp16 values are float32 (and float64) values
        y = torch.where(grew, torch.nextafter(y, torch.zeros_like(y)), y)
    return y


def _combined(gf: Tensor, gr: Tensor, a: float, b: float, work: torch.dtype) -> Tensor:
    """a·gf + b·gr computed in `work` (the inputs convert exactly: every bf16/fp16/fp32 value is a float64 value)."""
    if work == torch.float64:
        return gf.double() * a + gr.double() * b
    return gf.to(work, copy=True).mul_(a).add_(gr, alpha=b)  # float32: two passes fewer than the form above


def combine_into(
    out: Sequence[Tensor], grads_f: Sequence[Tensor], grads_r: Sequence[Tensor], coef_f: Sequence[float],
    coef_r: Sequence[float], arithmetic: Sequence[torch.dtype] | None = None,
) -> None:
    """out[k] ← coef_f[k]·grads_f[k] + coef_r[k]·grads_r[k], in place (out may alias grads_f).

    arithmetic[k]: the type to compute that combination in (`combine_arithmetic`); None: out[k]'s own type. A wider
    type is used where the two terms nearly cancel (almost colinear gradients, large opposite coefficients), or where
    out[k] is bf16/fp16; the result is rounded once into out[k]'s dtype, toward zero for bf16/fp16, element by
    element, so the stored update is never longer than the computed one (the trust region holds at any dtype)."""
    for k, (o, gf, gr, a, b) in enumerate(zip(out, grads_f, grads_r, coef_f, coef_r)):
        work = o.dtype if arithmetic is None else arithmetic[k]
        if work != o.dtype:
            if not o.is_contiguous():
                o.copy_(_round_into(_combined(gf, gr, a, b, work), o.dtype))
                continue
            flat_o, flat_f, flat_r = o.view(-1), gf.reshape(-1), gr.reshape(-1)
            for start in range(0, flat_o.numel(), STATS_CHUNK):  # bounded temporary memory for any tensor size
                sl = slice(start, start + STATS_CHUNK)
                flat_o[sl] = _round_into(_combined(flat_f[sl], flat_r[sl], a, b, work), o.dtype)
        elif o is gf:
            o.mul_(a).add_(gr, alpha=b)
        else:
            torch.add(gf.mul(a), gr, alpha=b, out=o)
