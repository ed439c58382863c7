"""OFMU's maths as plain autograd on lists of tensors (one per parameter).

Inner objective (maximised):  Φ(θ) = L_f(θ) − β·cos(∇L_f, ∇L_r).
Outer objective (minimised):  F(θ) = L_r(θ) + ρ_k‖∇Φ(θ)‖²,   ∇F = ∇L_r + 2ρ_k·∇²Φ·∇Φ.

Bounded inner objective (optional): Φ_c = min(L_f, c) − β·cos. A forget loss such as the NLL has no maximum, so
Φ has no stationary point for the penalty to find and the inner ascent never stops; with a ceiling c (e.g. the
retain-only model's forget loss: "forgotten as much as a model that never saw the data") the forget term is flat
past c and only the decorrelation term is left (`capped_phi_gradient`).

∇Φ needs the gradient of the cosine, which by the chain rule is H_f·a + H_r·b with
a = ∂cos/∂g_f = g_r/(‖g_f‖‖g_r‖) − cos·g_f/‖g_f‖²  and  b = ∂cos/∂g_r (the same with f, r swapped).
Two ways to get Hessian-vector products, never materialising a Hessian:
- "autograd": double backward through the graph of the gradients (exact; needs create_graph support and
  memory for the graph of a gradient; the outer HVP of Φ is then a third-order derivative);
- "finite_difference": H·v ≈ (∇(θ + h·v̂) − ∇(θ − h·v̂))·‖v‖/(2h) with v̂ = v/‖v‖, using only first-order
  gradients (works wherever backward works, e.g. sharded models, at O(h²) error and 2 extra gradients each).

Sharded models (DeepSpeed ZeRO): the lists hold this rank's slices, and `reduce` sums a per-rank partial
scalar over the ranks (one all_reduce); every dot product and norm goes through it, so each rank computes the
same cosine, norms and step sizes as one process would.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = [
    "HVP_MODES",
    "RHO_SCHEDULES",
    "PhiGradient",
    "Reduce",
    "capped_phi_gradient",
    "clip_scale",
    "cosine_partials",
    "distance",
    "dot",
    "fd_hvp",
    "norm",
    "phi_gradient_autograd",
    "phi_gradient_fd",
    "rho_at",
]

HVP_MODES = ("autograd", "finite_difference")
RHO_SCHEDULES = ("constant", "linear", "geometric")
Grads = list[Tensor]


Reduce = Callable[[Tensor], Tensor]


def dot(a: Sequence[Tensor], b: Sequence[Tensor], reduce: Reduce | None = None) -> Tensor:
    total = sum(((x.double() * y.double()).sum() for x, y in zip(a, b)), torch.zeros((), dtype=torch.float64))
    return total if reduce is None else reduce(total)


def norm(a: Sequence[Tensor], reduce: Reduce | None = None) -> Tensor:
    return dot(a, a, reduce).sqrt()


def distance(a: Sequence[Tensor], b: Sequence[Tensor], reduce: Reduce | None = None) -> Tensor:
    """‖a − b‖, one tensor's difference at a time (never a second copy of all the weights)."""
    total = sum(((x.double() - y.double()).pow(2).sum() for x, y in zip(a, b)), torch.zeros((), dtype=torch.float64))
    return (total if reduce is None else reduce(total)).sqrt()


def cosine_partials(g_f: Sequence[Tensor], g_r: Sequence[Tensor], eps: float = 1e-12,
                    reduce: Reduce | None = None) -> tuple[Tensor, Grads, Grads]:
    """cos(g_f, g_r) and its partial derivatives a = ∂cos/∂g_f, b = ∂cos/∂g_r (lists like the inputs)."""
    nf, nr = norm(g_f, reduce).clamp_min(eps), norm(g_r, reduce).clamp_min(eps)
    cos = dot(g_f, g_r, reduce) / (nf * nr)
    a = [(r / (nf * nr) - cos * f / nf**2).to(f.dtype) for f, r in zip(g_f, g_r)]
    b = [(f / (nf * nr) - cos * r / nr**2).to(r.dtype) for f, r in zip(g_f, g_r)]
    return cos, a, b


@dataclass
class PhiGradient:
    grad: Grads          # ∇Φ (with a graph when requested, for the outer HVP)
    grad_retain: Grads   # ∇L_r at the same θ (detached)
    loss_forget: Tensor
    loss_retain: Tensor
    cosine: Tensor
    grad_forget: Grads | None = None  # ∇L_f at the same θ (with a graph when ∇Φ has one)


def phi_gradient_autograd(loss_forget: Tensor, loss_retain: Tensor, params: Sequence[Tensor], beta: float,
                          create_graph: bool = False, eps: float = 1e-12) -> PhiGradient:
    """∇Φ by double backward. create_graph=True keeps its graph so an outer HVP can differentiate it again."""
    need_graph = beta != 0.0 or create_graph
    g_f = list(torch.autograd.grad(loss_forget, params, create_graph=need_graph, allow_unused=True))
    g_r = list(torch.autograd.grad(loss_retain, params, create_graph=need_graph, allow_unused=True))
    g_f = [torch.zeros_like(p) if g is None else g for g, p in zip(g_f, params)]
    g_r = [torch.zeros_like(p) if g is None else g for g, p in zip(g_r, params)]
    nf, nr = norm(g_f).clamp_min(eps), norm(g_r).clamp_min(eps)
    cos = dot(g_f, g_r) / (nf * nr)
    if beta == 0.0:
        grad = g_f  # Φ = L_f: no decorrelation term, no second derivatives
    else:
        # ∇(L_f − β cos) = g_f − β(H_f a + H_r b): one backward of the scalar β·cos through both gradient graphs.
        cos_grad = torch.autograd.grad((cos * beta).to(loss_forget.dtype), params, create_graph=create_graph,
                                       allow_unused=True)
        grad = [f - (torch.zeros_like(p) if c is None else c) for f, c, p in zip(g_f, cos_grad, params)]
    if not create_graph:
        grad, g_f = [g.detach() for g in grad], [g.detach() for g in g_f]
    return PhiGradient(grad, [g.detach() for g in g_r], loss_forget.detach(), loss_retain.detach(), cos.detach(),
                       g_f)


def fd_hvp(grad_at: Callable[[Sequence[Tensor] | None, float], Grads], v: Sequence[Tensor],
           h: float = 1e-3, reduce: Reduce | None = None) -> Grads:
    """H·v by central differences of a gradient function: grad_at(direction, step) = ∇ at θ + step·direction.

    The step is h along the unit vector v/‖v‖, so h is a distance in parameter space whatever the size of v.
    """
    nv = float(norm(v, reduce))
    if nv == 0.0 or not math.isfinite(nv):
        return [torch.zeros_like(x) for x in v]
    unit = [x / nv for x in v]
    plus, minus = grad_at(unit, h), grad_at(unit, -h)
    return [(p - m) * (nv / (2 * h)) for p, m in zip(plus, minus)]


def phi_gradient_fd(grads_at: Callable[[Sequence[Tensor] | None, float], tuple[Grads, Grads, Tensor, Tensor]],
                    beta: float, h: float = 1e-3, eps: float = 1e-12, reduce: Reduce | None = None) -> PhiGradient:
    """∇Φ from first-order gradients only. grads_at(direction, step, which) → (∇L_f, ∇L_r, L_f, L_r) at
    θ + step·dir (direction None: at θ); which = "forget" / "retain" may leave the other gradient out (None).
    The cosine term uses H_f·a and H_r·b by central differences: 4 extra single-loss gradients."""
    g_f, g_r, loss_f, loss_r = grads_at(None, 0.0, which="both")
    cos, a, b = cosine_partials(g_f, g_r, eps, reduce)
    if beta == 0.0:
        return PhiGradient(list(g_f), list(g_r), loss_f, loss_r, cos, list(g_f))
    hf_a = fd_hvp(lambda d, s: grads_at(d, s, which="forget")[0], a, h, reduce)
    del a
    hr_b = fd_hvp(lambda d, s: grads_at(d, s, which="retain")[1], b, h, reduce)
    grad = [f - beta * (x + y) for f, x, y in zip(g_f, hf_a, hr_b)]
    return PhiGradient(grad, list(g_r), loss_f, loss_r, cos, list(g_f))


def capped_phi_gradient(pg: PhiGradient, ceiling: float | None) -> Grads:
    """∇Φ_c for Φ_c = min(L_f, c) − β·cos: ∇Φ below the ceiling, ∇Φ − ∇L_f (the decorrelation term) at or above it."""
    if ceiling is None or float(pg.loss_forget) < ceiling:
        return pg.grad
    return [g - f for g, f in zip(pg.grad, pg.grad_forget)]


def clip_scale(grads: Sequence[Tensor], max_norm: float | None, reduce: Reduce | None = None) -> float:
    """The factor that scales `grads` down to global norm ≤ max_norm (1 when it is within, or max_norm is None)."""
    if max_norm is None:
        return 1.0
    n = float(norm(grads, reduce))
    return min(1.0, max_norm / n) if n > 0 else 1.0


def rho_at(k: int, schedule: str = "constant", rho0: float = 1.0, rate: float = 0.0,
           cap: float | None = None) -> float:
    """ρ_k for outer round k ≥ 0: constant ρ0, linear ρ0 + rate·k, or geometric ρ0·rate^k; at most `cap`."""
    if schedule not in RHO_SCHEDULES:
        raise ValueError(f"schedule={schedule!r}: choose one of {RHO_SCHEDULES}")
    if rho0 < 0:
        raise ValueError(f"rho0 must be ≥ 0, got {rho0}")
    if schedule == "constant":
        rho = rho0
    elif schedule == "linear":
        rho = rho0 + rate * k
    else:
        if rate <= 0:
            raise ValueError(f"a geometric schedule needs rate > 0 (e.g. 1.05), got {rate}")
        # exp/log form: no overflow for long runs before the cap applies
        rho = math.inf if rho0 > 0 and k * math.log(rate) > 700 else rho0 * rate**k
    if cap is not None:
        rho = min(rho, cap)
    return max(rho, 0.0)
