"""Sharded training support: gradient slices under ZeRO, and a CPU DeepSpeed strategy for tests."""

from lit_unlearn.distributed.deepspeed_strategy import DeepSpeedStrategy
from lit_unlearn.distributed.sharded_grads import all_reduce_sum, read_local_grads, write_local_grads, zero_stage

__all__ = ["DeepSpeedStrategy", "all_reduce_sum", "read_local_grads", "write_local_grads", "zero_stage"]
