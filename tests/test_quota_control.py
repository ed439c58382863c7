"""HAMU's quota in raw units, its feasibility limit, and the controller's (Q_t, η_t), checked against the solver
itself (`hamu_step`'s own predicted gain and branch counts) and against brute force over blocks."""

import math

import numpy as np
import pytest
import torch

from lit_unlearn.algorithms import hamu_step
from lit_unlearn.algorithms.quota import (
    forget_clip_scale,
    predicted_forget_gain,
    quota_limit,
    raw_to_clipped_quota,
    reachable_gain,
    steer,
)


def random_stats(rng, n=12, scale=3.0, anti=0.6):
    gr = [rng.normal(size=rng.integers(2, 30)) * scale for _ in range(n)]
    gf = [-anti * g + rng.normal(size=g.shape) * scale for g in gr]  # mostly κ_i < 0, some > 0
    rr = torch.tensor([g @ g for g in gr], dtype=torch.float64)
    ff = torch.tensor([g @ g for g in gf], dtype=torch.float64)
    rf = torch.tensor([a @ b for a, b in zip(gr, gf)], dtype=torch.float64)
    return rr, ff, rf


def test_raw_units_demand_the_raw_first_order_increase():
    rng = np.random.default_rng(0)
    rr, ff, rf = random_stats(rng)
    raw = 0.7
    q = raw_to_clipped_quota(raw, ff.sum(), clip_norm=1.0)
    assert forget_clip_scale(ff.sum(), 1.0) == pytest.approx(1.0 / ff.sum().sqrt().item())
    step = hamu_step(rr, ff, rf, eta=5.0, quota=q, clip_norm=1.0)
    assert step.branch_counts()["infeasible"] == 0
    # pred_delta_forget is G_f·δ on the raw gradients: at least the raw quota (equal where no block is direct).
    assert step.pred_delta_forget.item() >= raw - 1e-9


@pytest.mark.parametrize("allocation", ["norm_product", "uniform", "softmax_dot"])
def test_quota_limit_is_the_feasibility_boundary(allocation):
    rng = np.random.default_rng(1)
    for _ in range(20):
        rr, ff, rf = random_stats(rng)
        eta = float(rng.uniform(0.01, 0.5))
        limit = quota_limit(rr, ff, rf, eta=eta, allocation=allocation, clip_norm=1.0)
        below = hamu_step(rr, ff, rf, eta=eta, quota=limit * (1 - 1e-9), allocation=allocation, clip_norm=1.0)
        above = hamu_step(rr, ff, rf, eta=eta, quota=limit * (1 + 1e-6), allocation=allocation, clip_norm=1.0)
        assert below.branch_counts()["infeasible"] == 0
        assert above.branch_counts()["infeasible"] >= 1
    if allocation == "norm_product":  # one global number: η·Σ‖g_r⁽ⁱ⁾‖‖g_f⁽ⁱ⁾‖ on the clipped statistics
        c = 1 / max(1.0, rr.sum().sqrt().item()) / max(1.0, ff.sum().sqrt().item())
        assert limit == pytest.approx(eta * c * (rr * ff).sqrt().sum().item(), rel=1e-12)


def test_predicted_gain_is_the_solvers_first_order_gain():
    rng = np.random.default_rng(2)
    for _ in range(30):
        rr, ff, rf = random_stats(rng)
        eta = float(rng.uniform(0.01, 0.5))
        q = quota_limit(rr, ff, rf, eta=eta) * float(rng.uniform(0, 1))
        step = hamu_step(rr, ff, rf, eta=eta, quota=q, clip_norm=1.0)
        # The solver reports the raw G_f·δ; in clipped units that is s_f·G_f·δ.
        s_f = forget_clip_scale(ff.sum(), 1.0)
        assert predicted_forget_gain(rr, ff, rf, quota=q, eta=eta) == pytest.approx(
            s_f * step.pred_delta_forget.item(), rel=1e-9, abs=1e-15)


def test_steering_hits_the_wanted_gain_and_stays_feasible():
    rng = np.random.default_rng(3)
    regimes = set()
    for _ in range(200):
        rr, ff, rf = random_stats(rng, anti=float(rng.uniform(-0.8, 0.8)))  # κ_i mostly < 0, or mostly > 0
        eta = float(rng.uniform(0.01, 0.5))
        distance = float(rng.choice([-1.0, 0.0, 10 ** rng.uniform(-3, 1), 1e3]))
        st = steer(rr, ff, rf, distance=distance, horizon=10, eta=eta, max_fraction=0.9)
        assert 0 <= st.eta <= eta and st.quota >= 0
        assert st.quota <= 0.9 * quota_limit(rr, ff, rf, eta=st.eta) + 1e-15  # Q_t feasible at η_t
        step = hamu_step(rr, ff, rf, eta=st.eta, quota=st.quota, clip_norm=1.0)
        assert step.branch_counts()["infeasible"] == 0
        # ... and within the κ₂ bound: the solver's own aggregate rule never calls the step irreconcilable.
        assert st.eta == 0 or not step.is_irreconcilable("aggregate")
        assert step.reachable_gain == pytest.approx(reachable_gain(rr, ff, rf, eta=st.eta), rel=1e-9, abs=1e-15)
        gain = forget_clip_scale(ff.sum(), 1.0) * step.pred_delta_forget.item()
        q_full = 0.9 * min(quota_limit(rr, ff, rf, eta=eta), reachable_gain(rr, ff, rf, eta=eta))
        full = predicted_forget_gain(rr, ff, rf, quota=q_full, eta=eta)
        expected = min(max(st.wanted_gain, 0.0), full)
        assert gain == pytest.approx(expected, rel=1e-6, abs=1e-12)
        if distance <= 0:  # nothing more to forget: Q = 0, and no forget gain (η_t = 0 if retain descent forgets)
            assert st.quota == 0.0 and abs(gain) < 1e-12
            assert st.eta == (eta if predicted_forget_gain(rr, ff, rf, quota=0.0, eta=eta) == 0 else 0.0)
        regimes.add("eta" if 0 < st.eta < eta else "quota" if 0 < st.quota < 0.9 * st.limit else "other")
    assert {"eta", "quota"} <= regimes  # both control regimes were exercised


def test_zero_step_size_does_not_move():
    rng = np.random.default_rng(4)
    rr, ff, rf = random_stats(rng)
    step = hamu_step(rr, ff, rf, eta=0.0, quota=0.0)
    assert torch.count_nonzero(step.coef_f) == 0 and torch.count_nonzero(step.coef_r) == 0
    with pytest.raises(ValueError, match="horizon"):
        steer(rr, ff, rf, distance=1.0, horizon=0, eta=0.1)
    assert not math.isnan(steer(rr, ff, rf, distance=math.nan, horizon=5, eta=0.1).eta)


def test_a_reachable_share_quota_binds_the_step_at_exactly_its_share():
    """quota_units='reachable': Q = share × the forget gain the step can reach without raising the retain loss. On
    constructed statistics where every block's gradients conflict (g_r·g_f > 0, so retain descent alone forgets
    nothing), the step's first-order forget gain is exactly Q, each block on the constrained branch, and the κ₂ rule
    (reachable < Q) fires only when the share passes 1."""
    import torch

    from lit_unlearn.algorithms.hamu import Branch, hamu_step
    from lit_unlearn.algorithms.quota import reachable_gain

    g = torch.Generator().manual_seed(3)
    rr = torch.rand(6, generator=g, dtype=torch.float64) + 0.5
    ff = torch.rand(6, generator=g, dtype=torch.float64) + 0.5
    rf = 0.6 * (rr * ff).sqrt()                      # cos 0.6 in every block: a conflict
    eta = 0.1
    reach = reachable_gain(rr, ff, rf, eta=eta, clip_norm=None)
    for share in (0.25, 0.5, 0.9):
        quota = share * reach
        step = hamu_step(rr, ff, rf, eta=eta, quota=quota, clip_norm=None, allocation="norm_product")
        assert float(step.pred_delta_forget) == pytest.approx(quota, rel=1e-9)
        assert float(step.pred_delta_forget) > 0 and not step.irreconcilable
        assert all(b in (Branch.CORRECTED, Branch.COLINEAR) for b in step.solution.branch.tolist())
    over = hamu_step(rr, ff, rf, eta=eta, quota=1.2 * reach, clip_norm=None)
    assert over.irreconcilable


def test_the_module_asks_its_reachable_share_each_step():
    """HAMUModule(quota_units='reachable', quota=0.5): the logged quota is half the logged reachable gain, and a share
    outside (0, 1] or variant U is refused in one line."""
    from helpers import digits_dm, quick_trainer, tiny_mlp
    from lit_unlearn.core.errors import UserError
    from lit_unlearn.modules import HAMUModule

    module = HAMUModule(tiny_mlp(), eta=0.05, quota=0.5, quota_units="reachable", clip_norm=1.0)
    trainer = quick_trainer(1, limit_val_batches=0)
    trainer.fit(module, digits_dm())
    logged = trainer.callback_metrics
    assert float(logged["hamu/quota"]) == pytest.approx(0.5 * float(logged["hamu/reachable_gain"]), rel=1e-5)
    for bad in (dict(quota=1.5), dict(quota=0.5, variant="U")):
        with pytest.raises(UserError):
            HAMUModule(tiny_mlp(), eta=0.05, quota_units="reachable", **{"quota": 0.5, **bad})
