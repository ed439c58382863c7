"""KL baseline: ascend the forget loss while keeping the retain outputs close to the original model's,
loss = w_r·KL(p_orig ‖ p_θ) on retain − w_f·CE on forget (the HAMU reference's (∇KL_r − ∇CE_f)/2 by default)."""

from __future__ import annotations

from torch import nn

from lit_unlearn.algorithms.losses import kl_to_reference
from lit_unlearn.modules.objective import ObjectiveUnlearningModule

__all__ = ["KLModule"]


class KLModule(ObjectiveUnlearningModule):
    READS = frozenset({"surprisal"})  # the forget answers' NLL (the KL term is on the retain set)
    uses_reference = True

    def __init__(self, network: nn.Module, retain_weight: float = 0.5, forget_weight: float = 0.5, **kwargs) -> None:
        super().__init__(network, **kwargs)
        self.retain_weight, self.forget_weight = retain_weight, forget_weight

    def objective(self, retain_batch, forget_batch):
        logits_r, labels_r = self.logits_and_labels(retain_batch)
        kl_r = kl_to_reference(logits_r, self.reference_logits(retain_batch), labels_r)
        loss_f = self.checked_loss(forget_batch, "forget")
        loss = self.retain_weight * kl_r - self.forget_weight * loss_f
        return loss, {"train/retain_kl": kl_r.detach(), "train/forget_loss": loss_f.detach()}
