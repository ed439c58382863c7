"""Training the target model (the one that will later unlearn): plain supervised training, of an image
classifier on (x, y) batches or of a causal LM on token batches (loss on the answer tokens)."""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from torch import nn
from torchmetrics import MeanMetric

from lit_unlearn.algorithms.losses import mean_nll
from lit_unlearn.batches import logits_and_labels
from lit_unlearn.reporting import per_sample_stats
from lit_unlearn.verification.recipe import training_recipe_of

__all__ = ["ClassifierModule", "SupervisedModule"]


class SupervisedModule(pl.LightningModule):
    def __init__(self, network: nn.Module, lr: float = 1e-3, weight_decay: float = 0.0) -> None:
        """AdamW on cross-entropy (the HAMU paper's target recipe: AdamW, lr 1e-3, no augmentation)."""
        super().__init__()
        self.save_hyperparameters(ignore=["network"])
        self.network = network
        self.network_spec: dict | None = None  # class_path/init_args of `network`, when built from a config
        self.lr, self.weight_decay = lr, weight_decay
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
        return torch.optim.AdamW(self.network.parameters(), lr=self.lr, weight_decay=self.weight_decay)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        # What a retrained reference needs to repeat this training on the retain set alone (verification).
        if self._trainer is not None:
            checkpoint["training_recipe"] = training_recipe_of(self.trainer, self)


ClassifierModule = SupervisedModule  # the name the image configs use
