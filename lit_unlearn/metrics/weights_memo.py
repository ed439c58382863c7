"""Per-item evaluation results shared while a network's weights stay the same.

Several callbacks evaluate the same weights in one run: before the first update, the TOFU report of the target
and the reference-free verification's utility baseline and reporting half; when fitting ends, the stop rule's last
look, the TOFU report and the verification's reporting half, all on the weights the stop rule chose. Through this
memo each (question, answer) is scored, each question answered and each gradient norm taken once per set of weights:
results live per network under a key of the settings that produced them (`TofuEvaluator` builds the keys), and all
of them are dropped as soon as the weights' fingerprint changes.

The fingerprint is three float64 reductions per parameter tensor (the sum, the sum of squares and the sum of every
third element), computed where the parameters live: any training step changes it, and putting the same weights back
gives it back. It is a checksum, not a proof of equality; two weight sets that agree on all three sums of every
tensor do not arise from training.

Only in a single process, on whole parameters: under data or ZeRO parallelism each rank would decide alone whether
to reuse, and the collectives of a rank that scores would wait for a rank that does not; ZeRO-3's partitioned
parameters are not the weights.
"""

from __future__ import annotations

import weakref
from typing import Any, Hashable

import torch
from torch import nn

from lit_unlearn.distributed.sharded_grads import zero3_partitioned

__all__ = ["WeightsMemo", "memo_for", "weights_fingerprint"]

_MEMOS: "weakref.WeakKeyDictionary[nn.Module, WeightsMemo]" = weakref.WeakKeyDictionary()


@torch.no_grad()
def weights_fingerprint(network: nn.Module) -> tuple[float, ...]:
    """Three float64 sums per parameter tensor, in parameter order (with the tensors' shapes)."""
    parts = []
    for p in network.parameters():
        flat = p.detach().reshape(-1)
        parts.append(torch.stack([flat.sum(dtype=torch.float64), flat.double().square().sum(),
                                  flat[::3].sum(dtype=torch.float64)]))
    sums = torch.cat(parts).cpu().tolist() if parts else []
    return tuple(sums) + tuple(s for p in network.parameters() for s in p.shape)


class WeightsMemo:
    """The results of one network's current weights, by settings key."""

    def __init__(self) -> None:
        self.fingerprint: tuple | None = None
        self._stores: dict[Hashable, dict] = {}

    def refresh(self, network: nn.Module) -> "WeightsMemo":
        """Drop every result if the weights changed since the last refresh."""
        fingerprint = weights_fingerprint(network)
        if fingerprint != self.fingerprint:
            self.fingerprint, self._stores = fingerprint, {}
        return self

    def store(self, key: Hashable) -> dict[Any, Any]:
        """The results kept under `key` for the current weights (a dict the caller fills)."""
        return self._stores.setdefault(key, {})


def memo_for(network: nn.Module) -> WeightsMemo | None:
    """The network's memo, refreshed against its current weights; None under several processes, or where the
    parameters are ZeRO-3 partitions (what this process holds is not the weights)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized() and \
            torch.distributed.get_world_size() > 1:
        return None
    if zero3_partitioned(network):
        return None
    return _MEMOS.setdefault(network, WeightsMemo()).refresh(network)
