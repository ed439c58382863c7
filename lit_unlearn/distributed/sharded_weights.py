"""Moving the weights along a direction known only as this rank's gradient slices, and restoring them exactly.

OFMU evaluates gradients at shifted weights (inner ascent steps, finite-difference HVPs). Under DeepSpeed ZeRO a
rank holds a slice of each gradient (`read_local_grads`), laid out like its slice of the compute (low-precision)
copy of the weights:

- ZeRO-3: the local partition `p.ds_tensor`; a forward pass gathers the partitions, so shifting them shifts the
  model. Small "persistent" parameters stay gathered between passes: their (small) partitions are re-gathered
  after a shift, as DeepSpeed does after its own optimizer step.
- ZeRO-1/2: every rank keeps whole parameters, and owns one partition of their flat buffer (the hp-mapping
  fragment's `lp_fragment_address`). Each rank shifts its partition, then the partitions are all-gathered into
  every rank's copy: the same parameter all-gather that ends every ZeRO-2 optimizer step.
- unsharded (one process, DDP): the whole parameters, in place.

No full gradient or direction is gathered, and the fp32 master copy in the optimizer is never touched, so a
restore (copying the saved slices back, then the same re-sync) returns the weights bit for bit.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["ShardedWeights"]


class ShardedWeights:
    def __init__(self, params: list[nn.Parameter], stage: int, zero_optimizer=None) -> None:
        if stage in (1, 2) and zero_optimizer is None:
            raise ValueError("ZeRO-1/2 weight shifts need the DeepSpeed ZeRO optimizer (to re-gather partitions)")
        self.params, self.stage, self.optimizer = params, stage, zero_optimizer

    def local_views(self) -> list[Tensor]:
        """This rank's slice of each weight, shaped like `read_local_grads`' slice of its gradient."""
        if self.stage == 3:
            return [p.ds_tensor.data.view(-1) for p in self.params]
        if self.stage in (1, 2):
            out = []
            for p in self.params:
                mapping = getattr(p, "_hp_mapping", None)
                if mapping is None:
                    out.append(torch.zeros(0, dtype=p.dtype, device=p.device))
                else:
                    addr = mapping.lp_fragment_address
                    out.append(p.data.view(-1).narrow(0, addr.start, addr.numel))
            return out
        return [p.data for p in self.params]

    def snapshot(self) -> list[Tensor]:
        return [v.detach().clone() for v in self.local_views()]

    @torch.no_grad()
    def shift(self, direction: list[Tensor], step: float) -> None:
        """θ ← θ + step·direction (direction: local slices)."""
        for view, d in zip(self.local_views(), direction):
            if view.numel():
                view.add_(d.reshape(view.shape).to(view.dtype), alpha=step)
        self._sync()

    @torch.no_grad()
    def restore(self, saved: list[Tensor]) -> None:
        for view, s in zip(self.local_views(), saved):
            view.copy_(s)
        self._sync()

    def _sync(self) -> None:
        if self.stage == 3:
            self._regather_available()
        elif self.stage in (1, 2):
            from deepspeed.runtime.utils import all_gather_dp_groups

            opt = self.optimizer
            all_gather_dp_groups(groups_flat=opt.bit16_groups_flat,
                                 partitioned_param_groups=opt.parallel_partitioned_bit16_groups,
                                 dp_process_group=opt.real_dp_process_group,
                                 start_alignment_factor=opt.nccl_start_alignment_factor,
                                 allgather_bucket_size=opt.allgather_bucket_size)

    def _regather_available(self) -> None:
        """ZeRO-3 parameters that stay gathered between passes ("persistent": below the persistence threshold)
        would not see a change of their partition: copy the partitions of all ranks into their gathered copy
        (DeepSpeed partitions a flattened parameter into equal contiguous pieces, rank-ordered, padded)."""
        import torch.distributed as dist

        gathered = [p for p in self.params if p.data.numel() == getattr(p, "ds_numel", -1)]
        if not gathered:
            return
        world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        for p in gathered:
            part = p.ds_tensor.data.view(-1)
            pieces = [torch.empty_like(part) for _ in range(world)]
            if world > 1:
                dist.all_gather(pieces, part)
            else:
                pieces = [part]
            p.data.view(-1).copy_(torch.cat(pieces)[: p.ds_numel])
