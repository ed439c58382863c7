"""Tear the process group down before the interpreter does.

Left to interpreter shutdown, gloo's worker threads can still hold finished work whose tensors need the GIL
while Python is being torn down; the process then aborts ("terminate called without an active exception",
SIGABRT) after a run that succeeded. NCCL warns instead. Only call this after success: destroying the group
while another rank is still inside a collective (an error path) can deadlock.
"""

import torch.distributed as dist


def release_process_group() -> None:
    """Destroy the default process group, if this process started one."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
