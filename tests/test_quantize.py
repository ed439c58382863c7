"""Round-to-nearest group-wise quantisation against a brute-force loop: bits and group size honoured, symmetric
and asymmetric, and only linear and embedding weights touched in a model."""

import math

import pytest
import torch

from lit_unlearn.algorithms.quantize import fake_quantize, quantize_model


def _brute_force(w, bits, group, symmetric):
    """Element by element, group by group, in plain Python floats."""
    rows = w.reshape(-1, w.shape[-1]).tolist()
    out = []
    for row in rows:
        new = []
        for start in range(0, len(row), group):
            g = row[start:start + group]
            if symmetric:
                qmax = 2 ** (bits - 1) - 1
                scale = max(abs(x) for x in g) / qmax or 1.0
                new += [min(max(round(x / scale), -qmax), qmax) * scale for x in g]
            else:
                qmax = 2 ** bits - 1
                scale = (max(g) - min(g)) / qmax or 1.0
                zero = round(-min(g) / scale)
                new += [(min(max(round(x / scale) + zero, 0), qmax) - zero) * scale for x in g]
        out.append(new)
    return torch.tensor(out, dtype=torch.float64).reshape(w.shape)


@pytest.mark.parametrize("bits, group, symmetric", [(4, 8, True), (8, 8, True), (4, 5, True), (4, 8, False),
                                                     (3, 7, False), (8, 64, True)])
def test_fake_quantize_equals_a_brute_force_loop(bits, group, symmetric):
    torch.manual_seed(bits * 100 + group)
    w = torch.randn(6, 21, dtype=torch.float64) * torch.logspace(-3, 0, 21, dtype=torch.float64)
    ours = fake_quantize(w, bits, group, symmetric)
    torch.testing.assert_close(ours, _brute_force(w, bits, group, symmetric), rtol=0, atol=1e-12)
    # at most 2^bits distinct levels in each group of each row, and the error within half a step
    for r in range(w.shape[0]):
        for start in range(0, w.shape[1], group):
            g = ours[r, start:start + group]
            assert len(set(g.tolist())) <= 2 ** bits
            step = (w[r, start:start + group].abs().max() / (2 ** (bits - 1) - 1) if symmetric else
                    (w[r, start:start + group].max() - w[r, start:start + group].min()) / (2 ** bits - 1))
            assert (g - w[r, start:start + group]).abs().max() <= step / 2 + 1e-12


def test_fewer_bits_and_larger_groups_lose_more():
    torch.manual_seed(0)
    w = torch.randn(64, 256) * torch.logspace(-2, 0, 256)
    err = lambda b, g: (fake_quantize(w, b, g) - w).pow(2).mean().item()  # noqa: E731
    assert err(4, 128) > err(8, 128) * 100 and err(4, 256) > err(4, 16) and err(8, 32) < 1e-4
    assert fake_quantize(w, 16, 32).sub(w).abs().max() < 1e-3  # near lossless


def test_a_small_update_vanishes_under_4_bits_but_not_under_8():
    """Zhang et al.'s mechanism: an update much smaller than a 4-bit bucket leaves almost every weight on the level
    the original rounds to, so the quantised models coincide; 8-bit buckets are 16x finer and keep more of it."""
    torch.manual_seed(1)
    w = torch.randn(32, 128, dtype=torch.float64)
    moved = w + 1e-3 * torch.randn_like(w)

    def level_changed(bits):
        step = w.abs().amax(dim=1, keepdim=True) / (2 ** (bits - 1) - 1)
        return ((fake_quantize(moved, bits, 128) - fake_quantize(w, bits, 128)).abs() > step / 2).double().mean()

    assert level_changed(4) < 0.01 and level_changed(8) > 5 * level_changed(4)


def test_quantize_model_touches_linear_and_embedding_weights_only():
    torch.manual_seed(2)
    model = torch.nn.Sequential(torch.nn.Embedding(50, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 8))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    assert quantize_model(model, bits=4, group_size=8) == 2
    after = model.state_dict()
    assert torch.equal(after["1.weight"], before["1.weight"]) and torch.equal(after["2.bias"], before["2.bias"])
    assert not torch.equal(after["0.weight"], before["0.weight"]) and not torch.equal(after["2.weight"],
                                                                                     before["2.weight"])
    torch.testing.assert_close(after["2.weight"], fake_quantize(before["2.weight"], 4, 8))
    with pytest.raises(ValueError):
        fake_quantize(before["2.weight"], 1)
    assert math.isfinite(after["0.weight"].sum().item())
