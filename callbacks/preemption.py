"""Pre-emption (SIGUSR1, SIGTERM) honoured at the next step boundary, with a checkpoint that is consistent.

A signal handler runs between Python bytecodes, anywhere inside a step: after the data loader has handed out
batch k+1 and before the update, inside a backward pass, inside a checkpoint write. Lightning's SLURM handler
saves its hpc checkpoint right there, recording global_step k with the data stream already at k+1 (a resume
then replays a different batch). Here the handler only records the signal; at the end of the step in progress
(after the update and the periodic checkpoints of that step), the callback:

1. agrees across processes that a signal came (one all_reduce of a flag per step under data parallelism);
2. saves `hpc_ckpt_N.ckpt` in the run's folder: weights, optimizer, data position, callback states and the
   random-number generators, all of the same step;
3. asks SLURM to requeue the job (`scontrol requeue $SLURM_JOB_ID`) when it runs under SLURM;
4. ends training with `Preempted`: the command line prints "interrupted at step N; resume with ..." and exits
   with 128 + the signal number. A requeued job relaunching the same command resumes that run by itself.

Once training is over there is no step boundary left to wait for, yet the final evaluation and verdict can take
minutes (a cluster's SIGKILL follows its SIGTERM within a grace period). From the moment the final evaluation
begins (TrainingOver, the first callback's on_fit_end), a signal, one pending since training ended included, stops
the run at once
(`Preempted` with boundary=False, no new checkpoint): the resume point is the run's last checkpoint, and resuming
it redoes the evaluation without training again.

The random-number generators (Python, NumPy, torch) are part of every checkpoint this callback sees saved, and
are restored on resume. Install it through the command line (it is added to every `lit-unlearn` training run).
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import threading
from typing import Any

import numpy as np
import torch
from lightning.pytorch.callbacks import Callback

from lit_unlearn.core.console import say

__all__ = ["Preemption", "Preempted", "TrainingOver", "PREEMPTION_SIGNALS"]

PREEMPTION_SIGNALS = (signal.SIGUSR1, signal.SIGTERM)


class Preempted(SystemExit):
    """A run stopped by a pre-emption signal: at a step boundary, with a consistent checkpoint of that step, or
    (boundary=False) after training, wherever the signal landed, the run's last checkpoint being the resume point."""

    def __init__(self, signum: int, step: int, checkpoint: str | None, boundary: bool = True) -> None:
        super().__init__(128 + int(signum))
        self.signum, self.step, self.checkpoint = int(signum), step, checkpoint
        self.boundary = boundary  # False: after training, wherever the signal landed (a collective may be in flight)


class Preemption(Callback):
    def __init__(self, requeue: bool | None = None, identity: dict | None = None) -> None:
        """
        Args:
            requeue: ask SLURM to requeue the job after saving (default: when SLURM_JOB_ID is set).
            identity: {fingerprint, folder, ...} written into every checkpoint (which run it belongs to).
        """
        super().__init__()
        self.requeue = requeue
        self.identity = identity or {}
        self.pending: int | None = None
        self.received: int | None = None  # the signal that ended the run, for the command line
        self._previous: dict[int, Any] = {}
        self._finished_training: Any = None  # the trainer, once its training is over

    # ----- signals ----------------------------------------------------------------------------------------------------
    def _handler(self, signum, frame) -> None:  # no I/O here during training: it can run inside any bytecode of a step
        self.pending = signum
        if self._finished_training is not None:
            self._stop_now(signum)

    def _stop_now(self, signum: int) -> None:
        trainer = self._finished_training
        self._stop(trainer, signum, f"received {signal.Signals(signum).name} after training (step "
                   f"{trainer.global_step}): stopping the final evaluation; resuming redoes it from the last "
                   "checkpoint", checkpoint=None, boundary=False)

    def _stop(self, trainer, signum: int, message: str, checkpoint: str | None, boundary: bool) -> None:
        """Say why (first process), ask SLURM to requeue the job where it runs under SLURM, and end the run."""
        self.received = signum
        if trainer.is_global_zero:
            say(message)
            if self.requeue if self.requeue is not None else bool(os.environ.get("SLURM_JOB_ID")):
                _requeue()
        raise Preempted(signum, trainer.global_step, checkpoint, boundary)

    def setup(self, trainer, pl_module, stage: str) -> None:
        self._finished_training = None
        if stage != "fit" or threading.current_thread() is not threading.main_thread():
            return
        for sig in PREEMPTION_SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handler)

    def teardown(self, trainer, pl_module, stage: str) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        self._previous = {}

    def _signal_everywhere(self, trainer) -> int | None:
        """The pending signal if any process received one (all processes must stop at the same step)."""
        if trainer.world_size > 1 and torch.distributed.is_available() and torch.distributed.is_initialized():
            flag = torch.tensor([self.pending or 0], dtype=torch.int64, device=trainer.strategy.root_device)
            torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
            return int(flag.item()) or None
        return self.pending

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        # Lightning stops by itself after a SIGTERM (at this same boundary, but with exit code 0 and no
        # checkpoint); the pending flag catches both signals first.
        signum = self._signal_everywhere(trainer)
        if signum is None:
            return
        path = trainer._checkpoint_connector.hpc_save_path(trainer.default_root_dir)
        trainer.save_checkpoint(path)
        self._stop(trainer, signum, f"received {signal.Signals(signum).name} during step {trainer.global_step}: "
                   f"saved {path} at the step boundary", checkpoint=path, boundary=True)

    def training_over(self, trainer) -> None:
        """No step boundary is coming: a signal from here on (one already pending included) stops the run at once."""
        if self._finished_training is None and threading.current_thread() is threading.main_thread():
            self._finished_training = trainer
            if self.pending is not None:
                self._stop_now(self.pending)

    # ----- what every checkpoint carries ----------------------------------------------------------------------------
    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        if self.identity:
            checkpoint["run_identity"] = dict(self.identity)

    def state_dict(self) -> dict[str, Any]:
        # Tensors and plain tuples only: checkpoints stay loadable with torch.load(weights_only=True).
        kind, keys, pos, has_gauss, cached = np.random.get_state()
        state = {"python": random.getstate(), "numpy": (kind, torch.from_numpy(keys.copy()), pos, has_gauss, cached),
                 "torch": torch.get_rng_state()}
        if torch.cuda.is_available():
            state["cuda"] = torch.cuda.get_rng_state_all()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if not state_dict:
            return
        py = state_dict["python"]
        random.setstate((py[0], tuple(py[1]), py[2]))
        kind, keys, pos, has_gauss, cached = state_dict["numpy"]
        np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
        torch.set_rng_state(state_dict["torch"])
        if "cuda" in state_dict and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state_dict["cuda"])


class TrainingOver(Callback):
    """Placed first among a run's callbacks: tells its Preemption that training is over before any other callback's
    on_fit_end starts the final evaluation. on_fit_end, not on_train_end: a run resumed at its last step skips the
    training loop, and with it on_train_end; and a signal during Lightning's teardown in between waits here instead
    of interrupting it."""

    def __init__(self, preemption: Preemption) -> None:
        super().__init__()
        self.preemption = preemption

    def on_fit_end(self, trainer, pl_module) -> None:
        self.preemption.training_over(trainer)


def _requeue() -> None:
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    job = f"{array}_{task}" if array and task else os.environ.get("SLURM_JOB_ID", "")
    if not re.fullmatch(r"[0-9_]+", job):
        say(f"not requeueing: SLURM job id {job!r} looks wrong")
        return
    try:
        result = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=60)
        say(f"requeued SLURM job {job}" if result.returncode == 0 else
            f"could not requeue SLURM job {job}: {result.stderr.strip()[:200]}")
    except (OSError, subprocess.TimeoutExpired) as err:
        say(f"could not requeue SLURM job {job}: {err}")
