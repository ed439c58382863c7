"""Test helper: SIGKILL the training process itself at a given step (a crash with no chance to clean up)."""

import os
import signal

from lightning.pytorch.callbacks import Callback


class KillAtStep(Callback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step >= self.step:
            os.kill(os.getpid(), signal.SIGKILL)
