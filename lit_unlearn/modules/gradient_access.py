"""Per-loss gradients and the update written back, with the same code unsharded and under DeepSpeed ZeRO.

A mixin of `UnlearningModule`. Unsharded, the gradients are the p.grad tensors; under ZeRO-2/3 each rank holds only
its slices of the flat gradient partition (lit_unlearn.distributed.sharded_grads), statistics computed on them are
summed over the ranks, and the combined update is written back into the partitions before the optimizer step.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import Tensor

from lit_unlearn.distributed.sharded_grads import all_reduce_sum, read_local_grads, write_local_grads

__all__ = ["GradientAccess"]


class GradientAccess:
    """Needs `self._params` (the trainable parameters), `self.zero_stage`, and a LightningModule's
    `optimizers()` / `manual_backward` / `trainer`."""

    def gradients(self, loss: Tensor, release: bool = True, retain_graph: bool = False) -> list[Tensor]:
        """Backward `loss` alone and return one gradient per trainable parameter (zeros where unused).

        release=True hands the gradient tensors over (p.grad is reset to None), so the next backward allocates
        fresh ones and nothing is copied; release=False leaves them in p.grad, where an update can be written.
        retain_graph=True keeps the graph for a second backward through the same forward pass.
        """
        params = self._params
        if self.zero_stage:
            # Sharded (DeepSpeed ZeRO): this rank's gradient slices. zero_grad first: ZeRO-2 would overwrite and
            # ZeRO-3 accumulate into the previous backward's partition.
            self.optimizers().zero_grad()
            self.manual_backward(loss, retain_graph=retain_graph)
            return read_local_grads(params, self.zero_stage, copy=release)
        for p in params:
            p.grad = None
        self.manual_backward(loss, retain_graph=retain_graph)
        return self._collected(release)

    def _collected(self, release: bool) -> list[Tensor]:
        """The p.grad tensors (zeros where a parameter got none), handed over when `release`."""
        grads = []
        for p in self._params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            grads.append(p.grad)
            if release:
                p.grad = None
        return grads

    def micro_gradients(self, loss_of: Callable[..., Tensor], *batches, release: bool = True
                        ) -> tuple[Tensor, list[Tensor]]:
        """(the loss, its gradients) of `loss_of(*batches)`, over this step's micro-batches (`self.micro_parts`).

        In one part this is `gradients(loss_of(*batches))`. In P parts, each batch is split into P equal parts
        (lit_unlearn.data.micro_batches), `loss_of` is called on the i-th part of each, and the gradients of the
        parts' losses, each weighted 1/P, are summed: unsharded in p.grad, under ZeRO in a local sum (a ZeRO
        backward replaces or adds to its partition by stage, so each part's slices are read out). The loss returned
        is the parts' weighted sum, detached. `release` as in `gradients`.
        """
        parts = self.micro_parts
        if parts == 1:
            loss = loss_of(*batches)
            return loss, self.gradients(loss, release=release)
        from lit_unlearn.data.micro_batches import split_batch

        chunks = list(zip(*(split_batch(b, parts) for b in batches)))
        params, total, summed = self._params, None, None
        if not self.zero_stage:
            for p in params:
                p.grad = None
        for chunk in chunks:
            loss = loss_of(*chunk) / parts
            if self.zero_stage:
                self.optimizers().zero_grad()
                self.manual_backward(loss)
                local = read_local_grads(params, self.zero_stage, copy=True)
                summed = local if summed is None else [s.add_(g) for s, g in zip(summed, local)]
            else:
                self.manual_backward(loss)  # adds to p.grad
            total = loss.detach() if total is None else total + loss.detach()
        return total, summed if self.zero_stage else self._collected(release)

    def set_update(self, grads: list[Tensor]) -> None:
        """Make `grads` (from `gradients()`, combined in place) what the optimizer step applies. Unsharded, they
        already are the p.grad tensors (release=False); under ZeRO they are written back into the partitions."""
        if self.zero_stage:
            write_local_grads(self._params, grads, self.zero_stage)

    def sum_over_shards(self, t: Tensor) -> Tensor:
        """Statistics computed on gradient slices → the statistics of the whole gradients (identity unsharded)."""
        return all_reduce_sum(t, self.zero_stage)

    def global_mean(self, value: Tensor) -> Tensor:
        """The mean of a per-process scalar over all processes (the global batch's value of a batch-mean loss: the
        local losses are rescaled in `compute_loss` so that their average is the global mean)."""
        world = self.trainer.world_size if self._trainer is not None else 1
        if world > 1 and dist.is_available() and dist.is_initialized():
            value = value.detach().clone().to(torch.float64)
            dist.all_reduce(value)
            value = value / world
        return value
