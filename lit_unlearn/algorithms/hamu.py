"""HAMU's per-block constrained step, in closed form, on gradient *statistics* only.

Each block i (a parameter tensor, a module, or all parameters at once) solves

    HAMU-Q:  min_δ  g_r·δ      s.t.  g_f·δ ≥ Q_i,   ‖δ‖ ≤ R_i = η‖g_r⁽ⁱ⁾‖
    HAMU-U:  max_δ  g_f·δ      s.t. −g_r·δ ≥ U_i,   ‖δ‖ ≤ R_i = η‖g_f⁽ⁱ⁾‖

(g_f·δ is the first-order increase of the forget loss, −g_r·δ the decrease of the retain loss.)
The solution always lies in span(g_f, g_r), so a block's answer is two coefficients, δ_i = a_i g_f + b_i g_r,
and everything needed to find them is three scalars per block: ‖g_r‖², ‖g_f‖², g_r·g_f. That keeps the
solver independent of the parameter layout (and of sharding: the scalars are sums of local-shard sums).

Branch order (it also keeps every sqrt argument non-negative):
    infeasible  Q_i > R_i‖g_f‖        no δ in the ball meets the quota -> `infeasible` policy
    direct      κ ≤ κ1 = −Q_i‖g_r‖/R_i  the retain step −R ĝ_r already meets the quota
    colinear    ‖g_r⊥‖ ≈ 0             δ = (Q_i/‖g_f‖²) g_f (the minimum-norm optimum)
    corrected   otherwise              δ = (Q_i/‖g_f‖²) g_f − sqrt(R_i² − Q_i²/‖g_f‖²) ĝ_r⊥
with κ = g_r·g_f and g_r⊥ = g_r − (κ/‖g_f‖²) g_f. HAMU-U is the same problem with g_r → −g_f, g_f → −g_r.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = [
    "Branch",
    "BlockSolution",
    "HamuStep",
    "clip_scales",
    "allocate_quota",
    "solve_blocks",
    "hamu_step",
    "QUOTA_ALLOCATIONS",
    "INFEASIBLE_POLICIES",
    "VARIANTS",
    "colinear_tolerance",
]

QUOTA_ALLOCATIONS = ("norm_product", "uniform", "softmax_dot")
INFEASIBLE_POLICIES = ("best_effort", "skip")
VARIANTS = ("Q", "U")

# Colinearity. The corrected branch divides by ‖g_r⊥‖, obtained by cancellation: ‖g_r⊥‖² = ‖g_r‖² − κ²/‖g_f‖².
# Each statistic is a float64 sum of n products, relative rounding error ≲ log2(n)·ε, so ‖g_r⊥‖² carries an
# absolute error of ~(3 + 2·log2 n)·ε·‖g_r‖²; ‖δ‖ inherits the relative error of ‖g_r⊥‖. For ‖δ‖ ≤ R(1 + 1e-6)
# the corrected branch is used only where that relative error is below 1e-6 (with a safety factor 4); below it
# the block takes the colinear step, whose norm is exact and which gives up at most R·‖g_r‖·sin θ of retain gain.
EPS64 = float(torch.finfo(torch.float64).eps)
TRUST_RTOL = 1e-6  # ‖δ_i‖ ≤ R_i(1 + TRUST_RTOL)


def colinear_tolerance(n_elements: Tensor | float) -> Tensor:
    """Relative threshold on ‖g_r⊥‖²/‖g_r‖² below which a block of n elements counts as colinear."""
    n = torch.as_tensor(n_elements, dtype=torch.float64).clamp_min(2.0)
    return 4.0 * (3.0 + 2.0 * torch.log2(n)) * EPS64 / (2.0 * TRUST_RTOL)


DEFAULT_BLOCK_SIZE = float(2**40)  # when the block sizes are not given: the loosest (largest) plausible block


class Branch(enum.IntEnum):
    INFEASIBLE = 0
    DIRECT = 1
    COLINEAR = 2
    CORRECTED = 3


@dataclass(frozen=True)
class BlockSolution:
    """Per-block solution of  min a·δ  s.t.  b·δ ≥ q,  ‖δ‖ ≤ radius  as δ = coef_b·b + coef_a·a.

    `a` plays the retain gradient's role and `b` the forget gradient's (in HAMU-Q; swapped in HAMU-U).
    All fields are 1-D tensors with one entry per block.
    """

    coef_a: Tensor
    coef_b: Tensor
    branch: Tensor  # Branch codes (int64)
    kappa: Tensor  # a·b
    kappa1: Tensor  # direct-branch threshold −q‖a‖/R
    kappa2: Tensor  # irreconcilability threshold ‖a‖·sqrt(‖b‖² − q²/R²); nan where infeasible
    feasible: Tensor  # q ≤ R‖b‖
    reachable_gain: Tensor  # max b·δ over the ball without worsening a·δ (i.e. with a·δ ≤ 0)


def _safe_div(num: Tensor, den: Tensor) -> Tensor:
    return torch.where(den > 0, num / torch.where(den > 0, den, torch.ones_like(den)), torch.zeros_like(num))


def solve_blocks(
    aa: Tensor,
    bb: Tensor,
    ab: Tensor,
    quota: Tensor,
    radius: Tensor,
    infeasible: str = "best_effort",
    sizes: Tensor | None = None,
) -> BlockSolution:
    """Closed-form solution per block from its statistics ‖a‖², ‖b‖², a·b, its quota and trust radius.
    `sizes` (elements per block) sets the colinearity tolerance; None assumes the largest plausible block."""
    if infeasible not in INFEASIBLE_POLICIES:
        raise ValueError(f"infeasible={infeasible!r}: choose one of {INFEASIBLE_POLICIES}")
    for name, t in (("‖g_r‖²", aa), ("‖g_f‖²", bb), ("g_r·g_f", ab), ("quota", quota), ("radius", radius)):
        if not torch.isfinite(t).all():
            bad = torch.nonzero(~torch.isfinite(t)).flatten().tolist()
            raise FloatingPointError(
                f"HAMU got non-finite {name} in block(s) {bad[:10]}: a loss or gradient is NaN/inf. "
                "Lower the learning rate η, check the inputs, or use a higher-precision dtype."
            )
    norm_a, norm_b = aa.sqrt(), bb.sqrt()
    kappa = ab
    # Feasible iff the quota can be met inside the ball (q ≤ 0 is always met by δ = 0).
    feasible = (quota <= radius * norm_b) | (quota <= 0)

    # Direct branch: −R â meets the quota.
    kappa1 = -_safe_div(quota * norm_a, radius)
    direct_coef_a = -_safe_div(radius, norm_a)
    is_direct = feasible & (kappa <= kappa1)

    # Corrected branch: q/‖b‖² · b − s · a⊥/‖a⊥‖,  a⊥ = a − (κ/‖b‖²) b,  ‖a⊥‖² = ‖a‖² − κ²/‖b‖².
    perp_sq = (aa - _safe_div(kappa * kappa, bb)).clamp_min(0.0)
    tol = colinear_tolerance(DEFAULT_BLOCK_SIZE if sizes is None else sizes.to(aa.device))
    is_colinear = perp_sq <= tol * aa
    s = (radius * radius - _safe_div(quota * quota, bb)).clamp_min(0.0).sqrt()
    inv_perp = _safe_div(torch.ones_like(perp_sq), perp_sq.sqrt())
    corr_coef_b = _safe_div(quota, bb) + s * inv_perp * _safe_div(kappa, bb)
    corr_coef_a = -s * inv_perp

    branch = torch.full_like(aa, int(Branch.CORRECTED), dtype=torch.int64)
    branch = torch.where(feasible & ~is_direct & is_colinear, int(Branch.COLINEAR), branch)
    branch = torch.where(is_direct, int(Branch.DIRECT), branch)
    branch = torch.where(~feasible, int(Branch.INFEASIBLE), branch)

    zeros = torch.zeros_like(aa)
    if infeasible == "best_effort":
        # Closest to the quota the ball allows: δ = R b̂ (HAMU-Q: most forget gain; HAMU-U: most retain gain).
        inf_coef_a, inf_coef_b = zeros, _safe_div(radius, norm_b)
    else:  # "skip": leave the block untouched.
        inf_coef_a, inf_coef_b = zeros, zeros

    coef_a = torch.where(branch == Branch.CORRECTED, corr_coef_a, zeros)
    coef_a = torch.where(branch == Branch.DIRECT, direct_coef_a, coef_a)
    coef_a = torch.where(branch == Branch.INFEASIBLE, inf_coef_a, coef_a)
    coef_b = torch.where(branch == Branch.CORRECTED, corr_coef_b, zeros)
    coef_b = torch.where(branch == Branch.COLINEAR, _safe_div(quota, bb), coef_b)
    coef_b = torch.where(branch == Branch.INFEASIBLE, inf_coef_b, coef_b)

    # κ2 = ‖a‖·sqrt(‖b‖² − q²/R²): beyond it no δ in the ball meets the quota without a·δ > 0.
    kappa2_sq = bb - _safe_div(quota * quota, radius * radius)
    kappa2 = torch.where(feasible & (radius > 0), norm_a * kappa2_sq.clamp_min(0.0).sqrt(), torch.nan)
    # Largest b·δ with ‖δ‖ ≤ R and a·δ ≤ 0: R‖b‖ when κ ≤ 0, else R‖b‖ sin θ = R·sqrt(‖a‖²‖b‖² − κ²)/‖a‖.
    sin_gain = radius * _safe_div((aa * bb - kappa * kappa).clamp_min(0.0).sqrt(), norm_a)
    reachable_gain = torch.where(kappa <= 0, radius * norm_b, sin_gain)
    return BlockSolution(coef_a, coef_b, branch, kappa, kappa1, kappa2, feasible, reachable_gain)


def clip_scales(rr_total: Tensor, ff_total: Tensor, max_norm: float | None) -> tuple[Tensor, Tensor]:
    """Scale factors that clip g_r and g_f to global norm ≤ max_norm (scale down only, never up)."""
    one = torch.ones_like(rr_total)
    if max_norm is None or max_norm <= 0:
        return one, torch.ones_like(ff_total)

    def scale(sq: Tensor) -> Tensor:
        norm = sq.sqrt()
        return torch.where(norm > max_norm, max_norm / norm.clamp_min(1e-30), one)

    return scale(rr_total), scale(ff_total)


def allocate_quota(total: float, rr: Tensor, ff: Tensor, rf: Tensor, allocation: str = "norm_product") -> Tensor:
    """Split the total quota over blocks.

    norm_product: Q_i ∝ ‖g_r⁽ⁱ⁾‖‖g_f⁽ⁱ⁾‖ (the paper's default; blocks where either gradient vanishes get 0)
    uniform:      Q_i = Q / #blocks (the ablation)
    softmax_dot:  Q_i ∝ exp(−g_r⁽ⁱ⁾·g_f⁽ⁱ⁾) (more quota where the gradients already disagree)
    """
    n = rr.numel()
    if allocation == "norm_product":
        w = rr.sqrt() * ff.sqrt()  # not (rr·ff).sqrt(): that over/underflows outside ~[1e-154, 1e154]
        denom = w.sum()
        return total * w / denom if denom > 0 else torch.zeros_like(w)
    if allocation == "uniform":
        return torch.full_like(rr, total / n)
    if allocation == "softmax_dot":
        return total * torch.softmax(-rf, dim=0)
    raise ValueError(f"quota allocation {allocation!r}: choose one of {QUOTA_ALLOCATIONS}")


@dataclass(frozen=True)
class HamuStep:
    """A full HAMU step for raw (unclipped) gradients: δ_i = coef_f[i]·G_f⁽ⁱ⁾ + coef_r[i]·G_r⁽ⁱ⁾."""

    coef_f: Tensor
    coef_r: Tensor
    solution: BlockSolution  # in the clipped problem's coordinates (swapped roles for HAMU-U)
    global_solution: BlockSolution  # the same problem on the concatenated gradient (one block, total quota)
    quota: Tensor  # per-block Q_i (or U_i)
    radius: Tensor  # per-block R_i
    retain_norm: Tensor  # ‖G_r‖ before clipping
    forget_norm: Tensor  # ‖G_f‖ before clipping
    pred_delta_forget: Tensor  # first-order predicted L_f change, G_f·δ
    pred_delta_retain: Tensor  # first-order predicted L_r change, G_r·δ
    total_quota: float
    variant: str
    conditioning: Tensor | None = None  # per block (|a|‖G_f‖ + |b|‖G_r‖)/‖δ‖: the cancellation the combine faces

    @property
    def reachable_gain(self) -> float:
        """Σ_i of the largest quota-side gain block i can reach without hurting the other objective."""
        return float(self.solution.reachable_gain.sum())

    @property
    def irreconcilable(self) -> bool:
        """Aggregate stopping test: even with no retain degradation allowed, the reachable gain is below quota.
        Per block this is exactly κ_i > κ2_i; with one block it is the paper's κ > κ2."""
        return self.reachable_gain < self.total_quota

    def is_irreconcilable(self, criterion: str = "aggregate", epsilon: float = 0.0) -> bool:
        """The κ₂ stopping rule. `aggregate`: reachable gain < Q + ε (ε in quota units; the per-layer rule).
        `global`: κ > κ2 − ε on the concatenated gradient (the paper's single-constraint form; ε in κ units)."""
        if criterion == "aggregate":
            return self.reachable_gain < self.total_quota + epsilon
        if criterion == "global":
            g = self.global_solution
            k2 = g.kappa2.item()
            # κ2 is undefined (nan) when even the unconstrained ball cannot meet Q: irreconcilable.
            return bool(k2 != k2 or g.kappa.item() > k2 - epsilon)
        raise ValueError(f"criterion={criterion!r}: choose 'aggregate' or 'global'")

    def branch_counts(self) -> dict[str, int]:
        counts = torch.bincount(self.solution.branch, minlength=len(Branch)).tolist()
        return {b.name.lower(): counts[b.value] for b in Branch}


def hamu_step(
    rr: Tensor,
    ff: Tensor,
    rf: Tensor,
    *,
    eta: float,
    quota: float,
    variant: str = "Q",
    allocation: str = "norm_product",
    clip_norm: float | None = 1.0,
    infeasible: str = "best_effort",
    sizes: Tensor | None = None,
) -> HamuStep:
    """HAMU from per-block raw statistics ‖G_r⁽ⁱ⁾‖², ‖G_f⁽ⁱ⁾‖², G_r⁽ⁱ⁾·G_f⁽ⁱ⁾ (blocks partition the parameters).
    `sizes`: elements per block (for the colinearity tolerance; None: the loosest).

    `quota` is Q for variant "Q" and U for variant "U". Gradients are clipped to global norm ≤ clip_norm
    (on the statistics: clipping is a scale, so the raw tensors need never be rewritten).
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant={variant!r}: choose 'Q' (forget quota) or 'U' (retain quota)")
    if not (eta >= 0 and math.isfinite(eta)):  # η = 0 is a step that does not move (a controller's "hold")
        raise ValueError(f"eta must be a non-negative finite number, got {eta}")
    if not (quota >= 0 and math.isfinite(quota)):
        raise ValueError(f"the quota (Q or U) must be a non-negative finite number, got {quota}")
    if rr.ndim != 1 or rr.shape != ff.shape or rr.shape != rf.shape or rr.numel() == 0:
        raise ValueError(
            f"block statistics must be three 1-D tensors of one shared, non-zero length; got {tuple(rr.shape)}, "
            f"{tuple(ff.shape)}, {tuple(rf.shape)}"
        )
    rr, ff, rf = rr.double(), ff.double(), rf.double()
    c_r, c_f = clip_scales(rr.sum(), ff.sum(), clip_norm)
    crr, cff, crf = rr * c_r**2, ff * c_f**2, rf * (c_r * c_f)
    q = allocate_quota(quota, crr, cff, crf, allocation)
    # HAMU-U: max g_f·δ s.t. −g_r·δ ≥ U  ==  min (−g_f)·δ s.t. (−g_r)·δ ≥ U, i.e. a = −g_f, b = −g_r.
    aa, bb = (crr, cff) if variant == "Q" else (cff, crr)
    radius = eta * aa.sqrt()
    sizes = None if sizes is None else torch.as_tensor(sizes, dtype=torch.float64)
    sol = solve_blocks(aa, bb, crf, q, radius, infeasible, sizes)
    one = lambda t: t.sum().reshape(1)  # noqa: E731
    global_quota = torch.tensor([float(quota)], dtype=aa.dtype, device=aa.device)  # on the statistics' device
    global_sol = solve_blocks(one(aa), one(bb), one(crf), global_quota, eta * one(aa).sqrt(), infeasible,
                              None if sizes is None else one(sizes))
    if variant == "Q":
        coef_f, coef_r = sol.coef_b * c_f, sol.coef_a * c_r
    else:
        coef_f, coef_r = -sol.coef_a * c_f, -sol.coef_b * c_r
    pred_f = (coef_f * ff + coef_r * rf).sum()
    pred_r = (coef_f * rf + coef_r * rr).sum()
    # ‖δ_i‖ from the statistics, and how much larger the two terms of the combination are than their sum.
    delta_sq = (coef_f * coef_f * ff + 2 * coef_f * coef_r * rf + coef_r * coef_r * rr).clamp_min(0.0)
    terms = coef_f.abs() * ff.sqrt() + coef_r.abs() * rr.sqrt()
    conditioning = torch.where(delta_sq > 0, terms / delta_sq.sqrt().clamp_min(1e-300), torch.ones_like(terms))
    return HamuStep(
        coef_f=coef_f,
        coef_r=coef_r,
        solution=sol,
        global_solution=global_sol,
        quota=q,
        radius=radius,
        retain_norm=rr.sum().sqrt(),
        forget_norm=ff.sum().sqrt(),
        pred_delta_forget=pred_f,
        pred_delta_retain=pred_r,
        total_quota=float(quota),
        variant=variant,
        conditioning=conditioning,
    )
