"""The relearning attack inside the verdict: fine-tune a copy of the model on some forget authors' items and measure
the others (Deeb & Roger 2024; Hu et al., ICLR 2025). The measured items are never trained on (Feng et al. 2025: an
attack that trains on what it measures teaches instead of recovering).

Plain torch, no trainer: a probe is seconds on the models it is calibrated on, runs dozens of times per verdict, and
keeps nothing; what it measures is written with the verdict. AdamW (PyTorch's defaults but weight decay 0) at a
constant rate, batches of `batch_size` items in a seeded order, every epoch reshuffled, the mean answer-token NLL of
the batch: supervised fine-tuning as an attacker runs it. One run to the largest step count gives every smaller one
on the way (constant rate, so the 10-step model of a 100-step run is the 10-step attack).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator, Sequence

import torch
from torch import nn

from lit_unlearn.algorithms.losses import mean_nll
from lit_unlearn.core.batches import logits_and_labels
from lit_unlearn.data.qa_format import QAFormatter, pad_collate

__all__ = ["relearn_split", "same_author", "relearned", "Reads"]


class Reads:
    """Every row the probe trains on, in order (tests check it never reads a measured item)."""

    log: list[tuple[str, str]] | None = None


def relearn_split(groups: Sequence, share: float = 0.5) -> tuple[list[int], list[int]]:
    """(relearned item indices, measured item indices): the first floor(share · authors) authors (at least one, at
    most all but one), in order of first appearance, are relearned; the others are measured. A forget set of one
    author is split by item instead (its first floor(share · items) items relearned): the attack then recovers an
    author's other facts from some of them, which `same_author` tells the report."""
    authors = list(dict.fromkeys(groups))
    if len(authors) < 2:
        if len(groups) < 2:
            raise ValueError(f"relearning needs at least 2 forget items (one to relearn, one to measure), got "
                             f"{len(groups)}")
        n = min(len(groups) - 1, max(1, math.floor(share * len(groups))))
        return list(range(n)), list(range(n, len(groups)))
    n = min(len(authors) - 1, max(1, math.floor(share * len(authors))))
    chosen = set(authors[:n])
    return [i for i, g in enumerate(groups) if g in chosen], [i for i, g in enumerate(groups) if g not in chosen]


def same_author(groups: Sequence, relearn: Sequence[int], measured: Sequence[int]) -> bool:
    """Whether relearning measures items of an author it trained on (a one-author forget set)."""
    return bool({groups[i] for i in relearn} & {groups[i] for i in measured})


def relearned(network: nn.Module, formatter: QAFormatter, pad_id: int, rows: list[dict], lr: float,
              steps: Sequence[int], batch_size: int = 8, seed: int = 0,
              device=None) -> Iterator[tuple[int, nn.Module]]:
    """Yield (steps, the relearned copy) at each of `steps` (ascending) of one fine-tune of a copy of `network` on
    `rows`. The yielded model is the live copy: read it before asking for the next."""
    if not rows:
        raise ValueError("relearning needs at least one item to train on")
    steps = sorted(set(int(s) for s in steps))
    model = copy.deepcopy(network)
    device = device or next(model.parameters()).device
    model.to(device).train()
    for p in model.parameters():
        p.requires_grad_(p.is_floating_point())
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.0)
    collate = pad_collate(pad_id)
    encoded = [formatter.encode(r["question"], r["answer"]) for r in rows]
    generator = torch.Generator().manual_seed(seed)
    order: list[int] = []
    done = 0
    for target in steps:
        while done < target:
            batch_idx = []
            while len(batch_idx) < min(batch_size, len(rows)):
                if not order:
                    order = torch.randperm(len(rows), generator=generator).tolist()
                batch_idx.append(order.pop())
            if Reads.log is not None:
                Reads.log.extend((rows[i]["question"], rows[i]["answer"]) for i in batch_idx)
            batch = {k: v.to(device) for k, v in collate([encoded[i] for i in batch_idx]).items()}
            with torch.enable_grad():
                loss = mean_nll(*logits_and_labels(model, batch))
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
            optimizer.step()
            done += 1
        model.eval()
        yield target, model
        model.train()
