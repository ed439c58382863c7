"""A process's share of a global batch, split into equal micro-batches whose gradients are summed before the step.

The global batch is a property of the run; what fits in one accelerator's memory is not. With `micro_batch_size`
each process passes its share through the model in P equal parts and the step sees the sum of their gradients,
each part's loss weighted 1/P. A step over P micro-batches on W processes then computes what the same global batch
computes on W·P processes. The token mean of `compute_loss` reads the whole share's token count, which each part
carries in its `Share`, so the global batch's gradient comes out exactly; item means (`item_count`, NPO, SimNPO,
DPO) need nothing more, because the parts have equal sizes. Token means taken over each pass's own tokens (KL's and
SCRUB's KL terms, RMU's activation distance) are averaged over the parts as they are over processes.

Padding is not trimmed per part: every part keeps the share's sequence length, so a mean over all positions is the
same as on the whole share.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from torch import Tensor

from lit_unlearn.algorithms.losses import IGNORE_INDEX
from lit_unlearn.core.batches import batch_size, is_token_batch
from lit_unlearn.core.errors import UserError

__all__ = ["Share", "SHARE_KEY", "micro_batch_parts", "split_batch", "share_of"]

SHARE_KEY = "micro_batch_share"  # a token batch's entry holding its Share (the model never reads it)


@dataclass(frozen=True)
class Share:
    """The whole share one micro-batch belongs to: into how many parts it was split, and its target tokens
    (labels other than the ignore index after the causal shift)."""
    parts: int
    tokens: int


def micro_batch_parts(retain_items: int, forget_items: int, micro_batch_size: int | None) -> int:
    """How many equal parts each side of a step's (retain, forget) share is split into so that no part holds more
    than `micro_batch_size` items (1: the whole share in one pass). Both sides must split evenly."""
    if micro_batch_size is None:
        return 1
    if micro_batch_size < 1:
        raise UserError(f"micro_batch_size must be ≥ 1 (or null for the whole share in one pass), got "
                        f"{micro_batch_size}")
    parts = math.ceil(max(retain_items, forget_items) / micro_batch_size)
    for name, n in (("retain", retain_items), ("forget", forget_items)):
        if n % parts:
            raise UserError(f"each process's {name} share ({n} items) does not split into {parts} equal "
                            f"micro-batches of at most {micro_batch_size}: make the per-process retain and forget "
                            f"shares multiples of {parts}, or choose another micro_batch_size")
    return parts


def split_batch(batch: Any, parts: int) -> list[Any]:
    """`batch` in `parts` equal consecutive parts along the item dimension; token batches carry their Share."""
    n = batch_size(batch)
    if n % parts:
        raise UserError(f"a batch of {n} items does not split into {parts} equal micro-batches")
    m = n // parts
    if is_token_batch(batch):
        share = Share(parts=parts, tokens=int((batch["labels"][:, 1:] != IGNORE_INDEX).sum()))
        return [{**{k: v[i * m:(i + 1) * m] for k, v in batch.items() if isinstance(v, Tensor)}, SHARE_KEY: share}
                for i in range(parts)]
    return [type(batch)(t[i * m:(i + 1) * m] for t in batch) for i in range(parts)]


def share_of(batch: Any) -> Share | None:
    """The Share a micro-batch carries (None: a whole share, or an image batch, whose parts are plain means)."""
    return batch.get(SHARE_KEY) if is_token_batch(batch) else None
