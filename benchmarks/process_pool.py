"""Run benchmark cases as separate processes, `jobs` at a time, each with one thread: two processes side by side on
two cores with a thread each, not four spinning OpenMP threads (which triples wall time)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

__all__ = ["run_all"]


def run_all(commands: list[list[str]], jobs: int, what: str, stop_on_failure: bool = True) -> None:
    """Run `commands`; print each one's end (its last three arguments name it). A failed command stops everything
    (stop_on_failure) or is reported and the others go on."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    pending, running = list(commands), []
    while pending or running:
        while pending and len(running) < jobs:
            cmd = pending.pop(0)
            running.append((cmd, time.perf_counter(), subprocess.Popen(cmd, env=env)))
        time.sleep(1)
        for item in list(running):
            cmd, started, proc = item
            if proc.poll() is None:
                continue
            running.remove(item)
            if proc.returncode and stop_on_failure:
                sys.exit(f"{what} {cmd[-3:]} failed (exit {proc.returncode})")
            state = "done" if proc.returncode == 0 else f"FAILED (exit {proc.returncode})"
            print(f"{what} {' '.join(cmd[-3:])}: {state} ({time.perf_counter() - started:.0f} s)", flush=True)
