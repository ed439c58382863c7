"""End a multi-process run so that Python's shutdown cannot abort it.

Left to interpreter shutdown, a gloo worker thread that still holds a collective's tensors (an all-gather
that ZeRO-3 prefetched and nobody waited for, say) releases them while Python is being torn down; it then
needs the GIL, and the process aborts ("terminate called without an active exception", SIGABRT) after a run
that succeeded. Destroying the group is not enough while DeepSpeed or an optimizer still references it: its
threads live on. So: a barrier, which in gloo waits for every collective this process queued; destroy the
group; then a moment with the GIL released, so a worker thread drops the finished work before shutdown.
Only call this after success, on every rank: it is a collective, and destroying a group while another rank
is still inside a collective (an error path) can hang.
"""

import time

import torch.distributed as dist

# Measured on a 2-process gloo job that leaves one all-gather unwaited and keeps a reference to the group:
# 23 of 50 runs aborted with destroy alone, 7 of 150 with barrier + destroy, 0 of 100 with this pause too.
_SETTLE_SECONDS = 0.1


def release_process_group() -> None:
    """Wait for this process's collectives, then destroy the default process group, if one was started."""
    if not (dist.is_available() and dist.is_initialized()):
        return
    dist.barrier()
    dist.destroy_process_group()
    time.sleep(_SETTLE_SECONDS)
