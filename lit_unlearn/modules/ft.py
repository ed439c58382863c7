"""FT baseline: fine-tune on the retain set only (forgetting, if any, comes from catastrophic forgetting)."""

from __future__ import annotations

from lit_unlearn.modules.objective import ObjectiveUnlearningModule

__all__ = ["FTModule"]


class FTModule(ObjectiveUnlearningModule):
    READS = frozenset()  # retain fine-tuning only: no forget term
    def objective(self, retain_batch, forget_batch):
        loss_r = self.checked_loss(retain_batch, "retain")
        return loss_r, {"train/retain_loss": loss_r.detach()}
