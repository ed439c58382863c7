"""Per-parameter gradients under ZeRO sharding, without ever gathering a full gradient.

After backward, ZeRO-2/3 keep each gradient only as this rank's slice of the flat partition (p.grad is None).
HAMU needs three scalars per block (‖g_r‖², ‖g_f‖², g_r·g_f): each rank computes them on its slices, one
all_reduce of a [3, n_tensors] tensor sums them, and the combined update is written back slice by slice.
Every element of every gradient lives on exactly one rank, so the sums are the unsharded statistics.

- ZeRO-3: `deepspeed.utils.safe_get_local_grad` / `safe_set_local_grad`.
- ZeRO-1/2: the parameter's hp-mapping fragment (`_hp_mapping.get_lp_grad_fragment`); a parameter with no
  fragment on this rank contributes an empty slice.
- no ZeRO (single process, DDP): the full, already averaged `p.grad`.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor, nn

__all__ = ["zero_stage", "zero3_partitioned", "read_local_grads", "write_local_grads", "all_reduce_sum"]


def zero_stage(strategy) -> int:
    """The ZeRO stage of a Lightning strategy (0 for anything that is not DeepSpeed)."""
    config = getattr(strategy, "config", None)
    if not isinstance(config, dict) or "zero_optimization" not in config:
        return 0
    return int(config["zero_optimization"].get("stage", 0))


def zero3_partitioned(network: nn.Module) -> bool:
    """Whether the network's parameters are ZeRO-3 partitions: then no rank holds the weights themselves."""
    return any(hasattr(p, "ds_id") for p in network.parameters())


def _fragment(p: nn.Parameter) -> Tensor | None:
    mapping = getattr(p, "_hp_mapping", None)
    if mapping is None:
        return None
    return mapping.get_lp_grad_fragment(p._index_in_param_group)


def read_local_grads(params: list[nn.Parameter], stage: int, copy: bool = True) -> list[Tensor]:
    """This rank's slice of each parameter's gradient. copy=True returns fresh tensors (needed for g_r: the
    next backward reuses the buffers); copy=False returns the buffers themselves where ZeRO exposes them, so an
    update combined in place there costs no extra memory (g_f: one fp32 partition less per rank)."""
    keep = (lambda t: t.detach().clone()) if copy else (lambda t: t.detach())
    if stage == 0:
        return [torch.zeros_like(p) if p.grad is None else keep(p.grad) for p in params]
    if stage == 3:
        from deepspeed.utils import safe_get_local_grad

        return [keep(safe_get_local_grad(p)) for p in params]
    out = []
    for p in params:
        frag = _fragment(p)
        out.append(torch.zeros(0, dtype=torch.float32, device=p.device) if frag is None
                   else keep(frag).reshape(-1))
    return out


def write_local_grads(params: list[nn.Parameter], values: list[Tensor], stage: int) -> None:
    """Make `values` (slices shaped as `read_local_grads` returned them) the gradients the optimizer applies."""
    if stage == 0:
        for p, v in zip(params, values):
            p.grad = v.to(p.dtype)
        return
    if stage == 3:
        from deepspeed.utils import safe_set_local_grad

        for p, v in zip(params, values):
            safe_set_local_grad(p, v)
        return
    for p, v in zip(params, values):
        frag = _fragment(p)
        if frag is not None and v.data_ptr() != frag.data_ptr():  # not already combined in place
            frag.data.copy_(v.reshape_as(frag))


def all_reduce_sum(t: Tensor, stage: int) -> Tensor:
    """Sum the per-rank partial statistics (only sharded gradients need it: DDP's p.grad is already global)."""
    if stage > 0 and dist.is_available() and dist.is_initialized():
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t
