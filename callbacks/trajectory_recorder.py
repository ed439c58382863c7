"""Record an unlearning run's trajectory: the eval metrics after every validation, and per-step scalars.

Rows are kept in memory (`epochs`, `steps`) and, with `path`, written as CSV at the end of training. A row at
step 0 holds the evaluation before unlearning, so every curve starts from the true origin (ΔL = 0).
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

from lightning.pytorch.callbacks import Callback

from lit_unlearn.core.plug_points import HardnessRecorded, UnlearningRun, as_plug

__all__ = ["TrajectoryRecorder"]


def _scalar(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


class TrajectoryRecorder(Callback):
    def __init__(self, path: str | None = None,
                 step_keys: tuple[str, ...] = ("hamu/kappa_global", "hamu/kappa_mean", "hamu/branch_infeasible",
                                               "hamu/reachable_gain", "hamu/quota")) -> None:
        """
        Args:
            path: CSV file for the per-validation rows (none: memory only).
            step_keys: logged per-step scalars to keep (e.g. HAMU's κ); missing keys are skipped.
        """
        super().__init__()
        self.path, self.step_keys = path, tuple(step_keys)
        self.epochs: list[dict[str, float]] = []
        self.steps: list[dict[str, float]] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        # Not on_train_start: callbacks' hooks run before the module's, which computes the initial evaluation.
        run = as_plug(pl_module, UnlearningRun)
        initial = run.initial_eval if run else None
        if initial and not self.epochs:
            row = {"epoch": 0.0, "step": 0.0, "unlearn/delta_forget_loss": 0.0, "unlearn/neg_delta_retain_loss": 0.0}
            for split, vals in initial.items():
                row[f"val/{split}_loss"], row[f"val/{split}_acc"] = vals["loss"], vals["acc"]
            self.epochs.append(row)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        metrics = trainer.callback_metrics
        row = {k: _scalar(metrics[k]) for k in self.step_keys if k in metrics}
        hamu = as_plug(pl_module, HardnessRecorded)
        step = hamu.last_step if hamu else None
        if step is not None:  # HAMU: κ of this very step, also on steps without logging
            row["kappa_global"] = step.global_solution.kappa.item()
            clip = hamu.clip_norm or math.inf
            norms = min(step.retain_norm.item(), clip) * min(step.forget_norm.item(), clip)
            row["cosine_global"] = row["kappa_global"] / norms if norms > 0 else math.nan
            row["irreconcilable"] = float(step.irreconcilable)
        if row:
            row["step"] = float(trainer.global_step)
            self.steps.append(row)

    def on_validation_end(self, trainer, pl_module) -> None:
        # Not on_validation_epoch_end: that runs before the module's hook logs the epoch's metrics.
        if trainer.sanity_checking:
            return
        row = {"epoch": float(trainer.current_epoch + 1), "step": float(trainer.global_step)}
        row.update({k: _scalar(v) for k, v in trainer.callback_metrics.items()
                    if k.startswith(("val/", "unlearn/"))})
        self.epochs.append(row)

    def on_train_end(self, trainer, pl_module) -> None:
        if self.path and trainer.is_global_zero and self.epochs:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            keys = sorted({k for r in self.epochs for k in r}, key=lambda k: (k not in ("epoch", "step"), k))
            with open(self.path, "w", newline="") as fh:
                writer = csv.DictWriter(fh, fieldnames=keys)
                writer.writeheader()
                writer.writerows(self.epochs)

    def state_dict(self) -> dict[str, Any]:
        return {"epochs": self.epochs, "steps": self.steps}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.epochs, self.steps = list(state_dict["epochs"]), list(state_dict["steps"])
