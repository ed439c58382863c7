"""Per-token profiles of an answer and the distance between one item's profile and a reference distribution.

A membership attack reads more than an item's mean NLL: Min-K % reads its worst tokens, Min-K %++ each token's
log-probability standardised by the model's own distribution at that position, z_t = (log p(y_t) − μ_t) / σ_t with
μ_t = E_p[log p] and σ_t² = Var_p[log p] (Zhang et al. 2024). Two models with the same mean NLL on an item can
differ in both. `profile_distance` is the 1-Wasserstein distance between one item's per-token values and a
reference distribution given by its quantiles (for HoldoutMatch: the current model's values on holdout items,
their barycenter by default):
for sorted values v_(1) ≤ … ≤ v_(n), mean_i |v_(i) − Q((i − ½)/n)|. It is zero when the item's tokens look like the
reference's, and it pushes a token up or down by its rank alone, so forgetting is spread over the answer instead
of piled on a few tokens, and stops where the reference is (no over-forgetting past it).
"""

from __future__ import annotations

import torch
from torch import Tensor

from lit_unlearn.algorithms.losses import IGNORE_INDEX, _flat, _upcast

__all__ = ["token_surprisal_and_z", "standardised_logprob", "quantile_grid", "barycenter_grid", "reference_quantiles", "profile_distance"]

MIN_STD = 1e-4  # σ_t floor: a position where the model is certain has no spread to standardise by


def standardised_logprob(logp: Tensor, mu: Tensor, var: Tensor) -> Tensor:
    """Min-K %++'s z_t = (log p(y_t) − μ_t) / σ_t, with σ_t² = max(var, 0) + MIN_STD²."""
    return (logp - mu) / var.clamp_min(0).add(MIN_STD ** 2).sqrt()


def token_surprisal_and_z(logits: Tensor, labels: Tensor, ignore_index: int = IGNORE_INDEX
                          ) -> tuple[Tensor, Tensor, Tensor]:
    """(−log p(y_t), z_t, mask), each shaped like labels; values at masked positions are 0."""
    flat_logits, flat_labels = _flat(logits, labels)
    valid = flat_labels != ignore_index
    logp = torch.log_softmax(_upcast(flat_logits), dim=-1)
    picked = logp.gather(-1, flat_labels.clamp_min(0).unsqueeze(-1)).squeeze(-1)
    prob = logp.exp()
    mu = (prob * logp).sum(-1)
    var = (prob * (logp - mu.unsqueeze(-1)).square()).sum(-1)  # centred: E[x²] − μ² cancels in float32
    z = standardised_logprob(picked, mu, var)
    shape = labels.shape
    return ((-picked * valid).reshape(shape), (z * valid).reshape(shape), valid.reshape(shape))


def quantile_grid(values: Tensor, points: int = 101) -> list[float]:
    """The values' quantiles at `points` evenly spaced levels 0, 1/(points−1), …, 1 (linear interpolation)."""
    if values.numel() == 0:
        raise ValueError("no values to take quantiles of")
    levels = torch.linspace(0, 1, points, dtype=torch.float64)
    return torch.quantile(values.detach().double().flatten(), levels).tolist()


def barycenter_grid(items: list[Tensor], points: int = 101) -> list[float]:
    """The 1-Wasserstein barycenter of the items' value distributions, as a quantile grid: each item's quantile
    function averaged over items. The attacks' item scores are linear in an item's quantile function (the mean of
    Q over all levels for the loss, over the top k % for Min-K %), so an item with the barycenter's quantiles scores
    the holdout items' mean on each; the pooled tokens' quantiles instead put every item's worst tokens in one tail,
    more extreme than a typical item's."""
    if not items:
        raise ValueError("no items to take the barycenter of")
    return torch.tensor([quantile_grid(v, points) for v in items], dtype=torch.float64).mean(0).tolist()


def reference_quantiles(grid: list[float] | Tensor, levels: Tensor) -> Tensor:
    """Q(levels) by linear interpolation in a quantile grid (levels in [0, 1])."""
    grid = torch.as_tensor(grid, dtype=torch.float64)
    position = levels.double().clamp(0, 1) * (len(grid) - 1)
    low = position.floor().long().clamp(max=len(grid) - 2)
    frac = position - low
    return grid[low] * (1 - frac) + grid[low + 1] * frac


def profile_distance(values: Tensor, mask: Tensor, grid: list[float] | Tensor) -> Tensor:
    """Each row's W1 distance between its masked values and the reference quantile grid, shape [B]."""
    rows = []
    for row, keep in zip(values, mask):
        v = torch.sort(row[keep]).values
        n = v.numel()
        if n == 0:
            raise ValueError("an example has no position with a target label")
        levels = (torch.arange(n, dtype=torch.float64) + 0.5) / n
        q = reference_quantiles(grid, levels).to(device=v.device, dtype=v.dtype)
        rows.append((v - q).abs().mean())
    return torch.stack(rows)
