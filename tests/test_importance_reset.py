"""The importance reset against written-out references: the diagonal Fisher of a linear model against its
closed-form per-batch gradients (numpy), the selection against a sort of every coordinate, and the reset itself."""

import numpy as np
import pytest
import torch
from torch import nn

from lit_unlearn.algorithms.importance_reset import (fisher_diagonal, importance_scores, reset_threshold,
                                                     reset_to_reference)


def _linear(seed: int) -> nn.Linear:
    torch.manual_seed(seed)
    return nn.Linear(3, 2).double()


def _mse(net, batch):
    x, t = batch
    return 0.5 * ((net(x) - t) ** 2).sum(dim=1).mean()


def test_fisher_diagonal_is_the_mean_squared_closed_form_gradient():
    net = _linear(0)
    g = torch.Generator().manual_seed(3)
    batches = [(torch.randn(4, 3, generator=g, dtype=torch.float64), torch.randn(4, 2, generator=g,
                                                                                dtype=torch.float64)) for _ in range(5)]
    seen = []
    fisher = fisher_diagonal(net, batches, _mse, max_items=12, items_of=lambda b: b[0].shape[0],
                             on_batch=seen.append)
    assert len(seen) == 3  # 4 + 4 + 4 items reach max_items=12: the fourth batch is never read
    W, b = net.weight.detach().numpy(), net.bias.detach().numpy()
    fw, fb = np.zeros_like(W), np.zeros_like(b)
    for x, t in batches[:3]:
        x, t = x.numpy(), t.numpy()
        r = x @ W.T + b - t                      # residuals [B, 2]
        fw += (r.T @ x / len(x)) ** 2            # d(½ mean ||r||²)/dW = mean r xᵀ
        fb += (r.mean(axis=0)) ** 2
    np.testing.assert_allclose(fisher["weight"].numpy(), fw / 3, rtol=1e-10)
    np.testing.assert_allclose(fisher["bias"].numpy(), fb / 3, rtol=1e-10)
    assert net.weight.grad is None  # no gradient left behind
    with pytest.raises(ValueError):
        fisher_diagonal(net, [], _mse)


def test_reset_puts_back_the_reference_where_the_ratio_is_highest():
    net, ref = _linear(0), _linear(1)
    g = torch.Generator().manual_seed(5)
    forget = {n: torch.rand(p.shape, generator=g, dtype=torch.float64) for n, p in net.named_parameters()}
    retain = {n: torch.rand(p.shape, generator=g, dtype=torch.float64) for n, p in net.named_parameters()}
    scores = importance_scores(forget, retain)
    before = {n: p.detach().clone() for n, p in net.named_parameters()}
    reset = reset_to_reference(net, ref, scores, share=0.25)
    # written out: every coordinate with its ratio, sorted; the top round(0.25·8) = 2 take the reference's value
    coords = sorted(((float(forget[n].flatten()[i] / (retain[n].flatten()[i] + 1e-12)), n, i)
                     for n in forget for i in range(forget[n].numel())), reverse=True)
    chosen = {(n, i) for _, n, i in coords[:2]}
    assert reset == 2
    refp = dict(ref.named_parameters())
    for n, p in net.named_parameters():
        for i in range(p.numel()):
            want = refp[n].flatten()[i] if (n, i) in chosen else before[n].flatten()[i]
            assert float(p.flatten()[i]) == float(want)
    assert reset_threshold(scores, 0.0) == float("inf") and reset_to_reference(net, ref, scores, 0.0) == 0
    assert reset_to_reference(net, ref, scores, 1.0) == 8
    for n, p in net.named_parameters():
        torch.testing.assert_close(p, refp[n])
    with pytest.raises(ValueError):
        reset_threshold(scores, 1.5)


def test_the_retain_finetune_on_another_schedule_takes_whole_epochs_only(tmp_path):
    from lit_unlearn.core.errors import UserError
    from lit_unlearn.worlds.retain_finetune import finetune_on_retain
    from lit_unlearn.worlds.tofu_world import TofuWorld, TofuWorldRecipe

    world = TofuWorld(tmp_path, 0, TofuWorldRecipe())
    for epochs in (0, 1.5, -2):
        with pytest.raises(UserError, match="whole number"):
            finetune_on_retain(world, "01", tmp_path / "out", epochs, tokenizer=None)
    (tmp_path / "done").mkdir()
    (tmp_path / "done" / "config.json").write_text("{}")
    assert finetune_on_retain(world, "01", tmp_path / "done", 2, tokenizer=None) == tmp_path / "done"  # reused
