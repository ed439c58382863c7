"""HAMUModule glue: the update it applies, its logs, BatchNorm freezing, errors, and the κ₂ stopping callback."""

import glob

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import digits_dm, first_pair, quick_trainer
from lightning.pytorch.loggers import TensorBoardLogger
from lit_unlearn.callbacks import KappaEarlyStopping
from lit_unlearn.core.errors import UserError

from lit_unlearn.algorithms import block_index, block_stats, hamu_step, tensor_stats
from lit_unlearn.data import (
    ArrayDataset,
    PairedDataModule,
)
from lit_unlearn.models import CifarResNet
from lit_unlearn.modules import GradDiffModule, HAMUModule


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # runs without a logger write their results table into the working directory


_trainer = quick_trainer
_first_pair = first_pair


def _dm(**kw):
    return digits_dm(**kw)


def _reference_grads(dm):
    """Plain-autograd g_r, g_f of the first batch pair at the initial weights (BatchNorm frozen, as trained)."""
    retain, forget = _first_pair(dm)
    net = _net()
    for m in net.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.eval()
    params = list(net.named_parameters())
    grad = lambda b: torch.autograd.grad(F.cross_entropy(net(b[0]), b[1]), [p for _, p in params])  # noqa: E731
    return params, grad(retain), grad(forget)


def _net(seed=0):
    torch.manual_seed(seed)
    return CifarResNet(depth=8, num_classes=10, in_channels=1)


@pytest.mark.parametrize("grouping", ["parameter", "module", "global"])
@pytest.mark.parametrize("variant", ["Q", "U"])
def test_one_step_applies_the_closed_form_update(grouping, variant):
    dm = _dm()
    module = HAMUModule(_net(), eta=0.05, quota=0.01, variant=variant, grouping=grouping)
    before = {n: p.detach().clone() for n, p in module.network.named_parameters()}
    _trainer(1, limit_val_batches=0).fit(module, dm)

    # Independent recomputation with plain autograd on the first pair of batches (_net() is seeded: the same
    # initial weights as `before`).
    params, gr, gf = _reference_grads(dm)
    assert all(torch.equal(p, before[n]) for n, p in params)
    idx, names = block_index(params, grouping)
    stats = [block_stats(s, idx, len(names)) for s in tensor_stats(gr, gf)]
    step = hamu_step(*stats, eta=0.05, quota=0.01, variant=variant)
    # Constraint check in clipped coordinates: each block meets its quota inside its trust region.
    cr = min(1.0, 1.0 / float(torch.sqrt(sum((g ** 2).sum() for g in gr))))
    cf = min(1.0, 1.0 / float(torch.sqrt(sum((g ** 2).sum() for g in gf))))
    for k, (name, _) in enumerate(params):
        delta = module.network.get_parameter(name).detach() - before[name]
        expected = step.coef_f[idx[k]] * gf[k] + step.coef_r[idx[k]] * gr[k]
        torch.testing.assert_close(delta, expected.float(), rtol=1e-4, atol=1e-7)
    for b in range(len(names)):
        members = [k for k in range(len(params)) if idx[k] == b]
        d = [module.network.get_parameter(params[k][0]).detach() - before[params[k][0]] for k in members]
        norm = float(torch.sqrt(sum((x.double() ** 2).sum() for x in d)))
        assert norm <= step.radius[b].item() * (1 + 1e-4) + 1e-9
        gain_f = sum(float((cf * gf[k].double() * x.double()).sum()) for k, x in zip(members, d))
        gain_r = -sum(float((cr * gr[k].double() * x.double()).sum()) for k, x in zip(members, d))
        if step.solution.feasible[b]:
            got = gain_f if variant == "Q" else gain_r
            assert got >= step.quota[b].item() * (1 - 1e-3) - 1e-9


def test_logs_reach_tensorboard_and_measured_change_tracks_prediction(tmp_path):
    module = HAMUModule(_net(), eta=0.05, quota=0.01, measure_every_n_steps=1)
    trainer = _trainer(6, logger=TensorBoardLogger(str(tmp_path), name="run"), val_check_interval=3)
    trainer.fit(module, _dm())
    m = trainer.callback_metrics
    for key in ["hamu/kappa_mean", "hamu/kappa1_mean", "hamu/kappa2_mean", "hamu/branch_corrected",
                "hamu/retain_grad_norm", "hamu/forget_grad_norm", "hamu/pred_delta_forget_loss",
                "hamu/pred_neg_delta_retain_loss", "hamu/meas_delta_forget_loss", "hamu/meas_neg_delta_retain_loss",
                "unlearn/delta_forget_loss", "unlearn/neg_delta_retain_loss", "val/test_acc"]:
        assert key in m, key
    # Small steps: the measured forget-loss change is close to the first-order prediction.
    assert m["hamu/meas_delta_forget_loss"].item() == pytest.approx(m["hamu/pred_delta_forget_loss"].item(), rel=0.3)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(glob.glob(str(tmp_path / "run" / "version_0"))[0])
    ea.Reload()
    assert len(ea.Scalars("hamu/kappa_mean")) == 6
    assert (tmp_path / "run" / "version_0" / "results.md").is_file()


def test_batchnorm_statistics_stay_frozen():
    module = HAMUModule(_net(), eta=0.05, quota=0.01, measure_every_n_steps=1)
    stats_before = [b.clone() for n, b in module.network.named_buffers() if "running" in n]
    bn_weight = module.network.bn1.weight.detach().clone()
    _trainer(3, limit_val_batches=0).fit(module, _dm())
    stats_after = [b for n, b in module.network.named_buffers() if "running" in n]
    assert all(torch.equal(a, b) for a, b in zip(stats_before, stats_after))
    assert not torch.equal(bn_weight, module.network.bn1.weight)  # affine parameters are still unlearned


class _NaNData(PairedDataModule):
    def build(self):
        x = torch.randn(16, 1, 8, 8)
        x[3] = float("nan")
        ds = ArrayDataset(x, torch.zeros(16, dtype=torch.long))
        return ds, ds, {}


def test_nan_loss_raises_a_clear_error():
    module = HAMUModule(_net(), eta=0.05, quota=0.01)
    with pytest.raises(FloatingPointError, match="retain loss is nan"):
        _trainer(1).fit(module, _NaNData(retain_batch_size=16, forget_batch_size=16))


def test_bad_hyperparameters():
    with pytest.raises(ValueError, match="grouping"):
        HAMUModule(_net(), grouping="layers")
    with pytest.raises(ValueError, match="eta"):
        HAMUModule(_net(), eta=-1.0)
    with pytest.warns(UserWarning, match="Q < η"):
        HAMUModule(_net(), eta=0.01, quota=0.02)
    with pytest.raises(FileNotFoundError, match="lit-unlearn pretrain"):
        HAMUModule(_net(), target_ckpt="/no/such/target.ckpt")


def test_kappa_callback_stops_before_applying_the_irreconcilable_update():
    # Q above η ≥ η·Σ‖g_r⁽ⁱ⁾‖‖g_f⁽ⁱ⁾‖: every step is irreconcilable; patience 3 -> two updates, the third vetoed.
    with pytest.warns(UserWarning, match="Q < η"):
        module = HAMUModule(_net(), eta=1e-3, quota=1.5e-3)
    cb = KappaEarlyStopping(patience=3)
    trainer = _trainer(50, limit_val_batches=0, callbacks=[cb])
    trainer.fit(module, _dm())
    assert cb.stopped_step == 2 and trainer.global_step == 2
    assert cb.state_dict() == {"wait": 3, "stopped_step": 2, "would_stop_step": 2}
    # monitor_only: records the same point and trains on.
    with pytest.warns(UserWarning, match="Q < η"):
        module = HAMUModule(_net(), eta=1e-3, quota=1.5e-3)
    watch = KappaEarlyStopping(patience=3, monitor_only=True)
    trainer = _trainer(8, limit_val_batches=0, callbacks=[watch])
    trainer.fit(module, _dm())
    assert watch.would_stop_step == 2 and watch.stopped_step is None and trainer.global_step == 8


class _FakeStep:
    def __init__(self, bad):
        self.bad = bad

    def is_irreconcilable(self, criterion, epsilon):
        return self.bad(epsilon)


def test_kappa_callback_patience_soft_margin_and_state():
    cb = KappaEarlyStopping(mode="soft", epsilon=0.5, patience=2, verbose=False)
    # Irreconcilable only within the soft margin (epsilon > 0).
    soft_only = _FakeStep(lambda eps: eps > 0)
    assert cb.allows_update(soft_only) and cb.wait == 1
    assert cb.allows_update(_FakeStep(lambda eps: False)) and cb.wait == 0  # a good step resets
    assert cb.allows_update(soft_only)
    assert not cb.allows_update(soft_only) and cb.stopped_step == 0
    restored = KappaEarlyStopping(mode="soft", epsilon=0.5, patience=2)
    restored.load_state_dict(cb.state_dict())
    assert restored.state_dict() == cb.state_dict()
    hard = KappaEarlyStopping(mode="hard", epsilon=0.5, verbose=False)
    assert hard.allows_update(soft_only)  # hard mode ignores the margin
    with pytest.raises(UserError, match="KappaEarlyStopping needs a module that asks registered guards.*use HAMUModule"):
        _trainer(1, callbacks=[KappaEarlyStopping()]).fit(GradDiffModule(_net()), _dm())


def test_global_criterion_uses_kappa_and_kappa2_on_the_full_gradient():
    rng = np.random.default_rng(0)
    for _ in range(30):
        n = 4
        rr = torch.tensor(rng.uniform(0.01, 0.2, n), dtype=torch.float64)
        ff = torch.tensor(rng.uniform(0.01, 0.2, n), dtype=torch.float64)
        rf = torch.tensor(rng.uniform(-0.5, 1, n), dtype=torch.float64) * (rr * ff).sqrt()
        step = hamu_step(rr, ff, rf, eta=0.5, quota=float(rng.uniform(0.01, 0.3)), clip_norm=None)
        g = step.global_solution
        assert step.is_irreconcilable("global", 0.0) == (g.kappa.item() > g.kappa2.item() or np.isnan(g.kappa2.item()))
        single = hamu_step(rr.sum().reshape(1), ff.sum().reshape(1), rf.sum().reshape(1), eta=0.5,
                           quota=step.total_quota, clip_norm=None)
        assert single.is_irreconcilable("aggregate") == step.is_irreconcilable("global")


def test_graddiff_moves_along_the_gradient_difference():
    dm = _dm()
    module = GradDiffModule(_net(), lr=0.1)
    before = [p.detach().clone() for p in module.network.parameters()]
    _trainer(1, limit_val_batches=0).fit(module, dm)
    _, gr, gf = _reference_grads(dm)
    for b, p, a, c in zip(before, module.network.parameters(), gr, gf):
        torch.testing.assert_close(p.detach() - b, -0.1 * 0.5 * (a - c), rtol=1e-4, atol=1e-7)


def test_final_checkpoint_keeps_the_weights_of_an_early_stop(tmp_path):
    from lit_unlearn.callbacks import FinalCheckpoint

    with pytest.warns(UserWarning, match="Q < η"):
        module = HAMUModule(_net(), eta=1e-3, quota=1.5e-3)
    ckpt = FinalCheckpoint(dirpath=str(tmp_path), every_n_train_steps=10)
    trainer = _trainer(50, limit_val_batches=0, callbacks=[KappaEarlyStopping(patience=3), ckpt],
                       enable_checkpointing=True)
    trainer.fit(module, _dm())
    saved = torch.load(tmp_path / "last.ckpt", map_location="cpu", weights_only=True)
    assert saved["global_step"] == 2
    for name, p in module.network.named_parameters():
        assert torch.equal(saved["state_dict"][f"network.{name}"], p.detach())
