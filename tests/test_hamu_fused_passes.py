"""HAMU's fused gradient passes (torch.compile; opt-in) compute what the eager passes compute: the
same float64 statistics, the same bf16 combination up to one step of the last bit, and the same training step;
where compiling fails the module warns and runs the eager passes. Here the traced functions run with the "eager"
backend (the arithmetic, unfused); tests/test_cuda.py runs the compiled kernels on a GPU."""

import copy

import pytest
import torch

from helpers import quick_trainer, tiny_tofu
from lit_unlearn.algorithms import combine_into, tensor_stats
from lit_unlearn.algorithms import fused_passes
from lit_unlearn.algorithms.fused_passes import fused_combine_into, fused_tensor_stats


@pytest.fixture
def eager_backend(monkeypatch):
    monkeypatch.setattr(fused_passes, "BACKEND", "eager")


def gradients(dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    shapes = [(37, 11), (5,), (64, 3, 2)]
    return ([(torch.randn(s, generator=g) * 3).to(dtype) for s in shapes],
            [(torch.randn(s, generator=g) * 3).to(dtype) for s in shapes])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_fused_statistics_equal_the_eager_float64_statistics(dtype, eager_backend):
    gr, gf = gradients(dtype)
    for fused, eager in zip(fused_tensor_stats(gr, gf), tensor_stats(gr, gf)):
        assert fused.dtype == torch.float64
        torch.testing.assert_close(fused, eager, rtol=1e-13, atol=0)


def test_fused_bf16_combination_is_the_float32_combination_truncated(eager_backend):
    gr, gf = gradients(torch.bfloat16, seed=1)
    a, b = torch.tensor([0.5, -0.731, 2.0], dtype=torch.float64), torch.tensor([0.25, 0.298, -1.5], dtype=torch.float64)
    work = [torch.float32, torch.float32, torch.float64]  # the last one falls back to the eager float64 form
    fused, eager = [t.clone() for t in gf], [t.clone() for t in gf]
    fused_combine_into(fused, fused, gr, a, b, work)
    combine_into(eager, eager, gr, a.tolist(), b.tolist(), work)
    for x, y in zip(fused, eager):
        steps = (x.view(torch.int16).int() - y.view(torch.int16).int()).abs()
        assert steps.max().item() <= 1  # one multiply-add may round differently (fused or not)
    assert torch.equal(fused[2], eager[2])
    exact = [f.double() * ai + r.double() * bi for f, r, ai, bi in zip(gf, gr, a.tolist(), b.tolist())]
    bound = [2 ** -23 * (abs(ai) * f.double().abs() + abs(bi) * r.double().abs()) for f, r, ai, bi in
             zip(gf, gr, a.tolist(), b.tolist())]
    for x, e, u in zip(fused, exact, bound):  # toward zero: never longer than float32's bound allows
        assert (x.double().abs() <= e.abs() + u).all()


def train_two_steps(module, root, tok):
    from lit_unlearn.data import TofuDataModule, TofuSource

    dm = TofuDataModule(TofuSource(str(root / "data")), tok, retain_batch_size=6, forget_batch_size=4, seed=0)
    quick_trainer(2, accelerator="cpu", devices=1, limit_val_batches=0).fit(module, dm)
    return module


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    root = tmp_path_factory.mktemp("fused")
    _, tok = tiny_tofu(root, seed=1)
    return root, tok


def test_a_fused_hamu_step_is_the_eager_step_and_a_failed_compile_falls_back_with_a_warning(
        assets, tmp_path, monkeypatch, eager_backend):
    from lit_unlearn.models import CausalLM, tiny_llama_config
    from lit_unlearn.modules import HAMUModule

    monkeypatch.chdir(tmp_path)
    root, tok = assets
    net = CausalLM(config=tiny_llama_config(vocab_size=len(tok), layers=2), dtype="bfloat16", seed=0)
    start = [p.detach().clone() for p in net.parameters()]
    moved = {}
    for mode in (False, True, "broken"):
        module = HAMUModule(copy.deepcopy(net), eta=0.05, quota=0.01, fused_passes=mode is not False)
        if mode == "broken":
            def fail(*a, **k):
                raise RuntimeError("no compiler for this device")
            monkeypatch.setattr("lit_unlearn.modules.hamu.fused_tensor_stats", fail)
            with pytest.warns(UserWarning, match="could not be compiled.*eager passes"):
                train_two_steps(module, root, tok)
            assert not module.fused
        else:
            calls = []
            real = fused_combine_into
            monkeypatch.setattr("lit_unlearn.modules.hamu.fused_combine_into",
                                lambda *a, **k: (calls.append(1), real(*a, **k))[1])
            train_two_steps(module, root, tok)
            assert module.fused is bool(mode) and len(calls) == (2 if mode else 0)
        moved[mode] = torch.cat([(p.detach() - p0).double().flatten() for p0, p in
                                 zip(start, module.network.parameters())])
    assert moved[False].abs().max() > 0
    gap = (moved[True] - moved[False]).norm() / moved[False].norm()
    assert gap <= 1e-2, gap  # bf16 weights: one combination may round one step differently
    assert torch.equal(moved["broken"], moved[False])
