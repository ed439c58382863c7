"""Shared glue for unlearning trainers (manual optimization over (retain, forget) batch pairs).

A subclass implements `unlearning_step(retain_batch, forget_batch) -> dict of scalars to log`. This base:
loads the target weights, keeps BatchNorm statistics frozen (the paper's setting), turns a NaN/inf loss into a
clear error, collects per-batch gradients, evaluates the named eval sets before training (kept in the
checkpoint, so ΔL is always measured against the true start) and during validation, and at the end writes and
prints the before/after table.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import lightning.pytorch as pl
import torch
import torch.distributed as dist
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor, nn
from torchmetrics import MeanMetric

from lit_unlearn.errors import UserError
from lit_unlearn.algorithms.losses import IGNORE_INDEX, mean_nll
from lit_unlearn.batches import is_token_batch, logits_and_labels
from lit_unlearn.checkpoints import load_network_weights
from lit_unlearn.distributed.sharded_grads import all_reduce_sum, read_local_grads, write_local_grads, zero_stage
from lit_unlearn.console import say
from lit_unlearn.tensorboard import log_scalars
from lit_unlearn.reporting import (
    evaluate_splits,
    per_sample_stats,
    results_markdown,
    results_rows,
    verification_rows,
    write_results,
)

__all__ = ["UnlearningModule"]

_BN_TYPES = (nn.modules.batchnorm._BatchNorm,)


class UnlearningModule(pl.LightningModule):
    def __init__(
        self,
        network: nn.Module,
        target_ckpt: str | None = None,
        freeze_batchnorm: bool = True,
        log_every_n_steps: int | None = None,
    ) -> None:
        """
        Args:
            network: the model to unlearn (e.g. `lit_unlearn.models.CifarResNet`).
            target_ckpt: weights of the trained target (a `lit-unlearn pretrain` checkpoint or a state dict).
            freeze_batchnorm: keep BatchNorm layers in eval mode while unlearning (running statistics frozen,
                affine parameters still updated), as in the HAMU paper.
            log_every_n_steps: compute the (cheap but not free) diagnostics every n steps; defaults to the
                Trainer's `log_every_n_steps`.
        """
        super().__init__()
        self.automatic_optimization = False
        self.network = network
        self.target_ckpt = target_ckpt
        if target_ckpt:
            load_network_weights(network, target_ckpt)
        self.freeze_batchnorm = freeze_batchnorm
        self._log_every = log_every_n_steps
        self.initial_eval: dict[str, dict[str, float]] | None = None
        self.final_eval: dict[str, dict[str, float]] | None = None
        self.val_metrics = nn.ModuleDict()
        self._eval_names: list[str] = []
        self._params: list[nn.Parameter] = []
        self.zero_stage = 0  # DeepSpeed ZeRO stage of the strategy, set in setup()
        self.report = True  # evaluate, print and write the before/after table when fitting ends
        self.network_spec: dict | None = None  # class_path/init_args of `network` when built from a config
        # Filled by callbacks before the report is written: the retrained model's column and the verification
        # measures (ForgettingVerification), the step whose weights the run ended on (StopAtTarget).
        self.reference_eval: dict[str, dict[str, float]] | None = None
        self.verification: dict | None = None
        self.ended_on_step: int | None = None
        self.report_notes: list[str] = []
        self.history: list[dict[str, float]] = []  # every evaluation of the eval sets: before, then each validation

    # ----- hooks a subclass may override -------------------------------------------------------------------------
    def unlearning_step(self, retain_batch, forget_batch) -> dict[str, float | Tensor]:
        raise NotImplementedError

    def logits_and_labels(self, batch, network: nn.Module | None = None) -> tuple[Tensor, Tensor]:
        """(logits [B, ..., V], labels [B, ...]) of a batch under `network` (default: the model being unlearned).

        Images: (network(x), y). A causal-LM trainer returns shifted token logits and labels with
        IGNORE_INDEX on prompt/padding, and every loss in `lit_unlearn.algorithms.losses` works unchanged.
        """
        return logits_and_labels(network or self.network, batch)

    def compute_loss(self, batch) -> Tensor:
        """Mean task loss of the *global* batch: cross-entropy over every position that has a target.

        Token batches split over processes hold different numbers of answer tokens, so the average of the
        per-process token means is not the global token mean: rescale by the global token count (one
        all_reduce) so that the averaged gradient is the global batch's at any world size.
        """
        logits, labels = self.logits_and_labels(batch)
        loss = mean_nll(logits, labels)
        world = self.trainer.world_size if self._trainer is not None else 1
        if world > 1 and is_token_batch(batch) and dist.is_available() and dist.is_initialized():
            local = (labels != IGNORE_INDEX).sum().to(torch.float64)
            total = local.clone()
            dist.all_reduce(total)
            loss = loss * (local * world / total).to(loss.dtype)
        return loss

    # ----- helpers for subclasses ----------------------------------------------------------------------------------
    @property
    def trainable_named_parameters(self) -> list[tuple[str, nn.Parameter]]:
        return [(n, p) for n, p in self.network.named_parameters() if p.requires_grad]

    def checked_loss(self, batch, which: str) -> Tensor:
        return self.checked(self.compute_loss(batch), which)

    def checked(self, loss: Tensor, which: str) -> Tensor:
        """`loss`, or a clear error if it is NaN/inf (says which loss, at which step, and what to try)."""
        if not torch.isfinite(loss):
            raise FloatingPointError(
                f"the {which} loss is {loss.item()} at step {self.global_step}: the model has diverged or the inputs "
                "contain NaN/inf. Lower the step size (eta / lr), check the data, or resume from an earlier checkpoint."
            )
        return loss

    def gradients(self, loss: Tensor, release: bool = True) -> list[Tensor]:
        """Backward `loss` alone and return one gradient per trainable parameter (zeros where unused).

        release=True hands the gradient tensors over (p.grad is reset to None), so the next backward allocates
        fresh ones and nothing is copied; release=False leaves them in p.grad, where an update can be written.
        """
        params = self._params
        if self.zero_stage:
            # Sharded (DeepSpeed ZeRO): this rank's gradient slices. zero_grad first: ZeRO-2 would overwrite and
            # ZeRO-3 accumulate into the previous backward's partition.
            self.optimizers().zero_grad()
            self.manual_backward(loss)
            return read_local_grads(params, self.zero_stage, copy=release)
        for p in params:
            p.grad = None
        self.manual_backward(loss)
        grads = []
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            grads.append(p.grad)
            if release:
                p.grad = None
        return grads

    def set_update(self, grads: list[Tensor]) -> None:
        """Make `grads` (from `gradients()`, combined in place) what the optimizer step applies. Unsharded, they
        already are the p.grad tensors (release=False); under ZeRO they are written back into the partitions."""
        if self.zero_stage:
            write_local_grads(self._params, grads, self.zero_stage)

    def sum_over_shards(self, t: Tensor) -> Tensor:
        """Statistics computed on gradient slices → the statistics of the whole gradients (identity unsharded)."""
        return all_reduce_sum(t, self.zero_stage)

    def global_mean(self, value: Tensor) -> Tensor:
        """The mean of a per-process scalar over all processes (the global batch's value of a batch-mean loss: the
        local losses are rescaled in `compute_loss` so that their average is the global mean)."""
        world = self.trainer.world_size if self._trainer is not None else 1
        if world > 1 and dist.is_available() and dist.is_initialized():
            value = value.detach().clone().to(torch.float64)
            dist.all_reduce(value)
            value = value / world
        return value

    def should_compute_diagnostics(self) -> bool:
        every = self._log_every or (self.trainer.log_every_n_steps if self._trainer is not None else 1) or 1
        return self.global_step % every == 0

    @contextlib.contextmanager
    def preserved_buffers(self) -> Iterator[None]:
        """Extra forward passes (e.g. measuring a step's effect) must not move BatchNorm running statistics."""
        saved = [b.detach().clone() for b in self.network.buffers()]
        try:
            yield
        finally:
            with torch.no_grad():
                for b, s in zip(self.network.buffers(), saved):
                    b.copy_(s)

    # ----- Lightning plumbing ------------------------------------------------------------------------------------
    def train(self, mode: bool = True):
        super().train(mode)
        if mode:
            self._freeze_batchnorm()
        return self

    def _freeze_batchnorm(self) -> None:
        if self.freeze_batchnorm:
            for m in self.network.modules():
                if isinstance(m, _BN_TYPES):
                    m.eval()

    def setup(self, stage: str) -> None:
        self._params = [p for _, p in self.trainable_named_parameters]
        self.zero_stage = zero_stage(self.trainer.strategy) if self._trainer is not None else 0
        if not self._params:
            raise UserError("the network has no trainable parameters: nothing to unlearn")
        dm = self.trainer.datamodule if self._trainer is not None else None
        names = getattr(dm, "eval_split_names", [])
        for name in names:
            if f"{name}_loss" not in self.val_metrics:
                self.val_metrics[f"{name}_loss"] = MeanMetric()
                self.val_metrics[f"{name}_acc"] = MeanMetric()
        self._eval_names = list(names)

    def configure_optimizers(self):
        # The trainer computes the whole update δ itself and writes p.grad = −δ; plain SGD with lr 1 applies it
        # (and gives Lightning an optimizer to count steps, checkpoint and, under sharding, to wrap).
        return torch.optim.SGD(self.optimized_parameters, lr=1.0)

    @property
    def optimized_parameters(self) -> list[nn.Parameter]:
        """What the optimizer steps: the trainable parameters (collected in setup, or now if it has not run)."""
        return self._params or [p for _, p in self.trainable_named_parameters]

    def training_step(self, batch, batch_idx: int):
        if not (isinstance(batch, (tuple, list)) and len(batch) == 2):
            raise UserError("unlearning trainers expect (retain_batch, forget_batch) pairs: use a PairedDataModule")
        retain_batch, forget_batch = batch
        logs = self.unlearning_step(retain_batch, forget_batch)
        if logs:
            shown = {k: float(v) for k, v in logs.items() if k in ("train/forget_loss", "train/retain_loss")}
            rest = {k: float(v) for k, v in logs.items() if k not in shown}
            self.log_dict(shown, on_step=True, on_epoch=False, prog_bar=True)  # in the progress bar too
            if rest:
                self.log_dict(rest, on_step=True, on_epoch=False, prog_bar=False)

    def _eval_loaders(self):
        dm = self.trainer.datamodule
        if dm is None or not hasattr(dm, "eval_dataloaders"):
            return {}
        return dm.eval_dataloaders()

    def on_train_start(self) -> None:
        if self.initial_eval is None:  # a resumed run keeps the true starting point from its checkpoint
            self.initial_eval = evaluate_splits(self.network, self._eval_loaders(), self.device)
            for split, vals in self.initial_eval.items():
                self.print_once(f"before unlearning: {split}: loss {vals['loss']:.4f} acc {vals['acc']:.4f}")
            if self.initial_eval:  # step 0 of every validation curve: where unlearning starts
                row = {f"val/{split}_{k}": v[k] for split, v in self.initial_eval.items() for k in ("loss", "acc")}
                row.update({"unlearn/delta_forget_loss": 0.0, "unlearn/neg_delta_retain_loss": 0.0})
                self.history.append({"step": 0.0, **row})
                log_scalars(self.trainer, row, step=0)
        # Lightning does not call .train() when fitting starts (and the evaluation above restored the modes):
        # freeze here; validation loops restore per-module modes afterwards, so this holds for the whole fit.
        self._freeze_batchnorm()

    def print_once(self, msg: str) -> None:
        rank_zero_info(msg)

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

    # ----- what callbacks add to the report ----------------------------------------------------------------------------
    def report_verification(self, before: dict, after: dict, retrain: dict | None,
                            reference_splits: dict | None = None, reference_info: dict | None = None) -> None:
        """Called by ForgettingVerification when fitting ends: measures of the target, the unlearned model and the
        retrained reference (None without one)."""
        self.reference_eval = reference_splits
        flat = {k: after.get(k) for k in after}
        for k, v in before.items():
            flat[f"{k}_before"] = v
        for k, v in (retrain or {}).items():
            flat[f"{k}_retrain"] = v
        if retrain is not None:
            flat["mia_efficacy_retrain"] = retrain.get("mia_efficacy")
            flat["ua_retrain"] = retrain.get("ua")
        self.verification = {**flat, "table": verification_rows(before, after, retrain),
                             "reference": reference_info}

    def ended_on(self, step: int, note: str | None = None) -> None:
        """Called by StopAtTarget: the weights now in the network are those of `step` (the closest to the target)."""
        self.ended_on_step = int(step)
        if note:
            self.report_notes.append(note)

    def on_fit_end(self) -> None:
        loaders = self._eval_loaders()
        if not self.report or not loaders or self.initial_eval is None:
            return
        self.final_eval = evaluate_splits(self.network, loaders, self.device)
        folder = self.trainer.log_dir or self.trainer.default_root_dir  # a collective under DDP: every rank asks
        if self.trainer.is_global_zero:
            rows = results_rows(self.initial_eval, self.final_eval, self.reference_eval)
            table = (self.verification or {}).get("table")
            extra = {"global_step": self.global_step, "method": type(self).__name__,
                     "ended_on_step": self.global_step if self.ended_on_step is None else self.ended_on_step,
                     "notes": self.report_notes}
            if self.verification is not None:
                extra["verification"] = {k: v for k, v in self.verification.items() if k != "table"}
            path = write_results(rows, folder, extra=extra, verification=table, notes=self.report_notes)
            ended = "" if self.ended_on_step in (None, self.global_step) else f", ended on step {self.ended_on_step}"
            markdown = results_markdown(rows, table, self.report_notes)
            say(f"\n{type(self).__name__} after {self.global_step} steps{ended}\n{markdown}\n(written to {path})")
            self._report_to_tensorboard(markdown, rows, folder)

    def _report_to_tensorboard(self, markdown: str, rows: list[dict], folder) -> None:
        """The results table as text, the trajectory as an image (also trajectory.png), hparams with the final
        metrics."""
        from pathlib import Path

        from lit_unlearn.tensorboard import log_figure, log_final_hparams, log_text
        from lit_unlearn.trajectory_plot import trajectory_figure

        step = self.global_step
        log_text(self.trainer, "results", markdown, step)
        figure = trajectory_figure(self.history, self.ended_on_step, title=f"{type(self).__name__}")
        if figure is not None:
            figure.savefig(Path(folder) / "trajectory.png", dpi=110)
            log_figure(self.trainer, "trajectory", figure, step)
            import matplotlib.pyplot as plt

            plt.close(figure)
        final = {f"final/{r['split']}_{k}": r[f"{k}_after"] for r in rows for k in ("loss", "acc")}
        for key in ("ua", "ra", "ta", "mia_efficacy", "avg_gap", "forget_vs_retrain_auc"):
            if (self.verification or {}).get(key) is not None:
                final[f"final/{key}"] = self.verification[key]
        final["final/ended_on_step"] = float(step if self.ended_on_step is None else self.ended_on_step)
        log_final_hparams(self.trainer, {"method": type(self).__name__, **dict(self.hparams)}, final)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["unlearning_initial_eval"] = self.initial_eval
        checkpoint["unlearning_history"] = self.history

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.initial_eval = checkpoint.get("unlearning_initial_eval")
        self.history = list(checkpoint.get("unlearning_history") or [])
