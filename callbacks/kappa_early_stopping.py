"""κ₂ early stopping for HAMU: stop unlearning once retain/forget conflict becomes irreconcilable.

A step is irreconcilable when no update inside the trust region reaches the forget quota without hurting the
retain loss: κ > κ2 for one block, Σ_i (reachable gain_i) < Q in per-layer mode (the same test summed over
blocks). The callback checks each step's solution *before* it is applied; after `patience` consecutive
irreconcilable steps it vetoes that update and stops the trainer. `monitor_only=True` never stops and only
records where it would have (for studying what happens past the stop).
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from lit_unlearn.core.console import say

from lit_unlearn.core.errors import UserError
from lit_unlearn.core.plug_points import UpdateGuarded, require

__all__ = ["KappaEarlyStopping"]


class KappaEarlyStopping(Callback):
    def __init__(self, mode: str = "hard", epsilon: float = 0.0, criterion: str = "aggregate", patience: int = 1,
                 min_steps: int = 0, monitor_only: bool = False, verbose: bool = True) -> None:
        """
        Args:
            mode: "hard" (κ > κ2) or "soft" (κ > κ2 − ε: stop slightly before the conflict is irreconcilable).
            epsilon: the soft margin; in κ units for criterion "global", in quota units for "aggregate".
            criterion: "aggregate" (per-layer rule; equals κ > κ2 with one block) or "global" (κ > κ2 on the
                concatenated gradient).
            patience: consecutive irreconcilable steps needed to stop (a reconcilable step resets the count).
            min_steps: never stop before this many applied updates.
            monitor_only: record the step where it would stop, but keep training.
        """
        super().__init__()
        if mode not in ("hard", "soft"):
            raise UserError(f"mode={mode!r}: choose 'hard' or 'soft'")
        if criterion not in ("aggregate", "global"):
            raise UserError(f"criterion={criterion!r}: choose 'aggregate' or 'global'")
        if patience < 1:
            raise UserError(f"patience must be ≥ 1, got {patience}")
        if mode == "soft" and epsilon < 0:
            raise UserError(f"a soft stop needs epsilon ≥ 0, got {epsilon}")
        self.mode, self.epsilon, self.criterion = mode, epsilon, criterion
        self.patience, self.min_steps, self.monitor_only, self.verbose = patience, min_steps, monitor_only, verbose
        self.wait = 0
        self.stopped_step: int | None = None  # updates applied when training was stopped
        self.would_stop_step: int | None = None  # first step at which the rule fired (monitor_only too)
        self._trainer: pl.Trainer | None = None

    @property
    def state_key(self) -> str:
        return self._generate_state_key(mode=self.mode, epsilon=self.epsilon, criterion=self.criterion)

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        require(pl_module, UpdateGuarded, "KappaEarlyStopping", "use HAMUModule")
        self._trainer = trainer
        pl_module.register_update_guard(self.allows_update)

    def allows_update(self, step) -> bool:
        """Called by the module with each step's solution; False vetoes the update and stops training."""
        trainer = self._trainer
        applied = trainer.global_step if trainer is not None else 0
        eps = self.epsilon if self.mode == "soft" else 0.0
        if not step.is_irreconcilable(self.criterion, eps) or applied < self.min_steps:
            self.wait = 0
            return True
        self.wait += 1
        if self.wait < self.patience:
            return True
        if self.would_stop_step is None:
            self.would_stop_step = applied
            if self.verbose:  # a decision about the run, not library noise: shown without --verbose
                say(f"KappaEarlyStopping: conflict irreconcilable ({self.criterion}, {self.mode}) for "
                               f"{self.wait} step(s) after {applied} updates"
                               + (" (monitor only, continuing)" if self.monitor_only else "; stopping"))
        if self.monitor_only:
            return True
        self.stopped_step = applied
        if trainer is not None:
            trainer.should_stop = True
        return False

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.would_stop_step is not None:
            pl_module.log("kappa_stop/would_stop_step", float(self.would_stop_step), on_step=True)

    def state_dict(self) -> dict[str, Any]:
        return {"wait": self.wait, "stopped_step": self.stopped_step, "would_stop_step": self.would_stop_step}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.wait = state_dict["wait"]
        self.stopped_step = state_dict["stopped_step"]
        self.would_stop_step = state_dict["would_stop_step"]
