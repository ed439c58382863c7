"""Lightning's DeepSpeedStrategy with checkpoint folders that say when they are complete.

A ZeRO checkpoint is a folder of per-rank files written by DeepSpeed itself; a kill during the write leaves some
of them missing or short, and nothing tells. After every rank has written its part (a barrier), rank zero adds
the marker file `CHECKPOINT_COMPLETE`; resume (`--ckpt_path last`) only takes folders that have it. The packaged
Llama-2-7B ZeRO configs use this strategy; `CPUDeepSpeedStrategy` (tests) builds on it.
"""

from __future__ import annotations

from pathlib import Path

from lightning.pytorch.strategies import DeepSpeedStrategy as _LightningDeepSpeedStrategy

from lit_unlearn.storage.checkpoint_io import COMPLETE_MARKER, atomic_write_bytes

__all__ = ["DeepSpeedStrategy"]


class DeepSpeedStrategy(_LightningDeepSpeedStrategy):
    strategy_name = "lit_unlearn_deepspeed"

    def save_checkpoint(self, checkpoint: dict, filepath, storage_options=None) -> None:
        filepath = self.broadcast(filepath)
        marker = Path(filepath) / COMPLETE_MARKER
        if self.is_global_zero and marker.exists():
            marker.unlink()  # being overwritten: incomplete until every rank has written again
        self.barrier("checkpoint_start")
        super().save_checkpoint(checkpoint, filepath, storage_options)
        self.barrier("checkpoint_written")
        if self.is_global_zero:
            atomic_write_bytes(marker, b"complete\n")
