"""Loss and accuracy of the datamodule's named eval splits: before the first step (kept in checkpoints, so ΔL is
always measured against the true start) and at every validation, logged and kept as the run's history.

A mixin of `UnlearningModule`: it owns `initial_eval`, `history` and the validation hooks.
"""

from __future__ import annotations

from torchmetrics import MeanMetric

from lit_unlearn.core.plug_points import EvalLoaders
from lit_unlearn.metrics.results_tables import evaluate_splits, per_sample_stats
from lit_unlearn.reporting.tensorboard import log_scalars

__all__ = ["EvalSplitMetrics"]


class EvalSplitMetrics:
    """Needs a LightningModule with `network`, `logits_and_labels`, `val_metrics` (an nn.ModuleDict),
    `initial_eval`, `history` and `_eval_names`."""

    def setup_eval_metrics(self) -> None:
        dm = self.trainer.datamodule if self._trainer is not None else None
        names = getattr(dm, "eval_split_names", [])
        for name in names:
            if f"{name}_loss" not in self.val_metrics:
                self.val_metrics[f"{name}_loss"] = MeanMetric()
                self.val_metrics[f"{name}_acc"] = MeanMetric()
        self._eval_names = list(names)

    def eval_loaders(self):
        dm = self.trainer.datamodule
        if dm is None or not isinstance(dm, EvalLoaders):  # a datamodule the user writes needs only the method
            return {}
        return dm.eval_dataloaders()

    def evaluate_start(self) -> None:
        """The eval splits before the first update (a resumed run keeps the true start from its checkpoint)."""
        if self.initial_eval is not None:
            return
        self.initial_eval = evaluate_splits(self.network, self.eval_loaders(), self.device)
        for split, vals in self.initial_eval.items():
            self.print_once(f"before unlearning: {split}: loss {vals['loss']:.4f} acc {vals['acc']:.4f}")
        if self.initial_eval:  # step 0 of every validation curve: where unlearning starts
            row = {f"val/{split}_{k}": v[k] for split, v in self.initial_eval.items() for k in ("loss", "acc")}
            row.update({"unlearn/delta_forget_loss": 0.0, "unlearn/neg_delta_retain_loss": 0.0})
            self.history.append({"step": 0.0, **row})
            log_scalars(self.trainer, row, step=0)

    def validation_step(self, batch, batch_idx: int, dataloader_idx: int = 0) -> None:
        loss, ok = per_sample_stats(*self.logits_and_labels(batch))
        name = self._eval_names[dataloader_idx]
        self.val_metrics[f"{name}_loss"].update(loss)
        self.val_metrics[f"{name}_acc"].update(ok)

    def on_validation_epoch_end(self) -> None:
        values = {}
        for name in self._eval_names:
            for kind in ("loss", "acc"):
                metric = self.val_metrics[f"{name}_{kind}"]
                if metric.update_count:
                    values[f"val/{name}_{kind}"] = metric.compute()
                metric.reset()
        if self.initial_eval is not None:
            if "val/forget_loss" in values and "forget" in self.initial_eval:
                values["unlearn/delta_forget_loss"] = values["val/forget_loss"] - self.initial_eval["forget"]["loss"]
            if "val/retain_loss" in values and "retain" in self.initial_eval:
                values["unlearn/neg_delta_retain_loss"] = self.initial_eval["retain"]["loss"] - values["val/retain_loss"]
        # No DDP sync needed: MeanMetric.compute() already reduces across processes.
        self.log_dict(values, on_epoch=True, add_dataloader_idx=False)
        if values and not self.trainer.sanity_checking:
            self.history.append({"step": float(self.global_step), **{k: float(v) for k, v in values.items()}})
