"""One rank of a 2-process gloo job shaped like the end of a ZeRO-3 run: a few collectives, one all-gather
queued and never waited for (a prefetch), and a reference to the group held elsewhere (an engine). It then
ends the way our commands do, or, with `leave`, lets Python's shutdown deal with it.

    python tests/gloo_exit_worker.py RANK PORT release|leave
"""

import sys

import torch
import torch.distributed as dist

from lit_unlearn.distributed import release_process_group

rank, port, ending = int(sys.argv[1]), sys.argv[2], sys.argv[3]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
for _ in range(5):
    dist.all_reduce(torch.randn(1000))
gathered = [torch.empty(200_000), torch.empty(200_000)]
prefetch = dist.all_gather(gathered, torch.randn(200_000), async_op=True)
engine = {"group": dist.group.WORLD}
if ending == "release":
    release_process_group()
    assert not dist.is_initialized()
