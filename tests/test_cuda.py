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
