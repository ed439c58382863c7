"""Each baseline's one-step update against plain autograd of its objective written out independently, and the
direction each one moves the loss it targets."""

import copy

import pytest
import torch
import torch.nn.functional as F

from helpers import digits_dm, first_pair, quick_trainer, tiny_mlp
from lit_unlearn.modules import FTModule, GAModule, GradDiffModule, KLModule, NPOModule, SCRUBModule

LR = 0.05


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def _kl(cur_logits, ref_logits):
    """KL(p_ref ‖ p_cur) per example, averaged: torch's kl_div (an implementation independent of ours)."""
    return F.kl_div(F.log_softmax(cur_logits, -1), F.log_softmax(ref_logits, -1), log_target=True,
                    reduction="batchmean")


def _npo(cur, ref, forget, beta):
    x, y = forget
    logp = -F.cross_entropy(cur(x), y, reduction="none")
    ref_logp = -F.cross_entropy(ref(x), y, reduction="none")
    return -(2 / beta) * F.logsigmoid(-beta * (logp - ref_logp)).mean()


# name → (module factory, objective(current net, reference net, retain, forget) to minimise)
CASES = {
    "FT": (lambda net: FTModule(net, lr=LR), lambda cur, ref, r, f: F.cross_entropy(cur(r[0]), r[1])),
    "GA": (lambda net: GAModule(net, lr=LR), lambda cur, ref, r, f: -F.cross_entropy(cur(f[0]), f[1])),
    "GradDiff": (lambda net: GradDiffModule(net, lr=LR),
                 lambda cur, ref, r, f: 0.5 * F.cross_entropy(cur(r[0]), r[1]) - 0.5 * F.cross_entropy(cur(f[0]), f[1])),
    "KL": (lambda net: KLModule(net, lr=LR),
           lambda cur, ref, r, f: 0.5 * _kl(cur(r[0]), ref(r[0])) - 0.5 * F.cross_entropy(cur(f[0]), f[1])),
    "NPO": (lambda net: NPOModule(net, lr=LR, beta=0.5),
            lambda cur, ref, r, f: _npo(cur, ref, f, 0.5) + F.cross_entropy(cur(r[0]), r[1])),
    "SCRUB-combined": (lambda net: SCRUBModule(net, lr=LR, schedule="combined", alpha=0.3, gamma=0.7),
                       lambda cur, ref, r, f: 0.3 * _kl(cur(r[0]), ref(r[0])) + 0.7 * F.cross_entropy(cur(r[0]), r[1])
                       - _kl(cur(f[0]), ref(f[0]))),
    "SCRUB-max-step": (lambda net: SCRUBModule(net, lr=LR, schedule="alternating", max_phase_steps=2),
                       lambda cur, ref, r, f: -_kl(cur(f[0]), ref(f[0]))),
}


def _moved_away_from_reference(module):
    """Shift the weights after construction so the reference (a copy taken then) differs: KL terms get a
    non-zero gradient and the test sees them."""
    with torch.no_grad():
        g = torch.Generator().manual_seed(1)
        for p in module.network.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g))


@pytest.mark.parametrize("name", list(CASES))
def test_one_step_equals_sgd_on_the_objective_written_out(name):
    make, objective = CASES[name]
    net = tiny_mlp()
    module = make(net)
    reference = copy.deepcopy(net)  # the target weights, as the module's own reference saw them
    _moved_away_from_reference(module)
    start = copy.deepcopy(module.network)
    dm = digits_dm()
    quick_trainer(1, limit_val_batches=0).fit(module, dm)

    retain, forget = first_pair(dm)
    loss = objective(start, reference, retain, forget)
    grads = torch.autograd.grad(loss, list(start.parameters()))
    for (n, p0), g, p1 in zip(start.named_parameters(), grads, module.network.parameters()):
        torch.testing.assert_close(p1.detach() - p0.detach(), -LR * g, rtol=1e-4, atol=1e-7, msg=n)
    with torch.no_grad():
        assert objective(module.network, reference, retain, forget) < loss  # a descent step on it


@pytest.mark.parametrize("optimizer", ["adam", "adamw"])
def test_graddiff_with_an_adaptive_optimizer_equals_it_on_the_objective_written_out(optimizer):
    """open-unlearning's GradDiff form: torch's Adam/AdamW (here with weight decay) on L_r − L_f, 3 steps, so the
    optimizer's moments carry across steps."""
    lr, steps = 0.01, 3
    net = tiny_mlp()
    start = copy.deepcopy(net)
    module = GradDiffModule(net, lr=lr, retain_weight=1.0, forget_weight=1.0, optimizer=optimizer, weight_decay=0.1)
    dm = digits_dm()
    quick_trainer(steps, limit_val_batches=0).fit(module, dm)

    dm.setup("fit")
    batches = iter(dm.train_dataloader())
    cls = torch.optim.Adam if optimizer == "adam" else torch.optim.AdamW
    opt = cls(start.parameters(), lr=lr, weight_decay=0.1)
    for _ in range(steps):
        (xr, yr), (xf, yf) = next(batches)
        opt.zero_grad()
        (F.cross_entropy(start(xr), yr) - F.cross_entropy(start(xf), yf)).backward()
        opt.step()
    for (n, p), q in zip(start.named_parameters(), module.network.parameters()):
        torch.testing.assert_close(q.detach(), p.detach(), rtol=1e-5, atol=1e-6, msg=n)
    assert not torch.equal(next(start.parameters()), next(tiny_mlp().parameters()))  # it moved


def _loss(net, batch):
    with torch.no_grad():
        return F.cross_entropy(net(batch[0]), batch[1]).item()


@pytest.mark.parametrize("make, side, sign", [
    (lambda n: FTModule(n, lr=LR), "retain", -1),
    (lambda n: GAModule(n, lr=LR), "forget", +1),
    (lambda n: GradDiffModule(n, lr=LR), "forget", +1),
    (lambda n: KLModule(n, lr=LR), "forget", +1),
    (lambda n: NPOModule(n, lr=LR, retain_weight=0.0), "forget", +1),
], ids=["FT lowers retain loss", "GA raises forget loss", "GradDiff raises forget loss",
        "KL raises forget loss", "NPO raises forget loss"])
def test_direction_over_a_few_steps(make, side, sign):
    dm = digits_dm()
    module = make(tiny_mlp())
    retain, forget = first_pair(dm)
    batch = retain if side == "retain" else forget
    before = _loss(module.network, batch)
    quick_trainer(3, limit_val_batches=0).fit(module, dm)
    assert sign * (_loss(module.network, batch) - before) > 0


def test_scrub_alternates_then_only_minimises():
    module = SCRUBModule(tiny_mlp(), schedule="alternating", max_phase_steps=4)
    assert [module.is_max_step(s) for s in range(6)] == [True, False, True, False, False, False]
    combined = SCRUBModule(tiny_mlp(), schedule="combined")
    assert not any(combined.is_max_step(s) for s in range(6))


def test_scrub_max_step_at_the_teacher_is_stationary():
    # KL(p_teacher ‖ p_student) has zero gradient where student = teacher: SCRUB's first max step cannot move.
    module = SCRUBModule(tiny_mlp(), lr=LR, schedule="alternating", max_phase_steps=2)
    start = copy.deepcopy(module.network)
    quick_trainer(1, limit_val_batches=0).fit(module, digits_dm())
    for p0, p1 in zip(start.parameters(), module.network.parameters()):
        torch.testing.assert_close(p1, p0, atol=1e-7, rtol=0)


def test_reference_is_not_in_the_checkpoint_and_bad_arguments_are_named():
    module = KLModule(tiny_mlp())
    assert not any(k.startswith("_reference") for k in module.state_dict())
    with pytest.raises(ValueError, match="optimizer"):
        FTModule(tiny_mlp(), optimizer="lion")
    with pytest.raises(ValueError, match="lr"):
        GAModule(tiny_mlp(), lr=0)
    with pytest.raises(ValueError, match="schedule"):
        SCRUBModule(tiny_mlp(), schedule="sometimes")
    with pytest.raises(ValueError, match="beta"):
        NPOModule(tiny_mlp(), beta=-1)
    with pytest.raises(ValueError, match="optimizer"):
        GradDiffModule(tiny_mlp(), optimizer="lion")
    with pytest.raises(ValueError, match="weight_decay needs optimizer"):
        GradDiffModule(tiny_mlp(), weight_decay=0.01)
