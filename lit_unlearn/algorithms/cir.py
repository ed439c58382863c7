"""Collapsing the shared directions out of an unlearning update (CIR: Sondej & Yang 2025, "Collapse of irrelevant
representations"), for a linear layer y = W x.

Per token t a linear layer's weight gradient is the outer product g_t x_tᵀ of the gradient at its output and its
input. Much of what the forget tokens' x_t and g_t hold is what every token holds (the mean, the top principal
components: general representations); an update built from those moves what other data uses too, and relearning on
neighbouring data moves it back. CIR removes them first: with B_x, B_g orthonormal bases of the shared directions
(the mean direction, then the top principal components of the centred vectors, Gram-Schmidt orthonormalised),
x̃_t = (I − B_xᵀB_x) x_t, g̃_t = (I − B_gᵀB_g) g_t, and the update's gradient is Σ_t g̃_t x̃_tᵀ. With empty bases it
is the layer's ordinary weight gradient.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["shared_basis", "project_out", "collapsed_weight_grad"]


def shared_basis(vectors: Tensor, components: int) -> Tensor:
    """[m, d] orthonormal rows spanning the mean direction of `vectors` [N, d] and its top `components` principal
    components (the mean-centred vectors' leading right singular vectors), m ≤ components + 1."""
    x = vectors.detach().double()
    mean = x.mean(0)
    rows = [mean] if float(mean.norm()) > 0 else []
    if components > 0 and x.shape[0] > 1:
        _, _, vh = torch.linalg.svd(x - mean, full_matrices=False)
        rows += list(vh[:components])
    basis: list[Tensor] = []
    for v in rows:  # Gram-Schmidt, twice for stability; drops directions already spanned
        for _ in range(2):
            for b in basis:
                v = v - (v @ b) * b
        n = float(v.norm())
        if n > 1e-10 * max(1.0, float(x.abs().max())):
            basis.append(v / n)
    return torch.stack(basis).to(vectors.dtype) if basis else vectors.new_zeros((0, vectors.shape[-1]))


def project_out(x: Tensor, basis: Tensor) -> Tensor:
    """x with its components along the orthonormal rows of `basis` removed: x − (x Bᵀ) B."""
    if basis.numel() == 0:
        return x
    b = basis.to(x.dtype)
    return x - (x @ b.T) @ b


def collapsed_weight_grad(acts: Tensor, grads: Tensor, act_basis: Tensor, grad_basis: Tensor) -> Tensor:
    """Σ_t g̃_t x̃_tᵀ [out, in] from per-token inputs `acts` [T, in] and output gradients `grads` [T, out]."""
    return project_out(grads, grad_basis).T @ project_out(acts, act_basis)
