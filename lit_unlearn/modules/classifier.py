"""Training the target model (the one that will later unlearn): plain supervised classification."""

from __future__ import annotations

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics import MeanMetric

from lit_unlearn.reporting import per_sample_stats

__all__ = ["ClassifierModule"]


class ClassifierModule(pl.LightningModule):
    def __init__(self, network: nn.Module, lr: float = 1e-3, weight_decay: float = 0.0) -> None:
        """AdamW on cross-entropy (the HAMU paper's target recipe: AdamW, lr 1e-3, no augmentation)."""
        super().__init__()
        self.save_hyperparameters(ignore=["network"])
        self.network = network
        self.lr, self.weight_decay = lr, weight_decay
        self.val_loss, self.val_acc = MeanMetric(), MeanMetric()

    def training_step(self, batch, batch_idx: int):
        x, y = batch
        loss = F.cross_entropy(self.network(x), y)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"training loss is {loss.item()} at step {self.global_step}: lower lr")
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx: int) -> None:
        x, y = batch
        loss, ok = per_sample_stats(self.network(x), y)
        self.val_loss.update(loss)
        self.val_acc.update(ok)
        self.log_dict({"val/loss": self.val_loss, "val/acc": self.val_acc}, prog_bar=True)

    test_step = validation_step

    def configure_optimizers(self):
        return torch.optim.AdamW(self.network.parameters(), lr=self.lr, weight_decay=self.weight_decay)
