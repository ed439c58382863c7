"""GA baseline: gradient ascent on the forget loss (the retain batch is not used)."""

from __future__ import annotations

from lit_unlearn.modules.objective import ObjectiveUnlearningModule

__all__ = ["GAModule"]


class GAModule(ObjectiveUnlearningModule):
    READS = frozenset({"surprisal"})  # the forget answers' NLL
    def objective(self, retain_batch, forget_batch):
        loss_f = self.checked_loss(forget_batch, "forget")
        return -loss_f, {"train/forget_loss": loss_f.detach()}
