"""Training the target model (the one that will later unlearn): plain supervised training, of an image
classifier on (x, y) batches or of a causal LM on token batches (loss on the answer tokens)."""

from __future__ import annotations

import math

import lightning.pytorch as pl
import torch
from torch import nn
from torchmetrics import MeanMetric

from lit_unlearn.algorithms.losses import mean_nll
from lit_unlearn.core.errors import UserError
from lit_unlearn.core.batches import logits_and_labels
from lit_unlearn.metrics.results_tables import per_sample_stats
from lit_unlearn.verification.training_recipe import training_recipe_of

__all__ = ["ClassifierModule", "SupervisedModule"]


LR_SCHEDULES = ("constant", "cosine")


class SupervisedModule(pl.LightningModule):
    def __init__(self, network: nn.Module, lr: float = 1e-3, weight_decay: float = 0.0, lr_schedule: str = "constant",
                 warmup_fraction: float = 0.0) -> None:
        """AdamW on cross-entropy (the HAMU paper's target recipe: AdamW, lr 1e-3, no augmentation).

        Args:
            lr_schedule: "constant", or "cosine": decay to 0 over the fit's optimizer steps.
            warmup_fraction: the first fraction of the steps ramps the rate up linearly from 0 (either schedule).
        """
        super().__init__()
        if lr_schedule not in LR_SCHEDULES:
            raise UserError(f"lr_schedule={lr_schedule!r}: choose one of {LR_SCHEDULES}")
        if not 0.0 <= warmup_fraction < 1.0:
            raise UserError(f"warmup_fraction must be in [0, 1), got {warmup_fraction}")
        self.save_hyperparameters(ignore=["network"])
        self.network = network
        self.network_spec: dict | None = None  # class_path/init_args of `network`, when built from a config
        self.lr, self.weight_decay = lr, weight_decay
        self.lr_schedule, self.warmup_fraction = lr_schedule, warmup_fraction
        self.val_loss, self.val_acc = MeanMetric(), MeanMetric()

    def training_step(self, batch, batch_idx: int):
        loss = mean_nll(*logits_and_labels(self.network, batch))
        if not torch.isfinite(loss):
            raise FloatingPointError(f"training loss is {loss.item()} at step {self.global_step}: lower lr")
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx: int) -> None:
        loss, ok = per_sample_stats(*logits_and_labels(self.network, batch))
        self.val_loss.update(loss)
        self.val_acc.update(ok)
        self.log_dict({"val/loss": self.val_loss, "val/acc": self.val_acc}, prog_bar=True)

    test_step = validation_step

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.network.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        if self.lr_schedule == "constant" and not self.warmup_fraction:
            return optimizer
        total = max(1, int(self.trainer.estimated_stepping_batches))
        warmup = max(1, round(self.warmup_fraction * total)) if self.warmup_fraction else 0

        def factor(step: int) -> float:
            ramp = min(1.0, (step + 1) / warmup) if warmup else 1.0
            if self.lr_schedule == "constant":
                return ramp
            return ramp * 0.5 * (1.0 + math.cos(math.pi * min(step, total) / total))

        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        # What a retrained reference needs to repeat this training on the retain set alone (verification).
        if self._trainer is not None:
            checkpoint["training_recipe"] = training_recipe_of(self.trainer, self)


ClassifierModule = SupervisedModule  # the name the image configs use
