"""Importance-selected reset: put back the reference's value (the model the target was fine-tuned from) in the
coordinates whose diagonal Fisher information on the forget set is largest relative to the retain set's.

The test of a localisation hypothesis: if a fact lives in few coordinates that the retain set hardly uses (the
premise of Selective Synaptic Dampening, Foster et al. 2023, and of saliency masks), resetting those coordinates
removes it from the weights, where no relearning can find it, at the price of a short retain repair. If the forget
and retain memories share their coordinates, a reset large enough to forget also takes the retain set with it.

    F_S[j] = (1 / |S|) · Σ_{b ∈ S} (∂ L_b / ∂θ_j)²     (the mean squared gradient over batches b of the set S)
    score[j] = F_forget[j] / (F_retain[j] + ε)
    θ_j ← θ_reference[j] for the `share` of coordinates with the highest score (ties at the threshold included)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import torch
from torch import Tensor, nn

__all__ = ["fisher_diagonal", "importance_scores", "reset_threshold", "reset_to_reference"]


def fisher_diagonal(network: nn.Module, batches: Iterable, loss_of: Callable[[nn.Module, object], Tensor],
                    max_items: int | None = None, items_of: Callable[[object], int] = lambda b: 1,
                    on_batch: Callable[[object], None] | None = None) -> dict[str, Tensor]:
    """The mean over batches of each parameter's squared gradient of `loss_of(network, batch)`, stopping once
    `max_items` items (counted by `items_of`) have been read. `on_batch` sees every batch read (to count compute)."""
    sums = {n: torch.zeros_like(p) for n, p in network.named_parameters() if p.requires_grad}
    seen_batches = seen_items = 0
    for batch in batches:
        network.zero_grad(set_to_none=True)
        loss_of(network, batch).backward()
        for n, p in network.named_parameters():
            if p.grad is not None and n in sums:
                sums[n] += p.grad.detach() ** 2
        seen_batches += 1
        seen_items += items_of(batch)
        if on_batch is not None:
            on_batch(batch)
        if max_items is not None and seen_items >= max_items:
            break
    network.zero_grad(set_to_none=True)
    if seen_batches == 0:
        raise ValueError("fisher_diagonal: no batch was read")
    return {n: s / seen_batches for n, s in sums.items()}


def importance_scores(forget: Mapping[str, Tensor], retain: Mapping[str, Tensor], eps: float = 1e-12
                      ) -> dict[str, Tensor]:
    """F_forget / (F_retain + ε) per coordinate."""
    return {n: forget[n] / (retain[n] + eps) for n in forget}


def reset_threshold(scores: Mapping[str, Tensor], share: float) -> float:
    """The score of the round(share·N)-th highest coordinate (inf where share selects none)."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"share={share}: a fraction of the coordinates in [0, 1]")
    flat = torch.cat([s.flatten() for s in scores.values()])
    k = int(round(share * flat.numel()))
    if k == 0:
        return float("inf")
    return float(torch.topk(flat, k).values[-1])


@torch.no_grad()
def reset_to_reference(network: nn.Module, reference: nn.Module, scores: Mapping[str, Tensor], share: float) -> int:
    """θ ← θ_reference where the score reaches the share's threshold; returns how many coordinates were reset."""
    threshold = reset_threshold(scores, share)
    ref = dict(reference.named_parameters())
    reset = 0
    for n, p in network.named_parameters():
        if n not in scores:
            continue
        mask = scores[n] >= threshold
        p[mask] = ref[n].to(p.dtype)[mask]
        reset += int(mask.sum())
    return reset
