"""HAMU's statistics and step at the edges of floating point: nearly and exactly colinear gradients, huge and tiny
norms, low-precision gradients. References: exact rational arithmetic (fractions) for small vectors, float64
recomputation of the applied update for large ones."""

from fractions import Fraction

import numpy as np
import pytest
import torch

from lit_unlearn.algorithms import Branch, allocate_quota, combine_into, hamu_step, tensor_stats
from lit_unlearn.algorithms.hamu import colinear_tolerance


def applied_delta64(step, grads_f, grads_r, precise=True):
    """The update the module applies (combine in the gradients' dtype, float64 where ill-conditioned), in float64."""
    from lit_unlearn.modules.hamu import PRECISE_COMBINE_ABOVE

    out = [g.clone() for g in grads_f]
    u = torch.finfo(grads_f[0].dtype).eps / 2
    flags = ((2 * u * step.conditioning) > PRECISE_COMBINE_ABOVE).tolist() if precise else None
    combine_into(out, out, grads_r, step.coef_f.tolist(), step.coef_r.tolist(), flags)
    return [o.double() for o in out]


def issue_reproducer(dtype=torch.float32, sin=2.5e-4 / 0.5):
    g = torch.Generator().manual_seed(13)
    d = 36864
    gr = torch.randn(d, generator=g, dtype=torch.float64)
    o = torch.randn(d, generator=g, dtype=torch.float64)
    o -= (o @ gr) / (gr @ gr) * gr
    gf = (0.5 * gr / gr.norm() + 0.5 * sin * o / o.norm()).to(dtype)
    return (0.3 * gr / gr.norm()).to(dtype), gf


def test_the_issue_reproducer_keeps_the_trust_region():
    gr, gf = issue_reproducer()
    st = hamu_step(*tensor_stats([gr], [gf]), eta=1e-2, quota=7.5e-4, clip_norm=None, sizes=torch.tensor([36864.]))
    exact = (st.coef_f * gf.double() + st.coef_r * gr.double()).norm() / st.radius
    assert exact.item() <= 1 + 1e-6  # was 2.43 with float32 statistics
    applied = applied_delta64(st, [gf], [gr])[0].norm() / st.radius
    assert applied.item() <= 1 + 1e-6
    assert st.solution.branch.item() == Branch.CORRECTED  # sin θ = 5e-4 is resolvable in float64


def exact_perp_fraction(a, b):
    """‖a⊥‖²/‖a‖² with a⊥ = a − (a·b/‖b‖²)b, in exact rational arithmetic."""
    fa, fb = [Fraction(float(x)) for x in a], [Fraction(float(x)) for x in b]
    aa, bb, ab = sum(x * x for x in fa), sum(x * x for x in fb), sum(x * y for x, y in zip(fa, fb))
    return (aa - ab * ab / bb) / aa


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_near_colinear_gradients_get_the_exact_branch_and_stay_in_the_ball(dtype):
    rng = np.random.default_rng(0)
    n = 64
    for sin in [0.0, 1e-8, 1e-6, 1e-4, 1e-3, 1e-2, 1e-1, 0.5]:
        for _ in range(4):
            base = rng.normal(size=n)
            other = rng.normal(size=n)
            other -= other @ base / (base @ base) * base
            gr = torch.tensor(rng.uniform(0.2, 2.0) * base / np.linalg.norm(base)).to(dtype)
            gf = torch.tensor(base / np.linalg.norm(base) + sin * other / np.linalg.norm(other)).to(dtype)
            stats = tensor_stats([gr], [gf])
            ref = tensor_stats([gr.double()], [gf.double()])
            for s, r in zip(stats, ref):  # float64 statistics of the low-precision tensors, bit for bit
                assert torch.equal(s, r)
            quota = float(rng.uniform(1e-4, 5e-3))
            st = hamu_step(*stats, eta=0.05, quota=quota, clip_norm=None, sizes=torch.tensor([float(n)]))
            branch = st.solution.branch.item()
            if branch in (Branch.COLINEAR, Branch.CORRECTED):
                # The decision agrees with exact arithmetic wherever the exact value is clear of the tolerance.
                perp = exact_perp_fraction(gr.double().numpy(), gf.double().numpy())
                tol = colinear_tolerance(n).item()
                if perp > 100 * tol:
                    assert branch == Branch.CORRECTED, (sin, dtype)
                elif perp < tol / 100:
                    assert branch == Branch.COLINEAR, (sin, dtype)
            delta = applied_delta64(st, [gf], [gr])[0]
            r = st.radius.item()
            assert delta.norm().item() <= r * (1 + 1e-6) + 1e-300, (sin, dtype, branch)
            if st.solution.feasible.item():  # the quota, up to rounding δ into the gradients' dtype
                u = torch.finfo(dtype).eps / 2
                slack = 4 * u * max(st.conditioning.item(), 1.0) * np.linalg.norm(gf.double()) * r
                assert (gf.double() @ delta).item() >= quota - slack - 1e-12


def test_exactly_colinear_float32_tensors_take_the_colinear_branch():
    gr, gf = torch.tensor([0.4074]), torch.tensor([0.7341])
    st = hamu_step(*tensor_stats([gr], [gf]), eta=1.0, quota=0.05, clip_norm=None, sizes=torch.tensor([1.0]))
    assert st.solution.branch.item() in (Branch.COLINEAR, Branch.DIRECT)
    assert st.solution.branch.item() != Branch.CORRECTED  # was coef_f = 364, coef_r = −656
    assert abs(st.coef_f.item()) < 1 and abs(st.coef_r.item()) < 1


def test_huge_finite_gradients_are_clipped_not_an_error():
    rng = np.random.default_rng(1)
    gr = torch.tensor(rng.normal(size=100) * 5e19, dtype=torch.float32)  # norm ≈ 5e20: squares overflow fp32
    gf = torch.tensor(rng.normal(size=100) * 1e20, dtype=torch.float32)
    assert torch.isfinite(gr).all() and not torch.isfinite((gr * gr).sum())
    st = hamu_step(*tensor_stats([gr], [gf]), eta=0.1, quota=0.01, clip_norm=1.0)
    assert torch.isfinite(st.coef_f).all() and torch.isfinite(st.coef_r).all()
    delta = applied_delta64(st, [gf], [gr])[0]
    assert delta.norm().item() <= 0.1 * (1 + 1e-6)  # R = η·‖clipped g_r‖ = η


def test_tiny_forget_gradient_is_infeasible_not_a_free_direct_step():
    gr = torch.tensor([0.6, -0.8], dtype=torch.float32)
    gf = torch.tensor([3e-20, 1e-20], dtype=torch.float32)  # ‖g_f‖² underflows in float32
    st = hamu_step(*tensor_stats([gr], [gf]), eta=0.1, quota=1e-3, clip_norm=1.0)
    assert st.quota.item() == pytest.approx(1e-3)  # the quota is not lost to an underflow
    assert st.solution.branch.item() == Branch.INFEASIBLE


def test_norm_product_allocation_is_finite_over_the_whole_float64_range():
    rr = torch.tensor([1e-300, 1e300, 1.0], dtype=torch.float64)
    ff = torch.tensor([1e-300, 1e300, 4.0], dtype=torch.float64)
    q = allocate_quota(1.0, rr, ff, torch.zeros(3, dtype=torch.float64), "norm_product")
    assert torch.isfinite(q).all()
    w = [Fraction(1, 10**300), Fraction(10**300), Fraction(2)]  # sqrt(rr)·sqrt(ff), exactly
    expected = [float(x / sum(w)) for x in w]
    np.testing.assert_allclose(q.numpy(), expected, rtol=1e-12, atol=1e-300)


def test_statistics_of_large_tensors_are_chunked_float64():
    from lit_unlearn.algorithms import blocks

    rng = np.random.default_rng(2)
    a = torch.tensor(rng.normal(size=blocks.STATS_CHUNK * 2 + 17), dtype=torch.float32)
    b = torch.tensor(rng.normal(size=a.numel()), dtype=torch.float32)
    rr, ff, rf = tensor_stats([a], [b])
    ref = np.dot(a.double().numpy().astype(np.longdouble), b.double().numpy().astype(np.longdouble))
    assert rf.item() == pytest.approx(float(ref), rel=1e-12)
