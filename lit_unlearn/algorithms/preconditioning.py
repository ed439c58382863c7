"""A diagonal preconditioner for HAMU's closed-form step (a named option; the paper's step uses raw gradients).

HAMU solves its per-layer problem in the Euclidean geometry of the raw gradients: its step is a combination of
g_r and g_f, so it moves along the few directions where the gradients are large. On TOFU that leaves a
signature: the forget items end with gradient norms far above unseen items' (the gradient-norm attack finds
them), as plain SGD gradient ascent does, while Adam-preconditioned ascent does not (docs/guide/hamu.md).

With second moments v (an exponential average of (g_r² + g_f²)/2, bias-corrected, as Adam's) and
s = (√v̂ + ε)^(−1/2), write the step as δ = s ⊙ u and solve HAMU's problem for u with the gradients ĝ = s ⊙ g:
every first-order quantity is unchanged (g·δ = ĝ·u), the trust region bounds ‖u‖, and the step is
δ = s ⊙ (a·ĝ_f + b·ĝ_r) = (a·g_f + b·g_r)/(√v̂ + ε): Adam's per-coordinate scaling of the same combination.
Framework-free: tensors in, tensors out.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["DiagonalPreconditioner"]


class DiagonalPreconditioner:
    def __init__(self, beta2: float = 0.999, eps: float = 1e-8) -> None:
        if not 0.0 <= beta2 < 1.0 or not eps > 0:
            raise ValueError(f"need 0 ≤ beta2 < 1 and eps > 0, got {beta2}, {eps}")
        self.beta2, self.eps = beta2, eps
        self.second: list[Tensor] | None = None
        self.steps = 0

    @torch.no_grad()
    def update(self, grads_r: Sequence[Tensor], grads_f: Sequence[Tensor]) -> list[Tensor]:
        """Fold this step's gradients into v and return the scales s = (√v̂ + ε)^(−1/2), one per tensor."""
        if self.second is None:
            self.second = [torch.zeros_like(g, dtype=torch.float32) for g in grads_r]
        self.steps += 1
        correction = 1.0 - self.beta2 ** self.steps
        scales = []
        for v, gr, gf in zip(self.second, grads_r, grads_f):
            v.mul_(self.beta2).add_((gr.float().square() + gf.float().square()) * 0.5, alpha=1.0 - self.beta2)
            scales.append((v / correction).sqrt_().add_(self.eps).rsqrt_())
        return scales

    def state_dict(self) -> dict:
        return {"second": self.second, "steps": self.steps, "beta2": self.beta2, "eps": self.eps}

    def load_state_dict(self, state: dict) -> None:
        self.second, self.steps = state["second"], int(state["steps"])
        self.beta2, self.eps = float(state["beta2"]), float(state["eps"])
