"""On a CUDA device, every LLM method's first steps equal the same steps on CPU, and HAMU's closed form gives the
same coefficients on both devices (skipped where no GPU is present: tensors made on the host inside a step, such as
HAMU's global quota, only fail on a GPU)."""

import copy

import pytest
import torch

from helpers import quick_trainer, tiny_tofu
from lit_unlearn.algorithms import hamu_step
from lit_unlearn.data import TofuDataModule, TofuSource
from lit_unlearn.models import CausalLM, tiny_llama_config
from lit_unlearn.modules import (
    GAModule,
    GradDiffModule,
    HAMUModule,
    IdkDPOModule,
    KLModule,
    NPOModule,
    OFMUModule,
    RMUModule,
    SimNPOModule,
)

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.parametrize("variant", ["Q", "U"])
@pytest.mark.parametrize("clip_norm", [None, 0.5])
def test_hamu_step_is_the_same_on_cuda_and_cpu(variant, clip_norm):
    g = torch.Generator().manual_seed(0)
    rr, ff = torch.rand(9, generator=g, dtype=torch.float64) + 0.1, torch.rand(9, generator=g, dtype=torch.float64)
    rf = (torch.rand(9, generator=g, dtype=torch.float64) - 0.5) * (rr * ff).sqrt()
    sizes = torch.randint(10, 10_000, (9,), generator=g).double()
    kw = dict(eta=0.1, quota=0.05, variant=variant, clip_norm=clip_norm)
    cpu = hamu_step(rr, ff, rf, sizes=sizes, **kw)
    gpu = hamu_step(rr.cuda(), ff.cuda(), rf.cuda(), sizes=sizes.cuda(), **kw)
    assert gpu.coef_f.is_cuda
    for name in ("coef_f", "coef_r", "quota", "radius"):
        torch.testing.assert_close(getattr(gpu, name).cpu(), getattr(cpu, name), rtol=1e-12, atol=1e-15, msg=name)
    assert torch.equal(gpu.solution.branch.cpu(), cpu.solution.branch)
    torch.testing.assert_close(gpu.global_solution.coef_a.cpu(), cpu.global_solution.coef_a, rtol=1e-12, atol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("work", [torch.float32, torch.float64])
def test_combination_is_bit_for_bit_the_same_on_cuda_and_cpu(dtype, work):
    from lit_unlearn.algorithms import combine_into
    from lit_unlearn.algorithms.blocks import STATS_CHUNK

    g = torch.Generator().manual_seed(1)
    gf = (torch.randn(STATS_CHUNK + 77, generator=g) * 3).to(dtype)
    gr = (torch.randn(STATS_CHUNK + 77, generator=g) * 3).to(dtype)
    cpu, gpu = gf.clone(), gf.cuda()
    combine_into([cpu], [cpu], [gr], [-0.731], [0.298], [work])
    combine_into([gpu], [gpu], [gr.cuda()], [-0.731], [0.298], [work])
    # the float32 path may fuse a multiply-add differently per device: then one step of the last bit, at most
    diff = (gpu.cpu().double() - cpu.double()).abs()
    ulp = (torch.nextafter(cpu, torch.full_like(cpu, torch.inf)).double() - cpu.double()).abs()
    assert (diff <= ulp).all() and (diff == 0).float().mean().item() > 0.999


def test_fused_passes_compute_the_eager_passes_on_cuda():
    from lit_unlearn.algorithms import combine_into, tensor_stats
    from lit_unlearn.algorithms.fused_passes import fused_combine_into, fused_tensor_stats

    g = torch.Generator(device="cuda").manual_seed(2)
    shapes = [(4096, 1001), (7,), (3000, 11)]
    gr = [torch.randn(s, generator=g, device="cuda").to(torch.bfloat16) for s in shapes]
    gf = [torch.randn(s, generator=g, device="cuda").to(torch.bfloat16) for s in shapes]
    for fused, eager in zip(fused_tensor_stats(gr, gf), tensor_stats(gr, gf)):
        torch.testing.assert_close(fused, eager, rtol=1e-13, atol=0)
    a = torch.tensor([-0.731, 0.5, 3.0], dtype=torch.float64, device="cuda")
    b = torch.tensor([0.298, -2.0, 0.1], dtype=torch.float64, device="cuda")
    fused, eager = [t.clone() for t in gf], [t.clone() for t in gf]
    fused_combine_into(fused, fused, gr, a, b, [torch.float32] * 3)
    combine_into(eager, eager, gr, a.tolist(), b.tolist(), [torch.float32] * 3)
    for x, y in zip(fused, eager):
        assert (x.view(torch.int16).int() - y.view(torch.int16).int()).abs().max().item() <= 1


def test_bf16_hamu_with_fused_passes_moves_as_without(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _, tok = tiny_tofu(tmp_path, seed=1)
    net = CausalLM(config=tiny_llama_config(vocab_size=len(tok), layers=3), dtype="bfloat16", seed=0)
    moved = []
    for fused in (False, True):
        module = HAMUModule(copy.deepcopy(net), eta=0.05, quota=0.01, fused_passes=fused)
        dm = TofuDataModule(TofuSource(str(tmp_path / "data")), tok, retain_batch_size=6, forget_batch_size=4, seed=0)
        quick_trainer(2, accelerator="gpu", devices=1, limit_val_batches=0).fit(module, dm)
        assert module.fused is fused
        moved.append(torch.cat([(p1.detach().cpu() - p0.detach()).double().flatten() for p0, p1 in
                                zip(net.parameters(), module.network.parameters())]))
    assert moved[0].abs().max() > 0
    assert (moved[1] - moved[0]).norm() / moved[0].norm() <= 1e-2


METHODS = {
    "HAMU": lambda net: HAMUModule(net, eta=0.05, quota=0.01),
    "GradDiff": lambda net: GradDiffModule(net, lr=1e-3),
    "GA": lambda net: GAModule(net, lr=1e-3),
    "KL": lambda net: KLModule(net, lr=1e-3),
    "NPO": lambda net: NPOModule(net, lr=1e-3),
    "SimNPO": lambda net: SimNPOModule(net, lr=1e-3),
    "IdkDPO": lambda net: IdkDPOModule(net, lr=1e-3),
    "RMU": lambda net: RMUModule(net, lr=1e-3, layer=1),
    "OFMU": lambda net: OFMUModule(net, inner_steps=2, inner_lr=1e-3, outer_lr=1e-3, rho=0.1),
}


ACCELERATORS = ("cpu", "gpu")


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    root = tmp_path_factory.mktemp("cuda")
    _, tok = tiny_tofu(root, seed=1)
    return root, tok


@pytest.mark.parametrize("name", list(METHODS))
def test_first_steps_on_cuda_equal_those_on_cpu(assets, name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    root, tok = assets
    moved = []
    for accelerator in ACCELERATORS:
        net = CausalLM(config=tiny_llama_config(vocab_size=len(tok), layers=3), seed=0)
        start = copy.deepcopy(net)
        module = METHODS[name](net)
        data_kw = {"alternate_answers": "generated"} if name == "IdkDPO" else {}
        dm = TofuDataModule(TofuSource(str(root / "data")), tok, retain_batch_size=6, forget_batch_size=4,
                            seed=0, **data_kw)
        quick_trainer(2, accelerator=accelerator, devices=1, limit_val_batches=0).fit(module, dm)
        moved.append(torch.cat([(p1.detach().cpu() - p0.detach()).flatten() for p0, p1 in
                                        zip(start.parameters(), module.network.parameters())]).double())
    cpu, gpu = moved
    assert cpu.abs().max() > 0, "the method did not move on CPU"
    # fp32 kernels differ between devices in their summation order: agreement to 1e-3 of the step, not bit-exact
    gap = (gpu - cpu).norm() / cpu.norm()
    assert gap <= 1e-3, f"{name}: ‖Δgpu − Δcpu‖ / ‖Δcpu‖ = {gap:.2e}"
