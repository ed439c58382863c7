"""A pre-emption signal between a bench's runs: while a world is built, a finished run is evaluated, a grid point is
chosen or the table is written.

A run's training has its own Preemption callback (a consistent checkpoint at the next step boundary). Outside it
nothing is in flight that a restart would lose: finished runs are in OUT/runs.jsonl and an unfinished run resumes from
its last checkpoint. So the bench stops at once, says how to go on, asks SLURM to requeue the job where it runs under
SLURM, and exits with 128 + the signal. Without this, the signal's default action ended the bench without a word.
"""

from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from lit_unlearn.callbacks.preemption import PREEMPTION_SIGNALS, _requeue
from lit_unlearn.core.console import say

__all__ = ["stop_between_runs"]


@contextmanager
def stop_between_runs(out: Path) -> Iterator[None]:
    """Inside: SIGTERM or SIGUSR1 ends the bench with 128 + the signal and one line saying how to go on. A run's
    Preemption replaces the handler during its training and puts it back after."""
    if threading.current_thread() is not threading.main_thread():  # signal handlers live in the main thread only
        yield
        return

    def stop(signum, frame) -> None:
        name = signal.Signals(signum).name
        say(f"bench interrupted by {name} between runs: the finished runs are kept in {out / 'runs.jsonl'} and an "
            "unfinished run resumes from its checkpoint; run the same command again to go on")
        if os.environ.get("SLURM_JOB_ID"):
            _requeue()
        raise SystemExit(128 + int(signum))

    previous = {sig: signal.signal(sig, stop) for sig in PREEMPTION_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
