"""Sharded training support: gradient slices under ZeRO, process-group shutdown, and a CPU DeepSpeed strategy
for tests."""

from lit_unlearn.distributed.sharded_grads import (all_reduce_sum, read_local_grads, write_local_grads, zero3_partitioned,
                                                  zero_stage)
from lit_unlearn.distributed.shutdown import release_process_group

__all__ = ["DeepSpeedStrategy", "all_reduce_sum", "read_local_grads", "release_process_group", "write_local_grads",
           "zero3_partitioned", "zero_stage"]


def __getattr__(name: str):
    # The strategy imports Lightning (seconds); the tensor helpers above need only torch.
    if name == "DeepSpeedStrategy":
        from lit_unlearn.distributed.deepspeed_strategy import DeepSpeedStrategy

        return DeepSpeedStrategy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
