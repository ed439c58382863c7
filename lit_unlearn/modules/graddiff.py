"""GradDiff baseline: descend the retain loss and ascend the forget loss, δ = −lr·(∇L_r − ∇L_f)/2.

Same two backward passes as HAMU, so it is also the reference for HAMU's per-step overhead.
"""

from __future__ import annotations

from torch import nn

from lit_unlearn.errors import UserError
from lit_unlearn.algorithms import combine_into
from lit_unlearn.modules.unlearning import UnlearningModule

__all__ = ["GradDiffModule"]


class GradDiffModule(UnlearningModule):
    def __init__(self, network: nn.Module, target_ckpt: str | None = None, lr: float = 1e-3,
                 retain_weight: float = 0.5, forget_weight: float = 0.5, freeze_batchnorm: bool = True,
                 log_every_n_steps: int | None = None) -> None:
        super().__init__(network, target_ckpt, freeze_batchnorm, log_every_n_steps)
        if lr <= 0:
            raise UserError(f"lr must be positive, got {lr}")
        self.save_hyperparameters(ignore=["network"])
        self.lr, self.retain_weight, self.forget_weight = lr, retain_weight, forget_weight

    def unlearning_step(self, retain_batch, forget_batch) -> dict[str, float]:
        opt = self.optimizers()
        loss_r = self.checked_loss(retain_batch, "retain")
        grads_r = self.gradients(loss_r, release=True)
        loss_f = self.checked_loss(forget_batch, "forget")
        grads_f = self.gradients(loss_f, release=False)
        n = len(grads_f)
        # p.grad = lr·(w_r ∇L_r − w_f ∇L_f); SGD(lr=1) then applies θ ← θ − p.grad.
        combine_into(grads_f, grads_f, grads_r, [-self.lr * self.forget_weight] * n, [self.lr * self.retain_weight] * n)
        self.set_update(grads_f)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if not self.should_compute_diagnostics():
            return {}
        return {"train/retain_loss": loss_r.item(), "train/forget_loss": loss_f.item()}
