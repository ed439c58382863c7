"""(retain_batch, forget_batch) every step: seeded, world-size invariant, and resumable mid-epoch.

Each side is an endless stream of seeded permutations of its dataset; batch k of an epoch is positions
[k·B, (k+1)·B) of that stream. An epoch is as many steps as the longer side (in steps) needs to see all of its
data once; the shorter side cycles through fresh permutations, and every batch is full. Retain and forget are
shuffled independently (different seeds).

Under data parallelism each rank takes the slice [rank::world_size] of the *global* batch, so the union over
ranks is the same global batch at any world size: with mean losses and averaged gradients, results do not
change with the number of devices at a fixed global batch.

Batch k is a pure function of (seed, epoch, k), so resuming mid-epoch only needs the number of batches already
consumed: `ResumableDataLoader` reports it to Lightning's checkpoint (the `state_dict` / `load_state_dict`
protocol) and restarts the stream there.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info
from torch.utils.data._utils.collate import default_collate

from lit_unlearn.core.errors import UserError
from lit_unlearn.core.plug_points import ForgetPasses

__all__ = ["PairedBatchStream", "ResumableDataLoader", "stream_positions"]


def _perm(n: int, seed: int, epoch: int, side: int, cycle: int) -> np.ndarray:
    return np.random.default_rng([seed, epoch, side, cycle]).permutation(n)


def stream_positions(n: int, batch: int, step: int, seed: int, epoch: int, side: int) -> np.ndarray:
    """Dataset indices of global batch `step` for one side (0 = retain, 1 = forget)."""
    start, stop = step * batch, (step + 1) * batch
    out, cache = [], {}
    for pos in range(start, stop):
        cycle, offset = divmod(pos, n)
        if cycle not in cache:
            cache[cycle] = _perm(n, seed, epoch, side, cycle)
        out.append(cache[cycle][offset])
    return np.asarray(out, dtype=np.int64)


class PairedBatchStream(IterableDataset, ForgetPasses):
    """Yields (retain_batch, forget_batch) for this rank. `epoch` and `start_step` are set by the loader."""

    def __init__(
        self,
        retain: Dataset,
        forget: Dataset,
        retain_batch_size: int,
        forget_batch_size: int,
        seed: int = 0,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        super().__init__()
        self.retain, self.forget = retain, forget
        self.n_retain, self.n_forget = len(retain), len(forget)
        if self.n_forget == 0:
            raise UserError("the forget set is empty: nothing to unlearn")
        if self.n_retain == 0:
            raise UserError("the retain set is empty")
        if retain_batch_size < 1 or forget_batch_size < 1:
            raise UserError(f"batch sizes must be ≥ 1, got retain={retain_batch_size}, forget={forget_batch_size}")
        # A batch larger than its dataset would repeat examples within the batch: use the full set instead.
        self.retain_batch_size = min(retain_batch_size, self.n_retain)
        self.forget_batch_size = min(forget_batch_size, self.n_forget)
        for name, asked, used in (("retain", retain_batch_size, self.retain_batch_size),
                                  ("forget", forget_batch_size, self.forget_batch_size)):
            if used < asked:
                warnings.warn(f"{name}_batch_size={asked} exceeds the {name} set ({used} examples): using {used}",
                              stacklevel=2)
        self.seed = seed
        self.collate_fn = collate_fn or default_collate
        self._rank, self._world = rank, world_size
        self.epoch = 0
        self.start_step = 0

    def __len__(self) -> int:
        return max(math.ceil(self.n_retain / self.retain_batch_size), math.ceil(self.n_forget / self.forget_batch_size))

    def rank_and_world(self) -> tuple[int, int]:
        if self._rank is not None and self._world is not None:
            return self._rank, self._world
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
        return 0, 1

    def global_indices(self, step: int, epoch: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        epoch = self.epoch if epoch is None else epoch
        r = stream_positions(self.n_retain, self.retain_batch_size, step, self.seed, epoch, side=0)
        f = stream_positions(self.n_forget, self.forget_batch_size, step, self.seed, epoch, side=1)
        return r, f

    def local_indices(self, step: int) -> tuple[np.ndarray, np.ndarray]:
        rank, world = self.rank_and_world()
        r, f = self.global_indices(step)
        for name, size in (("retain", self.retain_batch_size), ("forget", self.forget_batch_size)):
            if size % world:
                raise UserError(
                    f"the global {name} batch ({size}) is not divisible by the world size ({world}): ranks would "
                    f"see unequal slices and the averaged gradient would differ from the global batch's. "
                    f"Use a {name}_batch_size that is a multiple of {world}."
                )
        return r[rank::world], f[rank::world]

    def _gather(self, ds: Dataset, idx: np.ndarray) -> Any:
        # In-memory datasets hand out a whole batch by fancy indexing instead of item-by-item collation.
        get_batch = getattr(ds, "get_batch", None)
        if get_batch is not None:
            return get_batch(idx)
        return self.collate_fn([ds[int(i)] for i in idx])

    def batch(self, step: int) -> tuple[Any, Any]:
        r, f = self.local_indices(step)
        return self._gather(self.retain, r), self._gather(self.forget, f)

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        info = get_worker_info()
        wid, nworkers = (0, 1) if info is None else (info.id, info.num_workers)
        # Workers take steps round-robin; DataLoader returns them in worker order, i.e. in step order.
        for step in range(self.start_step + wid, len(self), nworkers):
            yield self.batch(step)


class ResumableDataLoader(DataLoader):
    """DataLoader over a batch stream (a PairedBatchStream, or LengthBucketedBatches for fine-tuning: an iterable of
    whole batches with `epoch`, `start_step`, `seed` and a length) that Lightning checkpoints (`state_dict`) and
    resumes mid-epoch.

    The loader counts the batches it has handed out over the whole fit; batch number n is step n % len of
    data epoch n // len. Its position therefore does not depend on the trainer's epoch counter, which Lightning
    advances when a run stops at max_steps mid-epoch: a run extended from such a checkpoint still continues
    exactly where the stream stopped.
    """

    def __init__(self, dataset: IterableDataset, num_workers: int = 0, **kwargs: Any) -> None:
        if kwargs.pop("persistent_workers", False):
            raise UserError("persistent_workers would keep stale epoch/start positions in the workers; leave it off")
        super().__init__(dataset, batch_size=None, num_workers=num_workers, **kwargs)
        self._total = 0  # batches handed out so far in this fit

    @property
    def position(self) -> tuple[int, int]:
        """(data epoch, step within it) of the next batch."""
        return divmod(self._total, len(self.dataset))

    def state_dict(self) -> dict[str, int]:
        epoch, consumed = self.position
        return {"total": self._total, "epoch": epoch, "consumed": consumed, "seed": self.dataset.seed}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if state.get("seed", self.dataset.seed) != self.dataset.seed:
            raise UserError(
                f"the checkpoint's data stream used seed {state['seed']}, this run uses {self.dataset.seed}: "
                "resuming would replay different batches. Use the original seed."
            )
        self._total = int(state["total"]) if "total" in state else state["epoch"] * len(self.dataset) + state["consumed"]

    def __iter__(self) -> Iterator[Any]:
        epoch, start = self.position
        stream = self.dataset
        stream.epoch, stream.start_step = epoch, start
        for batch in super().__iter__():
            self._total += 1
            yield batch
        stream.start_step = 0

    def __len__(self) -> int:
        return len(self.dataset)

