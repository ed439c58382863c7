"""A network's full weights for the length of a `with` block, whether or not its parameters are ZeRO-3 partitions
(then no rank holds them between passes). Gathering is collective: every rank enters the block."""

from __future__ import annotations

from contextlib import nullcontext

from torch import nn

from lit_unlearn.distributed.sharded_grads import zero3_partitioned

__all__ = ["gathered_weights"]


def gathered_weights(network: nn.Module):
    """A context in which `network`'s parameters are whole on every rank (read-only: changes are not scattered)."""
    if not zero3_partitioned(network):
        return nullcontext()
    import deepspeed

    return deepspeed.zero.GatheredParameters(list(network.parameters()), modifier_rank=None)
