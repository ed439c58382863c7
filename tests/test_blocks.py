import pytest
import torch
from torch import nn

from lit_unlearn.algorithms import block_index, block_stats, combine_into, tensor_stats


def _net():
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2, bias=False))


def test_block_index_groupings():
    params = list(_net().named_parameters())
    idx, names = block_index(params, "parameter")
    assert idx.tolist() == [0, 1, 2] and names == ["0.weight", "0.bias", "2.weight"]
    idx, names = block_index(params, "module")
    assert idx.tolist() == [0, 0, 1] and names == ["0", "2"]
    idx, names = block_index(params, "global")
    assert idx.tolist() == [0, 0, 0] and names == ["all"]
    with pytest.raises(ValueError, match="grouping"):
        block_index(params, "layerwise")
    with pytest.raises(ValueError, match="no trainable parameters"):
        block_index([], "parameter")


def test_stats_and_combination_against_brute_force():
    torch.manual_seed(0)
    gr = [torch.randn(4, 3), torch.randn(4), torch.randn(2, 4)]
    gf = [torch.randn_like(g) for g in gr]
    rr, ff, rf = tensor_stats(gr, gf)
    for k in range(3):
        assert rr[k].item() == pytest.approx(float((gr[k] ** 2).sum()), rel=1e-6)
        assert rf[k].item() == pytest.approx(float((gr[k] * gf[k]).sum()), rel=1e-6, abs=1e-6)
    idx = torch.tensor([0, 0, 1])
    agg = block_stats(rr, idx, 2)
    assert agg[0].item() == pytest.approx(rr[0].item() + rr[1].item())
    out = [g.clone() for g in gf]
    combine_into(out, out, gr, [2.0, -1.0, 0.5], [0.25, 3.0, -2.0])
    for k, (a, b) in enumerate(zip([2.0, -1.0, 0.5], [0.25, 3.0, -2.0])):
        torch.testing.assert_close(out[k], a * gf[k] + b * gr[k])
    with pytest.raises(ValueError, match="shapes differ"):
        tensor_stats([torch.zeros(2)], [torch.zeros(3)])
