"""Test helper: deliver a signal to this process at a chosen point *inside* a training step, the way a cluster's
pre-emption warning lands: in the forward pass, in a backward pass, in the optimizer step, between steps, or in
the middle of writing a checkpoint. `signal="KILL"` simulates a hard kill at that point."""

import os
import signal

from lightning.pytorch.callbacks import Callback

PHASES = ("forward", "backward", "optimizer", "batch_start", "save")


class SignalAt(Callback):
    def __init__(self, step: int, phase: str = "backward", signal_name: str = "USR1") -> None:
        if phase not in PHASES:
            raise ValueError(f"phase must be one of {PHASES}")
        self.step, self.phase, self.signum = step, phase, getattr(signal, f"SIG{signal_name}")
        self.sent = False

    def _send(self, trainer) -> None:
        if not self.sent and trainer.global_step == self.step and trainer.is_global_zero:
            self.sent = True
            os.kill(os.getpid(), self.signum)

    def on_train_start(self, trainer, pl_module) -> None:
        if self.phase == "forward":
            pl_module.network.register_forward_pre_hook(lambda *_: self._send(trainer))
        elif self.phase == "backward":
            param = next(p for p in pl_module.network.parameters() if p.requires_grad)
            param.register_hook(lambda g: (self._send(trainer), g)[1])
        elif self.phase == "optimizer":
            optimizer = trainer.optimizers[0]
            optimizer.register_step_pre_hook(lambda *_: self._send(trainer))
        elif self.phase == "save":
            io = trainer.strategy.checkpoint_io
            write = io.save_checkpoint

            def save_and_signal(checkpoint, path, storage_options=None):
                if trainer.global_step == self.step and not self.sent and self.signum == signal.SIGKILL:
                    # Die in the middle of the write: only part of the bytes reach the temporary file.
                    import io as _io

                    import torch

                    buffer = _io.BytesIO()
                    torch.save(checkpoint, buffer)
                    tmp = os.path.join(os.path.dirname(str(path)), f".{os.path.basename(str(path))}.tmp-{os.getpid()}")
                    with open(tmp, "wb") as fh:
                        fh.write(buffer.getvalue()[: len(buffer.getvalue()) // 2])
                    self._send(trainer)
                self._send(trainer)
                return write(checkpoint, path, storage_options)

            io.save_checkpoint = save_and_signal

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.phase == "batch_start":
            self._send(trainer)


class SignalAtFinalVerdict(Callback):
    """Deliver `signal_name` to this process as the final verdict starts (HoldoutVerification's on_fit_end), after
    training and its final checkpoint: where a cluster's pre-emption lands during a long final evaluation."""

    def __init__(self, signal_name: str = "TERM") -> None:
        self.signum = getattr(signal, f"SIG{signal_name}")

    def on_train_end(self, trainer, pl_module) -> None:
        verification = next(cb for cb in trainer.callbacks if type(cb).__name__ == "HoldoutVerification")
        final = verification.on_fit_end

        def signalled(*args, **kwargs):
            os.kill(os.getpid(), self.signum)
            return final(*args, **kwargs)

        verification.on_fit_end = signalled
