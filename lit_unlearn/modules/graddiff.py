"""GradDiff baseline: descend the retain loss and ascend the forget loss, on w_r·L_r − w_f·L_f.

With SGD (the HAMU paper's form, the default) δ = −lr·(w_r∇L_r − w_f∇L_f). open-unlearning's GradDiff, whose
published TOFU numbers users compare with, uses AdamW (lr 1e-5, weights 1 and 1): `optimizer="adamw"`.
Same two backward passes as HAMU, so it is also the reference for HAMU's per-step overhead.
"""

from __future__ import annotations

from torch import nn

from lit_unlearn.algorithms import combine_into
from lit_unlearn.core.errors import UserError
from lit_unlearn.modules.optimizers import build_optimizer, check_optimizer
from lit_unlearn.modules.unlearning import UnlearningModule

__all__ = ["GradDiffModule"]


class GradDiffModule(UnlearningModule):
    READS = frozenset({"surprisal"})  # the forget answers' NLL
    def __init__(self, network: nn.Module, lr: float = 1e-3, retain_weight: float = 0.5, forget_weight: float = 0.5,
                 optimizer: str = "sgd", weight_decay: float = 0.0, **kwargs) -> None:
        """
        Args:
            optimizer: "sgd" (plain, the default), "adam" or "adamw" applied to w_r∇L_r − w_f∇L_f.
            weight_decay: the optimizer's (not applied by plain SGD's pre-scaled step; pass "adamw" to use it).
        """
        super().__init__(network, **kwargs)
        if lr <= 0:
            raise UserError(f"lr must be positive, got {lr}")
        check_optimizer(optimizer)
        if weight_decay and optimizer == "sgd":
            raise UserError("weight_decay needs optimizer='adam' or 'adamw' in GradDiff (its SGD step applies "
                            "exactly lr·(w_r∇L_r − w_f∇L_f)); drop weight_decay or choose an adaptive optimizer")
        self.save_hyperparameters(ignore=["network"])
        self.lr, self.retain_weight, self.forget_weight = lr, retain_weight, forget_weight
        self.optimizer_name, self.weight_decay = optimizer, weight_decay

    def configure_optimizers(self):
        if self.optimizer_name == "sgd":  # the step is pre-scaled by lr: SGD(lr=1) applies it as it is
            return super().configure_optimizers()
        return build_optimizer(self.optimizer_name, self.optimized_parameters, self.lr,
                               weight_decay=self.weight_decay)

    def unlearning_step(self, retain_batch, forget_batch) -> dict[str, float]:
        opt = self.optimizers()
        loss_r, grads_r = self.micro_gradients(lambda b: self.checked_loss(b, "retain"), retain_batch, release=True)
        loss_f, grads_f = self.micro_gradients(lambda b: self.checked_loss(b, "forget"), forget_batch, release=False)
        n = len(grads_f)
        # p.grad = w_r ∇L_r − w_f ∇L_f, the objective's gradient; for SGD pre-scaled by lr (SGD(lr=1) applies it).
        scale = self.lr if self.optimizer_name == "sgd" else 1.0
        combine_into(grads_f, grads_f, grads_r, [-scale * self.forget_weight] * n, [scale * self.retain_weight] * n)
        self.set_update(grads_f)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if not self.should_compute_diagnostics():
            return {}
        return {"train/retain_loss": loss_r.item(), "train/forget_loss": loss_f.item()}
