"""ModelCheckpoint that always leaves the final weights in `last.ckpt`.

Lightning's ModelCheckpoint writes `last.ckpt` only at its save points (every_n_train_steps, epoch ends); a run
that ends between two of them (max_steps not a multiple, or a κ₂ early stop) would leave `last.ckpt` holding
older weights than the model that was evaluated. This subclass writes it once more when training ends.
"""

from __future__ import annotations

from lightning.pytorch.callbacks import ModelCheckpoint

from lit_unlearn.core.plug_points import UnlearningRun, as_plug

__all__ = ["FinalCheckpoint"]


class FinalCheckpoint(ModelCheckpoint):
    def __init__(self, *args, save_last: bool = True, **kwargs) -> None:
        super().__init__(*args, save_last=save_last, **kwargs)

    def on_train_end(self, trainer, pl_module) -> None:
        # Relies on ModelCheckpoint's bookkeeping of the last saved step (lightning is pinned for this). A run that
        # ended on earlier weights (StopAtTarget restored the closest) must rewrite last.ckpt with them.
        run = as_plug(pl_module, UnlearningRun)
        restored = run is not None and run.run_report.ended_on_step not in (None, trainer.global_step)
        if self.save_last and (restored or trainer.global_step != self._last_global_step_saved):
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))
        else:
            super().on_train_end(trainer, pl_module)
