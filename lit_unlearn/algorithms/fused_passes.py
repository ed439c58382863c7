"""HAMU's two passes over the full gradients, each fused by torch.compile into one kernel: the float64 statistics
(‖g_r‖², ‖g_f‖², g_r·g_f) and the bf16 combination δ = a·g_f + b·g_r (float32 arithmetic, truncated toward zero).

The eager forms (`blocks.tensor_stats`, `blocks.combine_into`) are bound by memory traffic on a GPU: each chunk is
converted to float64 (or float32) in memory before its dot products or its rounding. Fused, each pass reads the
bf16 gradients once. Same arithmetic: float64 sums of exact products; the combination where `combine_arithmetic`
chose float32. On one H200, 1.75 B bf16 elements: statistics 45.0 → 7.2 ms, combination 29.0 → 5.2 ms
(benchmarks/hamu/fused_passes.py). Anything the fused kernel does not cover runs the eager form. Opt-in
(HAMUModule(fused_passes=True)): a Llama-2-7B trainer run with it has not yet been seen to finish (docs/guide/hamu.md).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch
from torch import Tensor

from lit_unlearn.algorithms.blocks import combine_into, tensor_stats, truncate_to_bf16

__all__ = ["fused_tensor_stats", "fused_combine_into"]

BACKEND = "inductor"  # torch.compile's backend ("eager" runs the same traced arithmetic unfused: for tests on CPU)


def _stats(a: Tensor, b: Tensor) -> Tensor:
    x, y = a.double(), b.double()
    return torch.stack(((x * x).sum(), (y * y).sum(), (x * y).sum()))


def _combine_bf16(gf: Tensor, gr: Tensor, a: Tensor, b: Tensor) -> Tensor:
    return truncate_to_bf16(gf.float() * a + gr.float() * b)  # a, b: 0-d tensors, so no recompilation per value


@functools.cache
def _compiled(fn, backend: str):
    return torch.compile(fn, dynamic=True, backend=backend)


def fused_tensor_stats(grads_r: Sequence[Tensor], grads_f: Sequence[Tensor]) -> tuple[Tensor, Tensor, Tensor]:
    """`tensor_stats`, one fused kernel per tensor (float32, bf16 and fp16 gradients; others: the eager form)."""
    if any(g.dtype not in (torch.float32, torch.bfloat16, torch.float16) for g in (*grads_r, *grads_f)):
        return tensor_stats(grads_r, grads_f)
    if len(grads_r) != len(grads_f) or any(a.shape != b.shape for a, b in zip(grads_r, grads_f)):
        return tensor_stats(grads_r, grads_f)  # raises its one-line error
    kernel = _compiled(_stats, BACKEND)
    stats = torch.stack([kernel(a.reshape(-1), b.reshape(-1)) for a, b in zip(grads_r, grads_f)], 1)
    return stats[0], stats[1], stats[2]


def fused_combine_into(out: Sequence[Tensor], grads_f: Sequence[Tensor], grads_r: Sequence[Tensor],
                       coef_f: Tensor, coef_r: Tensor, arithmetic: Sequence[torch.dtype]) -> None:
    """`combine_into` with the coefficients as 1-D float64 tensors (one entry per tensor, on the gradients' device):
    bf16 tensors combined in float32 take the fused kernel, the rest the eager form."""
    kernel = _compiled(_combine_bf16, BACKEND)
    eager = []
    for k, (o, gf, gr) in enumerate(zip(out, grads_f, grads_r)):
        if o.dtype == torch.bfloat16 and arithmetic[k] == torch.float32 and o.is_contiguous():
            o.view(-1).copy_(kernel(gf.reshape(-1), gr.reshape(-1), coef_f[k], coef_r[k]))
        else:
            eager.append(k)
    if eager:
        cf, cr = coef_f[eager].tolist(), coef_r[eager].tolist()
        combine_into([out[k] for k in eager], [grads_f[k] for k in eager], [grads_r[k] for k in eager], cf, cr,
                     [arithmetic[k] for k in eager])
