"""A progress bar that counts optimizer steps for step-bounded runs (unlearning), epochs otherwise.

Unlearning runs are bounded by `max_steps` with `max_epochs=-1`, which Lightning's bars render as
"Epoch 19/-2 … v_num: 0.000". This bar shows one line, `unlearning 35/300 [...]`, that continues across data
epochs and resumes at the restored step, without the logger's version number. Validation (a few small eval
sets) gets no bar of its own. When the output is not a terminal (a log file, CI) the bars are off: carriage-
return updates would fill the log.
"""

from __future__ import annotations

import sys

from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.callbacks.progress.tqdm_progress import Tqdm

__all__ = ["StepProgressBar"]


def _set_position(bar, n: int) -> None:
    if not bar.disable:
        bar.n = n
        bar.refresh()


class StepProgressBar(TQDMProgressBar):
    def __init__(self, refresh_rate: int = 1, leave: bool = False) -> None:
        super().__init__(refresh_rate=refresh_rate, leave=leave)
        if not sys.stdout.isatty():
            self.disable()

    def init_validation_tqdm(self) -> Tqdm:
        return Tqdm(disable=True)

    def init_sanity_tqdm(self) -> Tqdm:
        return Tqdm(disable=True)

    @staticmethod
    def _by_steps(trainer) -> bool:
        return bool(trainer.max_steps and trainer.max_steps > 0)

    def get_metrics(self, trainer, pl_module):
        items = super().get_metrics(trainer, pl_module)
        items.pop("v_num", None)
        return items

    def on_train_epoch_start(self, trainer, *args) -> None:
        if not self._by_steps(trainer):
            return super().on_train_epoch_start(trainer, *args)
        bar = self.train_progress_bar
        if bar.total != trainer.max_steps:  # first epoch of this fit (or of a resumed one)
            bar.reset(total=trainer.max_steps)
            from lit_unlearn.modules.unlearning import UnlearningModule

            bar.set_description("unlearning" if isinstance(trainer.lightning_module, UnlearningModule) else "training")
            _set_position(bar, trainer.global_step)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if not self._by_steps(trainer):
            return super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        if self.train_progress_bar is not None and self._should_update(trainer.global_step, trainer.max_steps):
            _set_position(self.train_progress_bar, trainer.global_step)
            self.train_progress_bar.set_postfix(self.get_metrics(trainer, pl_module))

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if not self._by_steps(trainer):
            return super().on_train_epoch_end(trainer, pl_module)
        if not self.train_progress_bar.disable:
            self.train_progress_bar.set_postfix(self.get_metrics(trainer, pl_module))
