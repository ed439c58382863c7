"""The per-token profile HoldoutMatch steers with, against numpy loops and scipy."""

import numpy as np
import pytest
import torch
from scipy.stats import wasserstein_distance

from lit_unlearn.algorithms.token_profile import (MIN_STD, profile_distance, quantile_grid, reference_quantiles,
                                                  token_surprisal_and_z)


def test_surprisal_and_min_k_plus_plus_z_match_a_loop_over_positions():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 6, 11, generator=g, dtype=torch.float64) * 3
    labels = torch.randint(0, 11, (3, 6), generator=g)
    labels[0, :2] = -100
    labels[2, 5] = -100
    s, z, mask = token_surprisal_and_z(logits, labels)
    for b in range(3):
        for t in range(6):
            if labels[b, t] == -100:
                assert not mask[b, t] and s[b, t] == 0 and z[b, t] == 0
                continue
            x = logits[b, t].numpy()
            logp = x - np.log(np.exp(x - x.max()).sum()) - x.max()
            p = np.exp(logp)
            mu = (p * logp).sum()
            sd = np.sqrt((p * (logp - mu) ** 2).sum() + MIN_STD ** 2)
            y = labels[b, t].item()
            assert s[b, t].item() == pytest.approx(-logp[y], rel=1e-10)
            assert z[b, t].item() == pytest.approx((logp[y] - mu) / sd, rel=1e-8)


def test_profile_distance_is_w1_to_the_references_quantiles():
    """With a grid of every order statistic of a reference sample, the distance is exactly mean |v_(i) − Q(u_i)|,
    u_i = (i − ½)/n, Q numpy's linear quantile; for many values it approaches scipy's W1 between the samples."""
    rng = np.random.default_rng(0)
    reference = rng.gamma(2.0, 1.5, size=301)
    grid = quantile_grid(torch.tensor(reference), points=len(reference))
    assert grid == pytest.approx(np.sort(reference).tolist(), rel=1e-12)
    values = torch.tensor(rng.normal(2.0, 2.0, size=(2, 40)), requires_grad=True)
    mask = torch.ones(2, 40, dtype=torch.bool)
    mask[1, 25:] = False
    got = profile_distance(values, mask, grid)
    for row, n in ((0, 40), (1, 25)):
        v = np.sort(values[row, :n].detach().numpy())
        q = np.quantile(reference, (np.arange(n) + 0.5) / n)
        assert got[row].item() == pytest.approx(np.abs(v - q).mean(), rel=1e-10)
    got.sum().backward()  # each value moves by the sign of its gap to its rank's quantile, 1/n each
    v = values[0].detach().numpy()
    rank = np.argsort(np.argsort(v))
    expected = np.sign(v - np.quantile(reference, (rank + 0.5) / 40)) / 40
    np.testing.assert_allclose(values.grad[0].numpy(), expected)
    assert (values.grad[1, 25:] == 0).all()
    many = torch.tensor(rng.gamma(2.0, 1.5, size=(1, 4000)))
    w1 = profile_distance(many, torch.ones_like(many, dtype=torch.bool), quantile_grid(torch.tensor(reference), 2001))
    assert w1.item() == pytest.approx(wasserstein_distance(many[0].numpy(), reference), rel=0.05, abs=0.02)
    shifted = profile_distance(many + 1.0, torch.ones_like(many, dtype=torch.bool), grid)
    assert shifted.item() == pytest.approx(wasserstein_distance(many[0].numpy() + 1.0, reference), rel=0.05)


def test_reference_quantiles_interpolate_the_grid_linearly():
    grid = [0.0, 1.0, 5.0]
    got = reference_quantiles(grid, torch.tensor([0.0, 0.25, 0.5, 0.75, 1.0]))
    assert got.tolist() == pytest.approx([0.0, 0.5, 1.0, 3.0, 5.0])
