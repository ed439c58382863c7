"""Choosing HAMU's quota (and step size) per step: raw loss units, the feasibility limit, and a controller.

HAMU-Q demands g_f·δ ≥ Q on gradients clipped to norm ≤ c (clip scale s_f = min(1, c/‖G_f‖), g_f = s_f·G_f).
On the raw gradient that is G_f·δ ≥ Q/s_f: a fixed Q asks for a first-order forget-loss increase of Q·‖G_f‖/c
per step once ‖G_f‖ > c, and ‖G_f‖ grows as forgetting proceeds, so each step asks more than the last.

- Raw units: the user's quota q is the raw increase; the clipped quota is Q = s_f·q.
- Reachable units (a named option, not the paper's): q ∈ (0, 1] is a share of G(η) below, Q_t = q·G(η) each step,
  so that the constraint binds (a fixed Q far below G leaves every step on the retain-descent branch) and the κ₂
  rule meets the regime it is for.
- Feasibility: with block weights w_i (Q_i = Q·w_i, Σw_i = 1) and R_i = η‖a_i‖, block i is feasible iff
  Q·w_i ≤ R_i‖b_i‖, so every block is iff Q ≤ min_i R_i‖b_i‖/w_i over blocks with w_i > 0. For the ‖g‖-product
  allocation this is one number, η·Σ_i‖g_r⁽ⁱ⁾‖‖g_f⁽ⁱ⁾‖.
- The first-order forget gain of a feasible HAMU-Q step is exactly  P(η, Q) = Σ_i max(Q·w_i, −η·κ_i)  (clipped
  units): a block takes the retain-descent step −R_i ĝ_r (gain −ηκ_i) when that already meets its quota, and
  otherwise meets its quota exactly. So Q is only a lower bound: when κ_i < 0 (retain descent itself raises the
  forget loss, as in class unlearning) even Q = 0 forgets η·Σ_i max(0, −κ_i) per step, and only a smaller η
  forgets less.
- Reachable without retain damage (the κ₂ bound): G(η) = η·Σ_i sqrt(‖a_i‖²‖b_i‖² − max(κ_i, 0)²); a quota above
  it makes HAMU trade retain loss for forgetting, and the κ₂ rule calls that step irreconcilable.
- Control towards a forget-loss goal L*: ask for the raw gain p = (L* − L_f)/H per step (a proportional
  controller with horizon H; nothing once L* is passed), i.e. s_f·p clipped, and choose (Q_t, η_t) with
  P(η_t, Q_t) = s_f·p: the largest step η when some Q ≤ max_fraction × min(limit, G) gives it, else Q_t = 0
  and η_t = s_f·p / Σ_i max(0, −κ_i); capped at the full-effort step (that largest Q, η) when even that is too
  little. So Q_t stays feasible and within the κ₂ bound: the controller never forces retain damage.
- The goal is a proxy for the user's target (e.g. the retrained model's mean forget loss for "forget quality ≥
  0.05"). Where the target measures something the forget loss does not track exactly (TOFU's truth ratios), the
  loss can sit at its goal while the target stays unmet: `escalated_goal` then raises the goal, by a factor, at
  each evaluation of the target that finds it unmet with the loss at the goal.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from lit_unlearn.algorithms.hamu import allocate_quota, clip_scales

__all__ = ["QUOTA_UNITS", "Steering", "forget_clip_scale", "predicted_forget_gain", "quota_limit", "reachable_gain",
           "raw_to_clipped_quota", "steer"]

QUOTA_UNITS = ("clipped", "raw", "reachable")


def forget_clip_scale(ff_total: Tensor | float, clip_norm: float | None) -> float:
    """s_f = min(1, clip_norm/‖G_f‖): the factor clipping applies to the forget gradient."""
    ff = torch.as_tensor(ff_total, dtype=torch.float64)
    return float(clip_scales(ff, ff, clip_norm)[1])


def raw_to_clipped_quota(raw_quota: float, ff_total: Tensor | float, clip_norm: float | None) -> float:
    """The clipped-units quota that demands a raw first-order forget-loss increase of `raw_quota` per step."""
    return raw_quota * forget_clip_scale(ff_total, clip_norm)


def _clipped(rr: Tensor, ff: Tensor, rf: Tensor, clip_norm: float | None) -> tuple[Tensor, Tensor, Tensor]:
    rr, ff, rf = rr.double(), ff.double(), rf.double()
    c_r, c_f = clip_scales(rr.sum(), ff.sum(), clip_norm)
    return rr * c_r**2, ff * c_f**2, rf * (c_r * c_f)


def quota_limit(rr: Tensor, ff: Tensor, rf: Tensor, *, eta: float, allocation: str = "norm_product",
                clip_norm: float | None = 1.0, variant: str = "Q") -> float:
    """The largest total quota (clipped units) for which every block is feasible, from per-block raw stats."""
    crr, cff, crf = _clipped(rr, ff, rf, clip_norm)
    aa, bb = (crr, cff) if variant == "Q" else (cff, crr)
    capacity = eta * aa.sqrt() * bb.sqrt()  # R_i‖b_i‖
    weights = allocate_quota(1.0, crr, cff, crf, allocation)
    takes = weights > 0
    if not bool(takes.any()):
        return 0.0
    return float((capacity[takes] / weights[takes]).min())


def reachable_gain(rr: Tensor, ff: Tensor, rf: Tensor, *, eta: float, clip_norm: float | None = 1.0) -> float:
    """G(η) = η·Σ_i sqrt(‖a_i‖²‖b_i‖² − max(κ_i, 0)²): the most forget gain (clipped units) HAMU-Q's blocks reach
    without raising the retain loss (the quantity the aggregate κ₂ rule compares with Q)."""
    crr, cff, crf = _clipped(rr, ff, rf, clip_norm)
    return float(eta * (crr * cff - crf.clamp_min(0.0) ** 2).clamp_min(0.0).sqrt().sum())


def predicted_forget_gain(rr: Tensor, ff: Tensor, rf: Tensor, *, quota: float, eta: float,
                          allocation: str = "norm_product", clip_norm: float | None = 1.0) -> float:
    """P(η, Q) = Σ_i max(Q·w_i, −η·κ_i): HAMU-Q's first-order forget gain (clipped units) when every block is
    feasible (Q ≤ quota_limit)."""
    crr, cff, crf = _clipped(rr, ff, rf, clip_norm)
    weights = allocate_quota(1.0, crr, cff, crf, allocation)
    return float(torch.maximum(quota * weights, -eta * crf).sum())


@dataclass(frozen=True)
class Steering:
    quota: float  # Q_t, clipped units
    eta: float  # η_t ≤ η
    wanted_gain: float  # s_f·p, clipped units
    limit: float  # quota_limit at η_t


def escalated_goal(goal: float, recent_losses, target_met: bool, growth: float, reach: float = 0.95) -> float:
    """The next forget-loss goal: `goal·(1 + growth)` when the target is not met although the loss has reached the
    goal (the mean of the forget losses since the last evaluation is ≥ reach·goal), else `goal`."""
    losses = [float(x) for x in recent_losses]
    if growth <= 0 or target_met or not losses or not math.isfinite(goal):
        return goal
    return goal * (1.0 + growth) if sum(losses) / len(losses) >= reach * goal else goal


def steer(rr: Tensor, ff: Tensor, rf: Tensor, *, distance: float, horizon: float, eta: float,
          allocation: str = "norm_product", clip_norm: float | None = 1.0, max_fraction: float = 0.9) -> Steering:
    """(Q_t, η_t) whose first-order forget gain is the controller's s_f·(L* − L_f)/H (see the module docstring)."""
    if not horizon > 0:
        raise ValueError(f"the controller's horizon must be > 0 steps, got {horizon}")
    if not 0 < max_fraction <= 1:
        raise ValueError(f"max_fraction must be in (0, 1], got {max_fraction}")
    crr, cff, crf = _clipped(rr, ff, rf, clip_norm)
    weights = allocate_quota(1.0, crr, cff, crf, allocation)
    limit = quota_limit(rr, ff, rf, eta=eta, allocation=allocation, clip_norm=clip_norm)
    wanted = forget_clip_scale(ff.sum(), clip_norm) * distance / horizon if math.isfinite(distance) else 0.0
    wanted = max(wanted, 0.0)

    def gain(q: float, e: float) -> float:
        return float(torch.maximum(q * weights, -e * crf).sum())

    reachable = reachable_gain(rr, ff, rf, eta=eta, clip_norm=clip_norm)
    q_max = max_fraction * min(limit, reachable)
    if wanted >= gain(q_max, eta):
        return Steering(q_max, eta, wanted, limit)
    floor = gain(0.0, eta)  # η·Σ max(0, −κ_i): what retain descent alone forgets
    if wanted == floor:  # e.g. nothing left to forget and retain descent does not forget (all κ_i ≥ 0)
        return Steering(0.0, eta, wanted, limit)
    if wanted > floor:
        lo, hi = 0.0, q_max  # gain(q, η) is continuous and non-decreasing in q: bisection
        for _ in range(100):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if gain(mid, eta) < wanted else (lo, mid)
        return Steering(hi, eta, wanted, limit)
    eta_t = eta * wanted / floor  # Q = 0: the gain is linear in η
    return Steering(0.0, eta_t, wanted, limit * eta_t / eta)
