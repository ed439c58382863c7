"""HAMU's closed form against a generic constrained solver (scipy SLSQP) and brute-force facts."""

import numpy as np
import pytest
import torch
from scipy.optimize import minimize

from lit_unlearn.algorithms import Branch, allocate_quota, clip_scales, hamu_step, solve_blocks


def slsqp(objective_vec, cons, radius, d, maximise=False, seed=0):
    """min (or max) c·δ s.t. every (w, q) in cons: w·δ ≥ q, and ‖δ‖ ≤ radius. Returns (value, δ) or None."""
    sign = -1.0 if maximise else 1.0
    c = np.asarray(objective_vec, dtype=float)
    constraints = [{"type": "ineq", "fun": (lambda x, w=w, q=q: w @ x - q), "jac": (lambda x, w=w: w)} for w, q in cons]
    constraints.append({"type": "ineq", "fun": lambda x: radius**2 - x @ x, "jac": lambda x: -2 * x})
    best = None
    rng = np.random.default_rng(seed)
    for _ in range(6):  # a few starts: SLSQP is local and the ball makes the problem non-linear
        x0 = rng.normal(size=d)
        x0 *= 0.5 * radius / np.linalg.norm(x0)
        res = minimize(lambda x: sign * (c @ x), x0, jac=lambda x: sign * c, constraints=constraints,
                       method="SLSQP", options={"ftol": 1e-14, "maxiter": 500})
        x = res.x
        ok = all(w @ x - q >= -1e-7 for w, q in cons) and x @ x <= radius**2 * (1 + 1e-7) + 1e-14
        if ok and (best is None or sign * (c @ x) < sign * (c @ best)):
            best = x
    return None if best is None else (float(c @ best), best)


def random_pair(rng, d):
    gr = rng.normal(size=d)
    # Mix in a component of gr to sweep the angle from anti-aligned to aligned.
    gf = rng.normal(size=d) + rng.uniform(-2, 2) * gr
    gr *= rng.uniform(0.05, 1.0) / np.linalg.norm(gr)
    gf *= rng.uniform(0.05, 1.0) / np.linalg.norm(gf)
    return gr, gf


def stats(gr, gf):
    t = lambda v: torch.tensor([v], dtype=torch.float64)  # noqa: E731
    return t(gr @ gr), t(gf @ gf), t(gr @ gf)


def delta_from(step, gr, gf):
    return step.coef_f.item() * gf + step.coef_r.item() * gr


def test_closed_form_matches_slsqp_on_random_instances():
    rng = np.random.default_rng(0)
    branches = {b: 0 for b in Branch}
    for trial in range(160):
        d = int(rng.integers(2, 12))
        gr, gf = random_pair(rng, d)
        eta = float(rng.uniform(0.01, 1.0))
        radius = eta * np.linalg.norm(gr)
        quota = float(rng.uniform(0.0, 0.95)) * radius * np.linalg.norm(gf)  # feasible by construction
        step = hamu_step(*stats(gr, gf), eta=eta, quota=quota, clip_norm=None)
        branches[Branch(step.solution.branch.item())] += 1
        delta = delta_from(step, gr, gf)
        # Closed form satisfies both constraints.
        assert gf @ delta >= quota - 1e-9
        assert np.linalg.norm(delta) <= radius * (1 + 1e-9)
        ref = slsqp(gr, [(gf, quota)], radius, d, seed=trial)
        assert ref is not None
        # Same optimum: ours is never worse and SLSQP never finds better beyond its tolerance.
        assert gr @ delta == pytest.approx(ref[0], abs=1e-6 * max(1.0, abs(ref[0])) + 1e-8)
    assert branches[Branch.DIRECT] > 10 and branches[Branch.CORRECTED] > 10


def test_corrected_branch_predicts_exactly_the_quota():
    rng = np.random.default_rng(1)
    seen = 0
    for _ in range(100):
        gr, gf = random_pair(rng, 8)
        eta = 0.3
        quota = 0.5 * eta * np.linalg.norm(gr) * np.linalg.norm(gf)
        step = hamu_step(*stats(gr, gf), eta=eta, quota=quota, clip_norm=None)
        if step.solution.branch.item() == Branch.CORRECTED:
            seen += 1
            # First-order predicted forget change g_f·δ equals Q: the constraint is active.
            assert step.pred_delta_forget.item() == pytest.approx(quota, rel=1e-10)
            assert np.linalg.norm(delta_from(step, gr, gf)) == pytest.approx(eta * np.linalg.norm(gr), rel=1e-10)
        elif step.solution.branch.item() == Branch.DIRECT:
            # Direct step: plain retain descent of length R, forget gain at least Q.
            np.testing.assert_allclose(delta_from(step, gr, gf), -eta * gr, rtol=1e-12)
            assert step.pred_delta_forget.item() >= quota - 1e-12
    assert seen > 20


def test_kappa2_matches_infeasibility_with_no_retain_degradation():
    """κ > κ2  ⟺  {g_f·δ ≥ Q, ‖δ‖ ≤ R, g_r·δ ≤ 0} is empty (checked by maximising g_f·δ with SLSQP)."""
    rng = np.random.default_rng(2)
    outcomes = {True: 0, False: 0}
    for trial in range(150):
        d = int(rng.integers(2, 8))
        gr, gf = random_pair(rng, d)
        eta = float(rng.uniform(0.05, 1.0))
        radius = eta * np.linalg.norm(gr)
        quota = float(rng.uniform(0.05, 0.95)) * radius * np.linalg.norm(gf)
        sol = solve_blocks(*stats(gr, gf), torch.tensor([quota], dtype=torch.float64),
                           torch.tensor([radius], dtype=torch.float64))
        kappa, kappa2 = sol.kappa.item(), sol.kappa2.item()
        if abs(kappa - kappa2) < 1e-3 * (np.linalg.norm(gr) * np.linalg.norm(gf)):
            continue  # too close to the boundary for a numerical solver to call
        best = slsqp(gf, [(-gr, 0.0)], radius, d, maximise=True, seed=trial)
        assert best is not None  # δ = 0 is always feasible here
        infeasible = best[0] < quota
        assert (kappa > kappa2) == infeasible, (kappa, kappa2, best[0], quota)
        # Aggregate form: reachable gain without retain degradation equals SLSQP's maximum.
        assert sol.reachable_gain.item() == pytest.approx(best[0], abs=1e-6)
        outcomes[infeasible] += 1
    assert outcomes[True] > 10 and outcomes[False] > 10


def test_hamu_u_matches_slsqp():
    rng = np.random.default_rng(3)
    for trial in range(100):
        d = int(rng.integers(2, 10))
        gr, gf = random_pair(rng, d)
        eta = float(rng.uniform(0.05, 1.0))
        radius = eta * np.linalg.norm(gf)
        u = float(rng.uniform(0.0, 0.95)) * radius * np.linalg.norm(gr)
        step = hamu_step(*stats(gr, gf), eta=eta, quota=u, variant="U", clip_norm=None)
        delta = delta_from(step, gr, gf)
        assert -gr @ delta >= u - 1e-9
        assert np.linalg.norm(delta) <= radius * (1 + 1e-9)
        ref = slsqp(gf, [(-gr, u)], radius, d, maximise=True, seed=trial)
        assert gf @ delta == pytest.approx(ref[0], abs=1e-6 * max(1.0, abs(ref[0])) + 1e-8)
        assert step.pred_delta_retain.item() == pytest.approx(gr @ delta, abs=1e-12)


def test_per_layer_step_equals_independent_blockwise_solutions():
    rng = np.random.default_rng(4)
    sizes = [3, 5, 2, 7]
    gr = [rng.normal(size=s) * 0.2 for s in sizes]
    gf = [rng.normal(size=s) * 0.2 + 0.5 * g for s, g in zip(sizes, gr)]
    rr = torch.tensor([a @ a for a in gr], dtype=torch.float64)
    ff = torch.tensor([b @ b for b in gf], dtype=torch.float64)
    rf = torch.tensor([a @ b for a, b in zip(gr, gf)], dtype=torch.float64)
    eta, q_total = 0.5, 0.2
    step = hamu_step(rr, ff, rf, eta=eta, quota=q_total, clip_norm=None)
    weights = np.sqrt(rr.numpy() * ff.numpy())
    np.testing.assert_allclose(step.quota.numpy(), q_total * weights / weights.sum(), rtol=1e-12)
    for i, (a, b) in enumerate(zip(gr, gf)):
        radius = eta * np.linalg.norm(a)
        ref = slsqp(a, [(b, step.quota[i].item())], radius, len(a), seed=i)
        delta = step.coef_f[i].item() * b + step.coef_r[i].item() * a
        assert a @ delta == pytest.approx(ref[0], abs=1e-7)


def test_global_block_equals_concatenated_problem():
    rng = np.random.default_rng(5)
    gr, gf = random_pair(rng, 12)
    eta, q = 0.4, 0.05
    one = hamu_step(*stats(gr, gf), eta=eta, quota=q, clip_norm=None)
    ref = slsqp(gr, [(gf, q)], eta * np.linalg.norm(gr), 12)
    assert gr @ delta_from(one, gr, gf) == pytest.approx(ref[0], abs=1e-7)
    # In a single block the aggregate stopping test is exactly κ > κ2.
    sol = one.solution
    assert one.irreconcilable == bool(sol.kappa.item() > sol.kappa2.item())


def test_clipping_on_statistics_equals_clipping_the_tensors():
    rng = np.random.default_rng(6)
    gr, gf = rng.normal(size=9) * 3.0, rng.normal(size=9) * 0.1  # only g_r exceeds norm 1
    assert np.linalg.norm(gf) < 1.0 < np.linalg.norm(gr)
    cr, cf = clip_scales(torch.tensor(gr @ gr), torch.tensor(gf @ gf), 1.0)
    assert cr.item() == pytest.approx(1.0 / np.linalg.norm(gr)) and cf.item() == 1.0
    raw = hamu_step(*stats(gr, gf), eta=0.3, quota=0.05, clip_norm=1.0)
    gr_c = gr / max(1.0, np.linalg.norm(gr))
    pre = hamu_step(*stats(gr_c, gf), eta=0.3, quota=0.05, clip_norm=None)
    np.testing.assert_allclose(delta_from(raw, gr, gf), delta_from(pre, gr_c, gf), rtol=1e-12, atol=1e-15)


def test_colinear_and_antiparallel_gradients():
    g = np.array([0.3, -0.1, 0.2, 0.4])
    eta, q = 0.5, 0.02
    # Aligned (g_r ∥ g_f, same sign): the hardest case; minimum-norm optimum (Q/‖g_f‖²) g_f.
    step = hamu_step(*stats(0.8 * g, g), eta=eta, quota=q, clip_norm=None)
    assert step.solution.branch.item() == Branch.COLINEAR
    np.testing.assert_allclose(delta_from(step, 0.8 * g, g), q / (g @ g) * g, rtol=1e-12)
    ref = slsqp(0.8 * g, [(g, q)], eta * np.linalg.norm(0.8 * g), 4)
    assert (0.8 * g) @ delta_from(step, 0.8 * g, g) == pytest.approx(ref[0], abs=1e-8)
    # Anti-aligned: the easiest case, plain retain descent already forgets.
    step = hamu_step(*stats(-0.8 * g, g), eta=eta, quota=q, clip_norm=None)
    assert step.solution.branch.item() == Branch.DIRECT
    assert not step.irreconcilable  # strongly anti-aligned gradients must never trigger a stop


def test_zero_gradients():
    g = np.array([0.3, -0.1, 0.2])
    z = np.zeros(3)
    # Zero forget gradient with the ‖g‖-product allocation: Q_i = 0, constraint vacuous -> retain descent.
    step = hamu_step(*stats(g, z), eta=0.5, quota=0.1, clip_norm=None)
    np.testing.assert_allclose(delta_from(step, g, z), -0.5 * g)
    assert step.irreconcilable  # nothing can be forgotten at all
    # Zero forget gradient with a uniform quota > 0: infeasible; best effort R ĝ_f = 0, no NaN.
    step = hamu_step(*stats(g, z), eta=0.5, quota=0.1, allocation="uniform", clip_norm=None)
    assert step.solution.branch.item() == Branch.INFEASIBLE
    assert np.all(np.isfinite(delta_from(step, g, z)))
    # Zero retain gradient: R = 0, the only admissible step is 0.
    step = hamu_step(*stats(z, g), eta=0.5, quota=0.0, clip_norm=None)
    np.testing.assert_allclose(delta_from(step, z, g), 0.0)
    # Both zero.
    step = hamu_step(*stats(z, z), eta=0.5, quota=0.0, clip_norm=1.0)
    assert torch.isfinite(step.coef_f).all() and torch.isfinite(step.coef_r).all()


def test_infeasible_quota_policies():
    rng = np.random.default_rng(7)
    gr, gf = random_pair(rng, 6)
    eta = 0.2
    radius = eta * np.linalg.norm(gr)
    q = 2.0 * radius * np.linalg.norm(gf)  # twice what the ball can deliver
    step = hamu_step(*stats(gr, gf), eta=eta, quota=q, clip_norm=None)
    assert step.solution.branch.item() == Branch.INFEASIBLE and not step.solution.feasible.item()
    # best_effort: the largest forget gain in the ball (checked against SLSQP) at δ = R ĝ_f.
    delta = delta_from(step, gr, gf)
    best = slsqp(gf, [], radius, 6, maximise=True)
    assert gf @ delta == pytest.approx(best[0], rel=1e-6)
    assert np.isnan(step.solution.kappa2.item())
    skip = hamu_step(*stats(gr, gf), eta=eta, quota=q, clip_norm=None, infeasible="skip")
    np.testing.assert_allclose(delta_from(skip, gr, gf), 0.0)


def test_norm_product_feasibility_is_one_global_test():
    rng = np.random.default_rng(8)
    for _ in range(50):
        n = int(rng.integers(1, 6))
        rr = torch.tensor(rng.uniform(0.001, 0.2, size=n), dtype=torch.float64)
        ff = torch.tensor(rng.uniform(0.001, 0.2, size=n), dtype=torch.float64)
        rf = torch.tensor(rng.uniform(-1, 1, size=n), dtype=torch.float64) * (rr * ff).sqrt()
        eta = 0.3
        bound = eta * (rr * ff).sqrt().sum().item()
        q = float(rng.uniform(0.5, 1.5)) * bound
        step = hamu_step(rr, ff, rf, eta=eta, quota=q, clip_norm=None)
        assert bool(step.solution.feasible.all()) == (q <= bound)


def test_quota_allocations():
    rr = torch.tensor([1.0, 4.0, 0.0], dtype=torch.float64)
    ff = torch.tensor([1.0, 1.0, 9.0], dtype=torch.float64)
    rf = torch.tensor([0.5, -1.0, 0.0], dtype=torch.float64)
    np.testing.assert_allclose(allocate_quota(3.0, rr, ff, rf, "norm_product").numpy(), [1.0, 2.0, 0.0])
    np.testing.assert_allclose(allocate_quota(3.0, rr, ff, rf, "uniform").numpy(), [1.0, 1.0, 1.0])
    e = np.exp(-rf.numpy())
    np.testing.assert_allclose(allocate_quota(3.0, rr, ff, rf, "softmax_dot").numpy(), 3.0 * e / e.sum())
    with pytest.raises(ValueError, match="choose one of"):
        allocate_quota(1.0, rr, ff, rf, "bogus")


def test_bad_inputs_raise_clear_errors():
    ok = torch.tensor([0.1], dtype=torch.float64)
    with pytest.raises(FloatingPointError, match="non-finite"):
        hamu_step(torch.tensor([float("nan")]), ok, ok, eta=0.1, quota=0.01)
    with pytest.raises(FloatingPointError, match="non-finite"):
        hamu_step(ok, torch.tensor([float("inf")]), ok, eta=0.1, quota=0.01, clip_norm=None)
    with pytest.raises(ValueError, match="eta"):
        hamu_step(ok, ok, ok, eta=-0.1, quota=0.01)  # η = 0 is allowed: a step that does not move
    with pytest.raises(ValueError, match="quota"):
        hamu_step(ok, ok, ok, eta=0.1, quota=-1.0)
    with pytest.raises(ValueError, match="variant"):
        hamu_step(ok, ok, ok, eta=0.1, quota=0.01, variant="X")
    with pytest.raises(ValueError, match="1-D"):
        hamu_step(ok, torch.ones(2, dtype=torch.float64), ok, eta=0.1, quota=0.01)
