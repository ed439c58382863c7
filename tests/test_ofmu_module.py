"""OFMUModule: one outer round against an independent flat-vector reimplementation, the ablations OFMU
relies on, ρ scheduling, stationarity stopping and resuming mid-schedule."""

import copy
from types import SimpleNamespace

import lightning.pytorch as pl
import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import Callback
from torch.func import functional_call

from helpers import digits_dm, first_pair, flat_view, quick_trainer, tiny_mlp
from lit_unlearn.callbacks import FinalCheckpoint, RhoScheduler
from lit_unlearn.core.errors import UserError
from lit_unlearn.modules import OFMUModule


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def reference_round(net, retain, forget, inner_steps, inner_lr, beta, outer_lr, rho, ceiling=None,
                    inner_clip=None, outer_clip=None, outer_clip_norm=None):
    """OFMU's round written from the formulas, in float64 on one flat parameter vector. With a ceiling c the inner
    objective is Φ_c = min(L_f, c) − β·cos (its branch read at each point; the outer HVP keeps the branch of θ_T);
    inner_clip scales ∇Φ to that norm; outer_clip "joint" scales g_r + 2ρ·H∇Φ as one vector, "separate" each term."""
    net = copy.deepcopy(net).double()
    theta, unflat = flat_view(net)
    (xr, yr), (xf, yf) = (retain[0].double(), retain[1]), (forget[0].double(), forget[1])

    def loss(t, x, y):
        return F.cross_entropy(functional_call(net, unflat(t), (x,)), y)

    def phi(t, capped=False):
        gf = torch.autograd.grad(loss(t, xf, yf), t, create_graph=True)[0]
        gr = torch.autograd.grad(loss(t, xr, yr), t, create_graph=True)[0]
        decorrelation = -beta * torch.dot(gf, gr) / (gf.norm() * gr.norm())
        return decorrelation if capped else loss(t, xf, yf) + decorrelation

    def capped_at(t):
        return ceiling is not None and float(loss(t, xf, yf)) >= ceiling

    def clipped(v, max_norm):
        return v if max_norm is None else v * min(1.0, max_norm / float(v.norm()))

    for _ in range(inner_steps):
        t = theta.clone().requires_grad_(True)
        theta = theta + inner_lr * clipped(torch.autograd.grad(phi(t, capped_at(theta)), t)[0], inner_clip)
    capped = capped_at(theta)
    t = theta.clone().requires_grad_(True)
    v = torch.autograd.grad(phi(t, capped), t)[0]
    hv = torch.autograd.functional.hvp(lambda x: phi(x, capped), theta, v)[1]
    t = theta.clone().requires_grad_(True)
    g_r = torch.autograd.grad(loss(t, xr, yr), t)[0]
    if outer_clip == "separate":
        return theta - outer_lr * (clipped(g_r, outer_clip_norm) + clipped(2 * rho * hv, outer_clip_norm))
    return theta - outer_lr * clipped(g_r + 2 * rho * hv, outer_clip_norm)


@pytest.mark.parametrize("beta, rho, hvp", [
    (0.3, 0.5, "autograd"),
    (0.3, 0.5, "finite_difference"),
    (0.0, 0.5, "autograd"),   # β = 0: plain forget ascent inside, no decorrelation term
    (0.3, 0.0, "autograd"),   # ρ = 0: retain descent after the ascent
])
def test_one_round_matches_the_formulas(beta, rho, hvp):
    net = tiny_mlp()
    kw = dict(inner_steps=3, inner_lr=0.05, beta=beta, outer_lr=0.05, rho=rho)
    module = OFMUModule(net, hvp=hvp, fd_step=1e-3, **kw)
    start = copy.deepcopy(net)
    dm = digits_dm()
    quick_trainer(1, limit_val_batches=0).fit(module, dm)
    retain, forget = first_pair(dm)
    expected = reference_round(start, retain, forget, **kw)
    got = torch.cat([p.detach().reshape(-1) for p in module.network.parameters()]).double()
    moved = (expected - torch.cat([p.detach().reshape(-1) for p in start.parameters()]).double()).norm()
    # float32 finite differences of finite differences carry ~eps/h² of roundoff: about 1% here (exact in
    # float64, see test_ofmu_math.py).
    assert (got - expected).norm() <= (2e-2 if hvp == "finite_difference" else 1e-4) * moved


@pytest.mark.parametrize("options", [
    {"outer_clip": "joint"},
    {"outer_clip": "separate"},
    {"outer_clip": "joint", "ceiling": "start"},      # capped from the first inner step: decorrelation only
    {"outer_clip": "separate", "ceiling": "between"},  # the branch changes during the inner steps
], ids=str)
def test_named_options_match_their_formulas(options):
    """The options beside the paper's form (docs/findings/ofmu.md): separate outer clips and the forget ceiling Φ_c, each
    against the float64 reimplementation, with every clip active (norm 0.05 is below every direction here)."""
    net, dm = tiny_mlp(), digits_dm()
    retain, forget = first_pair(dm)
    with torch.no_grad():
        start_loss = float(F.cross_entropy(net(forget[0]), forget[1]))
    ceiling = {None: None, "start": start_loss - 1.0, "between": start_loss + 1e-3}[options.get("ceiling")]
    kw = dict(inner_steps=3, inner_lr=0.5, beta=0.3, outer_lr=0.05, rho=0.5)
    clips = dict(inner_clip=0.05, outer_clip=options["outer_clip"], outer_clip_norm=0.05)
    module = OFMUModule(net, hvp="autograd", inner_clip_norm=0.05, outer_clip_norm=0.05,
                        outer_clip=options["outer_clip"], forget_ceiling=ceiling, **kw)
    start = copy.deepcopy(net)
    quick_trainer(1, limit_val_batches=0).fit(module, dm)
    expected = reference_round(start, retain, forget, ceiling=ceiling, **clips, **kw)
    got = torch.cat([p.detach().reshape(-1) for p in module.network.parameters()]).double()
    theta0 = torch.cat([p.detach().reshape(-1) for p in start.parameters()]).double()
    assert (got - expected).norm() <= 1e-4 * (expected - theta0).norm()
    # The option changes the round: the paper's form (joint clip, no ceiling) lands elsewhere.
    paper = reference_round(start, retain, forget, inner_clip=0.05, outer_clip="joint", outer_clip_norm=0.05, **kw)
    if options != {"outer_clip": "joint"}:
        assert (paper - expected).norm() > 1e-2 * (expected - theta0).norm()


def test_beta_zero_inner_loop_is_plain_forget_ascent():
    # β = 0 removes the decorrelation term: the inner loop no longer sees the retain batch, so with ρ = 0 and a
    # negligible outer step the round is T steps of ascent on L_f, which β > 0 changes.
    moved = {}
    for beta in (0.0, 0.5):
        net = tiny_mlp()
        start = copy.deepcopy(net)
        module = OFMUModule(net, inner_steps=2, inner_lr=0.05, beta=beta, outer_lr=1e-12, rho=0.0)
        dm = digits_dm()
        quick_trainer(1, limit_val_batches=0).fit(module, dm)
        moved[beta] = [p.detach() - p0.detach() for p, p0 in zip(module.network.parameters(), start.parameters())]
    _, forget = first_pair(dm)
    ascent = copy.deepcopy(start)
    for _ in range(2):
        grads = torch.autograd.grad(F.cross_entropy(ascent(forget[0]), forget[1]), list(ascent.parameters()))
        with torch.no_grad():
            for p, g in zip(ascent.parameters(), grads):
                p.add_(0.05 * g)
    for m, p, p0 in zip(moved[0.0], ascent.parameters(), start.parameters()):
        torch.testing.assert_close(m, p.detach() - p0.detach(), rtol=1e-4, atol=1e-7)
    assert any((a - b).abs().max() > 1e-4 for a, b in zip(moved[0.0], moved[0.5]))


def test_the_logged_inner_shift_and_outer_step_are_the_rounds_two_displacements():
    """ofmu/inner_shift_norm is ‖θ_T − θ_0‖ (the T ascent steps) and ofmu/outer_step_norm is η_out·‖d‖; with a
    negligible outer step the round ends at θ_T, so the first is how far the weights moved."""
    class Keep(Callback):
        logs = {}

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            Keep.logs = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("ofmu/")}

    net = tiny_mlp()
    start = copy.deepcopy(net)
    module = OFMUModule(net, inner_steps=3, inner_lr=0.05, beta=0.3, outer_lr=1e-12, rho=0.5)
    quick_trainer(1, limit_val_batches=0, callbacks=[Keep()]).fit(module, digits_dm())
    moved = torch.cat([(p - p0).detach().reshape(-1) for p, p0 in zip(net.parameters(), start.parameters())]).norm()
    assert Keep.logs["ofmu/inner_shift_norm"] == pytest.approx(float(moved), rel=1e-4) and float(moved) > 0
    assert Keep.logs["ofmu/outer_step_norm"] == pytest.approx(1e-12 * Keep.logs["ofmu/outer_norm"], rel=1e-6)


def test_rho_scheduler_sets_and_logs_rho_and_resume_mid_schedule_is_exact(tmp_path):
    def run(max_steps, ckpt_path=None, folder="a"):
        torch.manual_seed(0)
        module = OFMUModule(tiny_mlp(), inner_steps=2, inner_lr=0.02, beta=0.2, outer_lr=0.05)
        sched = RhoScheduler("linear", rho0=0.1, rate=0.2, cap=0.5)
        saver = FinalCheckpoint(dirpath=str(tmp_path / folder), every_n_train_steps=2, save_last=True)
        trainer = quick_trainer(max_steps, callbacks=[sched, saver], enable_checkpointing=True,
                                limit_val_batches=0)
        trainer.fit(module, digits_dm(), ckpt_path=ckpt_path)
        return module, sched, trainer

    straight, sched, trainer = run(5)
    assert sched.current == pytest.approx(0.5)  # 0.1 + 0.2·4, capped at 0.5
    assert trainer.callback_metrics["ofmu/rho"].item() == pytest.approx(0.5)
    assert straight.rho == pytest.approx(0.5)
    run(3, folder="b")  # interrupted after round 3 (mid-epoch, mid-schedule)
    resumed, sched_b, _ = run(5, ckpt_path=str(tmp_path / "b" / "last.ckpt"), folder="b")
    for a, b in zip(straight.network.parameters(), resumed.network.parameters()):
        assert torch.equal(a, b)
    assert sched_b.current == sched.current


def test_a_schedule_without_rho0_rises_from_the_modules_rho_also_after_a_resume(tmp_path):
    """rho0=None: ρ_0 is the module's `rho` as built (what a bench grid sets), read once; a resumed run, whose module
    comes back holding the last round's ρ, still rises from the first run's ρ_0."""
    def run(max_steps, ckpt_path=None, folder="a"):
        torch.manual_seed(0)
        module = OFMUModule(tiny_mlp(), inner_steps=1, inner_lr=0.02, outer_lr=0.05, rho=0.01)
        sched = RhoScheduler("geometric", rho0=None, rate=2.0, cap=None)
        saver = FinalCheckpoint(dirpath=str(tmp_path / folder), every_n_train_steps=2, save_last=True)
        quick_trainer(max_steps, callbacks=[sched, saver], enable_checkpointing=True,
                      limit_val_batches=0).fit(module, digits_dm(), ckpt_path=ckpt_path)
        return module, sched

    straight, sched = run(4)
    assert sched.start == 0.01 and sched.current == pytest.approx(0.01 * 2 ** 3) and straight.rho == sched.current
    run(2, folder="b")
    resumed, sched_b = run(4, ckpt_path=str(tmp_path / "b" / "last.ckpt"), folder="b")
    assert sched_b.start == 0.01 and sched_b.current == sched.current
    for a, b in zip(straight.network.parameters(), resumed.network.parameters()):
        assert torch.equal(a, b)


def test_a_schedule_per_forget_epoch_rises_once_per_pass_over_the_forget_set():
    """per="forget_epoch": ρ_k = ρ_0·rate^k with k the whole passes over the forget set drawn before the round, read
    from the data (here 3.x rounds a pass), so ρ holds over several rounds and differs from the per-round form."""
    class Record(Callback):
        def __init__(self):
            self.rhos = []

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            self.rhos.append(pl_module.rho)

    def run(per):
        torch.manual_seed(0)
        dm = digits_dm(forget_batch_size=48)
        record = Record()
        quick_trainer(9, limit_val_batches=0, callbacks=[RhoScheduler("geometric", rho0=0.01, rate=2.0, cap=None,
                                                                      per=per), record]).fit(
            OFMUModule(tiny_mlp(), inner_steps=1, inner_lr=0.02, outer_lr=0.05), dm)
        return record.rhos, len(dm.forget_set)

    per_pass, n_forget = run("forget_epoch")
    assert 48 < n_forget < 4 * 48  # several rounds a pass, and the passes end mid-round
    # passes completed by the 48·step items drawn before round `step`, counted rather than divided
    passes = [sum(1 for m in range(1, 10) if m * n_forget <= 48 * step) for step in range(9)]
    assert per_pass == [pytest.approx(0.01 * 2.0 ** k) for k in passes]
    assert len(set(passes)) >= 3 and len(set(passes)) < 9
    per_round, _ = run("round")
    assert per_round == [pytest.approx(0.01 * 2.0 ** k) for k in range(9)] and per_round != per_pass


def test_a_schedule_per_forget_epoch_names_what_it_needs():
    with pytest.raises(UserError, match="leave every_n_steps at 1"):
        RhoScheduler("geometric", rate=1.1, per="forget_epoch", every_n_steps=2)
    with pytest.raises(UserError, match="choose one of"):
        RhoScheduler("geometric", rate=1.1, per="epoch")
    plain = SimpleNamespace(train_dataloader=torch.utils.data.DataLoader(torch.utils.data.TensorDataset(
        torch.zeros(4, 2))))  # no forget set to count passes over
    with pytest.raises(UserError, match="per='forget_epoch'.*retain/forget data module"):
        RhoScheduler("geometric", rate=1.1, per="forget_epoch").on_train_start(plain, None)


def test_stationarity_tolerance_stops_training():
    module = OFMUModule(tiny_mlp(), inner_steps=1, stationarity_tol=1e9)
    trainer = quick_trainer(10, limit_val_batches=0)
    trainer.fit(module, digits_dm())
    assert module.stationary_at == 1 and trainer.global_step == 1  # rounds completed when it fired


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="hvp"):
        OFMUModule(tiny_mlp(), hvp="exact")
    with pytest.raises(ValueError, match="rho and beta"):
        OFMUModule(tiny_mlp(), rho=-1)
    with pytest.raises(ValueError, match="inner_lr"):
        OFMUModule(tiny_mlp(), inner_lr=0)
    with pytest.raises(ValueError, match="rate > 0"):
        RhoScheduler("geometric", rate=0)


def _pairs(dm, n):
    """The first n (retain, forget) batch pairs a fit on `dm` sees, in order."""
    dm.setup("fit")
    loader = iter(dm.train_dataloader())
    return [next(loader) for _ in range(n)]


def test_the_papers_form_with_a_rising_rho_matches_the_formulas_round_after_round():
    """T = 5 inner steps, ρ_k rising from 0.01 by the RhoScheduler, no clip anywhere, exact HVPs: three rounds of
    the module against three rounds of the float64 reimplementation with ρ_k = 0.01 + 0.05 k. The logged ρ_k is the
    schedule's at each round, and the same run without the scheduler (ρ = 1 throughout) lands elsewhere."""
    kw = dict(inner_steps=5, inner_lr=0.05, beta=0.3, outer_lr=0.05)
    seen = []

    class Record(pl.Callback):
        def on_train_batch_end(self, trainer, pl_module, *args):
            seen.append((trainer.global_step - 1, pl_module.rho, float(trainer.callback_metrics["ofmu/rho"])))

    def run(callbacks):
        net = tiny_mlp()
        module = OFMUModule(copy.deepcopy(net), hvp="autograd", **kw)
        quick_trainer(3, callbacks=callbacks, limit_val_batches=0).fit(module, digits_dm())
        return net, torch.cat([p.detach().reshape(-1) for p in module.network.parameters()]).double()

    start, got = run([RhoScheduler("linear", rho0=0.01, rate=0.05, cap=None), Record()])
    assert [(k, rho) for k, rho, _ in seen] == [(k, pytest.approx(0.01 + 0.05 * k)) for k in range(3)]
    assert all(logged == pytest.approx(rho) for _, rho, logged in seen)
    net = copy.deepcopy(start)
    for k, (retain, forget) in enumerate(_pairs(digits_dm(), 3)):
        theta = reference_round(net, retain, forget, rho=0.01 + 0.05 * k, **kw)
        _, unflat = flat_view(net)
        with torch.no_grad():
            for (name, p), value in zip(net.named_parameters(), unflat(theta).values()):
                p.copy_(value.to(p.dtype))
    expected = torch.cat([p.detach().reshape(-1) for p in net.parameters()]).double()
    theta0 = torch.cat([p.detach().reshape(-1) for p in start.parameters()]).double()
    assert (got - expected).norm() <= 1e-4 * (expected - theta0).norm()
    _, constant = run([])
    assert (constant - got).norm() > 1e-2 * (got - theta0).norm()


def test_the_finite_difference_check_tells_a_sane_step_from_an_absurd_one():
    """ofmu/hvp_fd_cos compares the finite-difference HVP with the exact one at the outer point, logged during the
    run: float32 with h = 1e-3 agrees, h = 1e-9 (below float32's resolution) does not."""
    checks = {}
    for h in (1e-3, 1e-9):
        module = OFMUModule(tiny_mlp(), hvp="finite_difference", fd_step=h, beta=0.3, inner_steps=1,
                            hvp_check_every_n_steps=1)
        trainer = quick_trainer(1, limit_val_batches=0)
        trainer.fit(module, digits_dm())
        checks[h] = {k: float(trainer.callback_metrics[k]) for k in ("ofmu/hvp_fd_cos", "ofmu/hvp_fd_norm_ratio")}
    assert checks[1e-3]["ofmu/hvp_fd_cos"] > 0.99 and abs(checks[1e-3]["ofmu/hvp_fd_norm_ratio"] - 1) < 0.05, checks
    assert checks[1e-9]["ofmu/hvp_fd_cos"] < 0.9 or abs(checks[1e-9]["ofmu/hvp_fd_norm_ratio"] - 1) > 0.5, checks


def test_the_linear_weighting_ablation_takes_one_step_on_the_same_terms():
    """structure="linear" (the paper's ablation of the bi-level structure): θ − η_out·(∇L_r − λ·∇Φ), written out in
    float64; λ = 0 is retain descent alone, and λ > 0 lands elsewhere."""
    net, dm = tiny_mlp(), digits_dm()
    retain, forget = first_pair(dm)
    start = copy.deepcopy(net)
    theta0, unflat = flat_view(copy.deepcopy(net).double())
    ref = copy.deepcopy(net).double()
    (xr, yr), (xf, yf) = (retain[0].double(), retain[1]), (forget[0].double(), forget[1])

    def loss(t, x, y):
        return F.cross_entropy(functional_call(ref, unflat(t), (x,)), y)

    def expected(lam, beta=0.3, lr=0.05):
        t = theta0.clone().requires_grad_(True)
        gf = torch.autograd.grad(loss(t, xf, yf), t, create_graph=True)[0]
        gr = torch.autograd.grad(loss(t, xr, yr), t, create_graph=True)[0]
        phi = loss(t, xf, yf) - beta * torch.dot(gf, gr) / (gf.norm() * gr.norm())
        grad_phi = torch.autograd.grad(phi, t, retain_graph=True)[0]
        return theta0 - lr * (gr.detach() - lam * grad_phi)

    for lam in (0.0, 2.0):
        module = OFMUModule(copy.deepcopy(start), structure="linear", linear_weight=lam, beta=0.3, outer_lr=0.05,
                            inner_steps=5, rho=10.0)  # no inner loop and no penalty: inner_steps and rho unused
        quick_trainer(1, limit_val_batches=0).fit(module, digits_dm())
        got = torch.cat([p.detach().reshape(-1) for p in module.network.parameters()]).double()
        want = expected(lam)
        assert (got - want).norm() <= 1e-4 * (want - theta0).norm(), lam
    assert (expected(2.0) - expected(0.0)).norm() > 1e-2 * (expected(0.0) - theta0).norm()
    with pytest.raises(Exception, match="structure='nested'"):
        OFMUModule(tiny_mlp(), structure="nested")
