"""One rank of a 2-process gloo job that does a few collectives and then ends the way our commands do.

    python tests/gloo_exit_worker.py RANK PORT release|leave
"""

import sys

import torch
import torch.distributed as dist

from lit_unlearn.distributed import release_process_group

rank, port, ending = int(sys.argv[1]), sys.argv[2], sys.argv[3]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
for _ in range(20):
    dist.all_reduce(torch.randn(1000))
    dist.all_reduce(torch.randn(1000), async_op=True).wait()
    dist.all_gather([torch.empty(100), torch.empty(100)], torch.randn(100))
dist.barrier()
if ending == "release":
    release_process_group()
    assert not dist.is_initialized()
